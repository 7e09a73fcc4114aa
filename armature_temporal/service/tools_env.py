"""A tools worker's queue (:func:`tools_task_queue`) and its environment: the parent's,
without secrets.

A tools worker (``armature worker --tools-only``) runs shell commands, adapters and Python tools
that a model chose: it must hold nothing worth stealing. :func:`tools_worker_env` is the
environment ``armature worker`` and the embedded stack start one with. The rule
(:func:`is_secret`), applied to every variable:

- dropped when its name contains one of :data:`SECRET_WORDS` (``KEY``, ``TOKEN``, ``SECRET``,
  ``PASSW``, ``CREDENTIAL``, ``AUTH``, ``COOKIE``, ``SESSION``, ``PRIVATE``, ``DSN``,
  ``WEBHOOK``, ``SERVICE_ACCOUNT``): every litellm provider key (``OPENAI_API_KEY``,
  ``ANTHROPIC_API_KEY``, ``HF_TOKEN``, ``WATSONX_APIKEY``, ``GOOGLE_APPLICATION_CREDENTIALS``
  ...), ``ARMATURE_WEBHOOK_SECRET``, ``SENTRY_DSN``, ``SLACK_WEBHOOK_URL``;
- dropped when it starts with a cloud or model provider's prefix (:data:`SECRET_PREFIXES`:
  ``AWS_``, ``AZURE_``, ``GOOGLE_``, ``VERTEX``, ``OPENAI``, ``ANTHROPIC`` ...), whatever
  follows (``AZURE_API_BASE``, ``AWS_REGION_NAME`` go too);
- dropped when its value is a URL with credentials in it (``user:password@``, or an HTTP(S)
  ``token@``: ``ARMATURE_DB_URL=postgresql://u:pw@h/db``, ``DATABASE_URL``, ``REDIS_URL``
  ...); a tools worker does not use the trace store;
- kept otherwise, and always for the Temporal connection (:data:`KEEP_ALWAYS`: the worker must
  reach its server) and the names listed in ``$ARMATURE_TOOLS_ENV_KEEP`` (comma-separated: a
  credential one of your Python tools needs, on purpose).

Tool programs themselves never see even this: each gets
:func:`~armature_temporal.tools.sandbox.minimal_env`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = [
    "KEEP_ALWAYS",
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
    "PASSW",
    "CREDENTIAL",
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
#: Kept whatever the rule says: how the tools worker reaches its Temporal server.
KEEP_ALWAYS = frozenset(
    {
        "TEMPORAL_ADDRESS",
        "TEMPORAL_NAMESPACE",
        "TEMPORAL_TLS_CERT",
        "TEMPORAL_TLS_KEY",
        "TEMPORAL_API_KEY",
    }
)
#: ``scheme://user:password@``, or ``https://token@`` (a user name alone is no secret).
_URL_WITH_CREDENTIALS = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@|https?://[^/@\s]+@)", re.IGNORECASE
)


def is_secret(name: str, value: str) -> bool:
    """Whether a tools worker must not inherit ``name=value`` (the module docstring's rule)."""
    upper = name.upper()
    return (
        any(word in upper for word in SECRET_WORDS)
        or upper.startswith(SECRET_PREFIXES)
        or _URL_WITH_CREDENTIALS.match(value.strip()) is not None
    )


def tools_worker_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without its secrets, for a tools worker."""
    environ = os.environ if environ is None else environ
    keep = {n.strip() for n in environ.get("ARMATURE_TOOLS_ENV_KEEP", "").split(",") if n.strip()}
    return {
        name: value
        for name, value in environ.items()
        if name in KEEP_ALWAYS or name in keep or not is_secret(name, value)
    }
