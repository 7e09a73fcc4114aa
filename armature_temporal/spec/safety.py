"""The spec's safety sections: the declarative rules checked before every tool call
(:class:`SafetyRule` with its :class:`Condition`), and the requests it marks safe
(:class:`HttpSafe`). Importable from :mod:`armature_temporal.spec.models`; the policy that
applies them is :mod:`armature_temporal.runtime.policy`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from armature_temporal.spec.fields import RuleAction, RuleOp, _Model

__all__ = ["Condition", "HttpMethod", "HttpSafe", "SafetyRule"]

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
