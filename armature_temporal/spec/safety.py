"""The spec's safety sections: the declarative rules checked before every tool call
(:class:`SafetyRule` with its :class:`Condition`). Importable from
:mod:`armature_temporal.spec.models`; the policy that applies them is
:mod:`armature_temporal.runtime.policy`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from armature_temporal.spec.fields import RuleAction, RuleOp, _Model

__all__ = ["Condition", "SafetyRule"]


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
