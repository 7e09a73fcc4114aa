"""The tool layer's data: what a tool is (ToolSpec), what a call returns (ToolResult), and the
sandbox a call runs in (ToolContext). All are frozen pydantic models, safe to send through
Temporal's pydantic data converter."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "Permission",
    "Reversibility",
    "ToolContext",
    "ToolErrorType",
    "ToolResult",
    "ToolSpec",
]

#: How far a tool call can be undone: ``full`` (no lasting effect, or trivially undone),
#: ``partial`` (some effects can be undone) or ``none``. Safety rules see it as the pseudo-field
#: ``_tool_reversibility``.
Reversibility = Literal["full", "partial", "none"]

#: The permission level an armature-agents 0.7.0 tool module gives a tool. ``destructive``: every
#: call waits for a person's approval; verification runs call only ``read_only`` tools.
Permission = Literal["read_only", "workspace", "network", "destructive"]

#: Why a call failed. ``policy_blocked`` covers both safety rules and the tool's own sandbox
#: (a path outside the workspace, a host not in the allow-list).
ToolErrorType = Literal[
    "tool_error",
    "timeout",
    "invalid_args",
    "postcondition_failed",
    "policy_blocked",
    "unknown_tool",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolSpec(_Frozen):
    """What the model (and the safety policy) knows about a tool."""

    name: str = Field(..., min_length=1, description="Built-in name or module:function.")
    description: str = Field("", description="What the tool does, for the model.")
    parameters: dict[str, Any] = Field(
        ..., description="JSON Schema (an object schema) of the tool's arguments."
    )
    reversibility: Reversibility = Field(
        ..., description="Worst case over its calls; see tool_reversibility() for one call."
    )
    permission: Permission | None = Field(
        None, description="Set for tools a 0.7.0 tool module registered; None for the rest."
    )


class ToolResult(_Frozen):
    """The outcome of one tool call. ``ok`` is False exactly when ``error_type`` is set."""

    ok: bool
    output: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON-safe output. A failed call may still carry partial output "
        "(e.g. what a timed-out command printed).",
    )
    error_type: ToolErrorType | None = None
    error: str | None = None

    @model_validator(mode="after")
    def _ok_xor_error(self) -> ToolResult:
        if self.ok and (self.error_type is not None or self.error is not None):
            raise ValueError("a successful ToolResult has no error_type or error")
        if not self.ok and (self.error_type is None or not self.error):
            raise ValueError("a failed ToolResult needs an error_type and an error message")
        return self

    @classmethod
    def success(cls, output: dict[str, Any]) -> ToolResult:
        """A successful call with this output."""
        return cls(ok=True, output=output)

    @classmethod
    def failure(
        cls, error_type: ToolErrorType, error: str, output: dict[str, Any] | None = None
    ) -> ToolResult:
        """A failed call, e.g. ``ToolResult.failure("policy_blocked", decision.message)``."""
        return cls(ok=False, output=output or {}, error_type=error_type, error=error)


class ToolContext(_Frozen):
    """The sandbox of a tool call: where files live, how long and how much it may take."""

    workspace: Path = Field(
        ..., description="Root directory; file tools and shell cwd stay inside it."
    )
    timeout_s: float = Field(30.0, gt=0, description="Upper bound on one call, in seconds.")
    output_cap_bytes: int = Field(
        64_000, gt=0, description="Cap on each text output (file content, stdout, stderr, body)."
    )
    http_allow_hosts: tuple[str, ...] = Field(
        (),
        description="Hosts http_request may reach (exact names, or *.example.com for "
        "subdomains); empty allows none.",
    )
    http_safe: tuple[tuple[str, tuple[str, ...]], ...] = Field(
        (),
        description="(host, methods) pairs the spec marks safe (http_safe): http_request calls "
        "to such a host with such a method are fully reversible; any other is reversibility "
        "none. Hosts as in http_allow_hosts.",
    )
    max_write_bytes: int = Field(
        10_000_000, gt=0, description="Cap on the content file_write may write."
    )
    network: bool = Field(
        False,
        description="The spec grants this call network (sandbox.allow_network, or network: "
        "true on its stage): a program it runs reaches the outside through the egress proxy; "
        "without it a program has no network at all. Loopback is never reachable.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables a program this call runs gets besides PATH, LANG, LC_*, TZ, "
        "HOME and TMPDIR (the spec's sandbox.env).",
    )
    checked: dict[str, str] | None = Field(
        None,
        description="The pseudo-fields the safety policy checked for this call "
        "(tools.resolved_fields), or None when no policy checked it. A tool that resolves "
        "something itself uses these instead of resolving again: shell runs exactly the "
        "_executable checked (and nothing when it was not found).",
    )

    @field_validator("http_allow_hosts")
    @classmethod
    def _normalise_hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h.strip().lower().rstrip(".").strip("[]") for h in hosts if h.strip())
