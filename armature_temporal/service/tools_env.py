"""A tools worker's queue (:func:`tools_task_queue`) and its environment: an allow-list of the
parent's.

A tools worker (``armature worker --tools-only``) runs shell commands, adapters and Python tools
that a model chose: it must hold nothing worth stealing. :func:`tools_worker_env` is the
environment ``armature worker`` and the embedded stack start one with, and what a tools worker
started by hand keeps of its own. It is built from an allow-list, never a deny-list (a deny-list
let ``DB_PASS``, ``MYSQL_PWD`` and ``GH_PAT`` through):

- :data:`KEEP_NAMES`: the Temporal connection (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
  ``TEMPORAL_TLS_CERT``, ``TEMPORAL_TLS_KEY``, ``TEMPORAL_API_KEY``: the worker must reach its
  server), the ``ARMATURE_*`` settings a tools worker reads (``ARMATURE_HOME``, which it must
  know to hide it from tool programs, the task queue, workspace, payload, sandbox and egress
  settings), ``PATH``, ``HOME``, ``TMPDIR``, ``TZ``, ``LANG``, ``PYTHONPATH``, ``VIRTUAL_ENV``,
  ``LD_LIBRARY_PATH``, CA bundles and the HTTP proxy settings (without credentials in them);
- :data:`KEEP_PREFIXES`: ``LC_*``;
- ``ARMATURE_DB_URL`` only for an SQLite store (a path: the sandbox hides that file); a
  server's host goes into ``ARMATURE_SERVICE_HOSTS`` instead, so the egress proxy refuses it;
- the names listed in ``$ARMATURE_TOOLS_ENV_KEEP`` (comma-separated: a credential one of your
  Python tools needs, on purpose).

Tool programs themselves never see even this: each gets
:func:`~armature_temporal.tools.sandbox.minimal_env`. :func:`is_secret` (names and values that
look like credentials) still says which dropped variables were secrets, for the warning a tools
worker prints when it was started with them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from armature_temporal.tools._egress import service_hosts

__all__ = [
    "KEEP_ALWAYS",
    "KEEP_NAMES",
    "KEEP_PREFIXES",
    "SECRET_PREFIXES",
    "SECRET_WORDS",
    "TOOLS_QUEUE_SUFFIX",
    "is_secret",
    "tools_task_queue",
    "tools_worker_env",
]

TOOLS_QUEUE_SUFFIX = "-tools"


def tools_task_queue(task_queue: str) -> str:
    """The task queue the tool activities of runs on ``task_queue`` go to (pure: the workflow
    derives it from its own queue)."""
    return f"{task_queue}{TOOLS_QUEUE_SUFFIX}"


SECRET_WORDS = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASS",
    "_PWD",
    "_PAT",
    "CRED",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "DSN",
    "WEBHOOK",
    "SERVICE_ACCOUNT",
)
SECRET_PREFIXES = (
    "AWS_",
    "AZURE_",
    "GOOGLE_",
    "GCP_",
    "GCLOUD_",
    "VERTEX",
    "OPENAI",
    "ANTHROPIC",
    "COHERE",
    "CO_API",
    "MISTRAL",
    "CODESTRAL",
    "GROQ",
    "GEMINI",
    "PALM_",
    "HUGGINGFACE",
    "HF_",
    "REPLICATE",
    "TOGETHER",
    "DEEPSEEK",
    "XAI_",
    "PERPLEXITY",
    "FIREWORKS",
    "OPENROUTER",
    "OR_",
    "VOYAGE",
    "DATABRICKS",
    "WATSONX",
    "CLOUDFLARE",
    "AI21",
    "NLP_CLOUD",
    "ALEPH_ALPHA",
    "BASETEN",
    "PREDIBASE",
    "SAMBANOVA",
    "CEREBRAS",
    "NVIDIA",
    "ANYSCALE",
    "DEEPINFRA",
    "LITELLM",
    "SAGEMAKER",
    "BEDROCK",
    "OLLAMA",
    "LANGFUSE",
    "LANGSMITH",
    "HELICONE",
)
#: How the tools worker reaches its Temporal server: kept whatever they look like.
KEEP_ALWAYS = frozenset(
    {
        "TEMPORAL_ADDRESS",
        "TEMPORAL_NAMESPACE",
        "TEMPORAL_TLS_CERT",
        "TEMPORAL_TLS_KEY",
        "TEMPORAL_API_KEY",
    }
)
#: Everything else a tools worker keeps (when its value carries no credentials).
KEEP_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "TMPDIR",
        "TZ",
        "LANG",
        "LANGUAGE",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "ARMATURE_HOME",
        "ARMATURE_TASK_QUEUE",
        "ARMATURE_WORKSPACE",
        "ARMATURE_PAYLOAD_DIR",
        "ARMATURE_PAYLOAD_THRESHOLD",
        "ARMATURE_TOOL_OUTPUT_CAP",
        "ARMATURE_STRICT_SANDBOX",
        "ARMATURE_SANDBOX",
        "ARMATURE_SERVICE_HOSTS",
        "ARMATURE_EGRESS_ALLOW_PRIVATE",
        "ARMATURE_TOOLS_ENV_KEEP",
        "ARMATURE_TOOLS_PARENT_PID",
        # Where its traces go (never OTEL_EXPORTER_OTLP_HEADERS: a collector's credentials).
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_EXPORTER",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    }
)
KEEP_PREFIXES = ("LC_",)
#: ``scheme://user:password@``, or ``https://token@`` (a user name alone is no secret).
_URL_WITH_CREDENTIALS = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@|https?://[^/@\s]+@)", re.IGNORECASE
)


def is_secret(name: str, value: str) -> bool:
    """Whether ``name=value`` looks like a credential: a name with one of
    :data:`SECRET_WORDS` in it or one of :data:`SECRET_PREFIXES`, or a URL with credentials."""
    upper = name.upper()
    return (
        any(word in upper for word in SECRET_WORDS)
        or upper.startswith(SECRET_PREFIXES)
        or _URL_WITH_CREDENTIALS.match(value.strip()) is not None
    )


def _kept(name: str, value: str) -> bool:
    if name in KEEP_ALWAYS:
        return True
    if name == "ARMATURE_DB_URL":
        return value.strip().startswith("sqlite:")
    allowed = name in KEEP_NAMES or name.startswith(KEEP_PREFIXES)
    return allowed and _URL_WITH_CREDENTIALS.match(value.strip()) is None


def tools_worker_env(
    environ: Mapping[str, str] | None = None, address: str | None = None
) -> dict[str, str]:
    """The allow-listed part of ``environ`` (default: this process's), for a tools worker
    connecting to ``address``; ``ARMATURE_SERVICE_HOSTS`` names the parent's services."""
    environ = os.environ if environ is None else environ
    keep = {n.strip() for n in environ.get("ARMATURE_TOOLS_ENV_KEEP", "").split(",") if n.strip()}
    env = {name: value for name, value in environ.items() if name in keep or _kept(name, value)}
    hosts = set(service_hosts(environ))
    if address:
        hosts |= service_hosts({"TEMPORAL_ADDRESS": address})
    if hosts:
        env["ARMATURE_SERVICE_HOSTS"] = ",".join(sorted(hosts))
    return env
