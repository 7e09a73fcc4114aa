"""The spec's safety sections: the declarative rules checked before every tool call
(:class:`SafetyRule` with its :class:`Condition`), the requests it marks safe
(:class:`HttpSafe`), and what tool programs may have (:class:`SandboxSettings`, the
``sandbox:`` section). Importable from :mod:`armature_temporal.spec.models`; the policy that
applies the rules is :mod:`armature_temporal.runtime.policy`, the sandbox
:mod:`armature_temporal.tools.sandbox`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from armature_temporal.spec.fields import RuleAction, RuleOp, _Model

__all__ = [
    "NETWORK_DESCRIPTION",
    "Condition",
    "HttpMethod",
    "HttpSafe",
    "SafetyRule",
    "SandboxSettings",
]

#: The methods ``http_request`` sends.
HttpMethod = Literal["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"]


class Condition(_Model):
    """When a safety rule applies."""

    field: str = Field(
        ...,
        min_length=1,
        description="Dot path into the tool's args, or a pseudo-field: _tool_reversibility, "
        "_executable (shell), _resolved_path (file tools).",
    )
    op: RuleOp = Field(..., description="How the field is compared with value.")
    value: Any = Field(None, description="What to compare with (a regex for matches_regex).")


class SafetyRule(_Model):
    """A declarative rule checked before every tool call; the first match wins."""

    tool: str = Field(..., min_length=1, description="Tool name, or * for every tool.")
    condition: Condition | None = Field(None, description="Omit to match every call.")
    action: RuleAction = Field(..., description="allow, block, warn, log or require_approval.")
    message: str = Field("", description="Why; shown in traces and errors.")


class HttpSafe(_Model):
    """Requests the spec marks safe: ``http_request`` to ``host`` with one of ``methods``
    changes nothing there and sends out nothing that matters. Such a call is fully reversible
    (``_tool_reversibility`` sees ``full``, and verification runs may make it); any other
    request is an action, reversibility ``none``."""

    host: str = Field(
        ...,
        min_length=1,
        description="A host name, exactly (any port), or *.example.com for its subdomains; it "
        "must also be in http_allow_hosts to be reached at all.",
    )
    methods: list[HttpMethod] = Field(
        ..., min_length=1, description="The methods safe on that host, e.g. [GET, HEAD]."
    )

    @field_validator("host")
    @classmethod
    def _normalise_host(cls, host: str) -> str:
        return host.strip().lower().rstrip(".").strip("[]")


#: The stage field ``network``, as ``armature schema`` and the spec reference describe it.
NETWORK_DESCRIPTION = (
    "Grant this stage's tool programs (shell, script adapters; an agent stage's calls too) "
    "network: HTTP(S) out through the egress proxy, never loopback, private addresses or the "
    "worker's services. Default: sandbox.allow_network."
)
#: Variables a spec may not set for tool programs: the sandbox sets them.
RESERVED_ENV = frozenset(
    {
        "HOME",
        "TMPDIR",
        "ARMATURE_CONTEXT",
        "ARMATURE_CONTEXT_FILE",
        *(f"{name}_proxy" for name in ("http", "https", "all", "no")),
        *(f"{name}_PROXY" for name in ("HTTP", "HTTPS", "ALL", "NO")),
    }
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOCKER_ONLY = "0.7.0 field (its Docker sandbox), accepted with a warning."
_DOCKER_FIELDS = (
    "mode",
    "image",
    "timeout_s",
    "workspace",
    "host_workspace",
    "cpu_limit",
    "memory_limit",
    "runtime",
    "platform",
)


class SandboxSettings(_Model):
    """What tool programs get (armature-agents 0.7.0's ``sandbox:`` section). They always run
    in Armature's own sandbox; ``allow_network`` and ``env`` act, the Docker fields do not."""

    allow_network: bool = Field(
        False,
        description="Grant every stage's tool programs network (HTTP(S) through the egress "
        "proxy; never loopback or the worker's services); a stage's network: overrides it.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables every tool program gets besides PATH, LANG, LC_*, TZ, HOME "
        "(the workspace) and TMPDIR; values as written (put no secrets in a spec).",
    )
    mode: Any = Field(None, description=_DOCKER_ONLY)
    image: Any = Field(None, description=_DOCKER_ONLY)
    timeout_s: Any = Field(None, description=_DOCKER_ONLY)
    workspace: Any = Field(None, description=_DOCKER_ONLY)
    host_workspace: Any = Field(None, description=_DOCKER_ONLY)
    cpu_limit: Any = Field(None, description=_DOCKER_ONLY)
    memory_limit: Any = Field(None, description=_DOCKER_ONLY)
    runtime: Any = Field(None, description=_DOCKER_ONLY)
    platform: Any = Field(None, description=_DOCKER_ONLY)

    @field_validator("env")
    @classmethod
    def _names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.match(name):
                raise ValueError(
                    f"{name!r} is not an environment variable name (letters, digits, _)"
                )
            if name in RESERVED_ENV:
                raise ValueError(
                    f"{name!r} is set by the sandbox (HOME is the workspace, TMPDIR its "
                    "private /tmp, the proxy variables come with allow_network / network: "
                    "true, ARMATURE_CONTEXT with an adapter's context); leave it out"
                )
        return env

    @property
    def unused(self) -> list[str]:
        """The 0.7.0 Docker fields this spec set (accepted, not acted on)."""
        return [name for name in _DOCKER_FIELDS if getattr(self, name) is not None]
