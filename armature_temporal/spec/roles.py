"""Who does a stage's work: its :class:`Role` (prompt, tier, tools) and the bandit :class:`Arm`
variants that override it. Importable from :mod:`armature_temporal.spec.models`."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from armature_temporal.spec.context_window import ContextField
from armature_temporal.spec.fields import RoleType, Seconds, StrList, _Model

__all__ = ["DEFAULT_REASONING_PROMPT", "REASONING_DESCRIPTION", "Arm", "Role"]

#: What a ``reason_first`` stage's private reasoning call is asked, after the stage's own prompt.
DEFAULT_REASONING_PROMPT = (
    "Before answering, think the task through: what exactly is asked, what could go wrong, "
    "and how you will check the answer. Write only your reasoning, not the answer; it is "
    "private: no one but you will read it."
)
#: The description of ``reason_first`` (on a role and on an arm).
REASONING_DESCRIPTION = (
    "Reason before acting: each attempt first makes a private reasoning call (the stage's "
    "prompt plus reasoning_prompt, text out, no tools) and then the answer call with that "
    "reasoning in its prompt. The reasoning is recorded in the stage's trace (data.reasoning, "
    "marked private) and counted in its tokens, cost and latency; it is never in the stage's "
    "output, so no later stage, template or run context sees it."
)


class Role(_Model):
    """Who does a stage's work: the prompt, the tier and the tools."""

    name: str | None = Field(
        None, min_length=1, description="A short human name for the role (default: the stage id)."
    )
    type: RoleType = Field(
        "worker",
        description="worker (default tier small), orchestrator (frontier), judge (frontier; "
        "returns a score in [0,1]) or researcher (large).",
    )
    description: str = Field(
        ...,
        min_length=1,
        description="The prompt: a Jinja template over inputs, dependency outputs "
        "({{ stage_id.field }}, {{ stage_id.content }}), prior_run and loop variables.",
    )
    model_tier: str | None = Field(
        None, description="Tier to use; defaults from role_type_defaults or the role type."
    )
    temperature: float | None = Field(None, ge=0, le=2, description="Overrides the tier's.")
    max_tokens: int | None = Field(None, gt=0, description="Overrides the tier's.")
    tools: StrList = Field(
        default_factory=list,
        description="Tools the model may call in a loop (built-in names or module:function).",
    )
    skills: StrList = Field(
        default_factory=list,
        description="Ids from skill_library whose text is added to this role's prompt.",
    )
    max_turns: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Bound on model turns in the tool-calling loop (at most 10,000; above 200 "
        "only with the context policy on: see context).",
    )
    context: ContextField = Field(
        None,
        description="This role's tool-loop window (fields over the spec's context:); see context.",
    )
    max_tokens_total: int | None = Field(
        None,
        ge=1,
        description="Budget of the stage's tool loop in tokens (prompt and reply, every model "
        "call): once spent, the model is asked for its answer without tools, and the trace "
        "and the stage's progress say why.",
    )
    max_cost_usd: float | None = Field(
        None, gt=0, description="Budget of the stage's tool loop in USD, as max_tokens_total."
    )
    deadline: Seconds | None = Field(
        None,
        gt=0,
        description="Wall-clock budget of the stage's tool loop from its first model call "
        "(seconds, or e.g. '30m'), as max_tokens_total.",
    )
    reason_first: bool = Field(False, description=REASONING_DESCRIPTION)
    reasoning_tier: str | None = Field(
        None,
        description="With reason_first: the tier of the reasoning call (default: the stage's "
        "tier for that attempt).",
    )
    reasoning_prompt: str | None = Field(
        None,
        min_length=1,
        description="With reason_first: plain text (not a template) asking for the reasoning, "
        f"added after the stage's prompt (default: '{DEFAULT_REASONING_PROMPT}').",
    )

    @model_validator(mode="after")
    def _reasoning_needs_reason_first(self) -> Role:
        _check_reasoning(self.reason_first, self.reasoning_tier, self.reasoning_prompt)
        return self


class Arm(_Model):
    """A bandit variant of a stage; the selected arm's fields override the stage's own."""

    arm_id: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="Stable id of the arm.")
    model_tier: str | None = Field(None, description="Tier this arm uses.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="temperature, max_tokens or provider params."
    )
    description: str | None = Field(None, description="Prompt template this arm uses.")
    reason_first: bool | None = Field(
        None,
        description="This arm reasons before acting (true) or not (false); unset: as the "
        "stage's role. " + REASONING_DESCRIPTION,
    )
    reasoning_tier: str | None = Field(
        None,
        description="With reason_first: the reasoning call's tier (default: the role's "
        "reasoning_tier, else the arm's tier).",
    )
    reasoning_prompt: str | None = Field(
        None,
        min_length=1,
        description="With reason_first: the reasoning request (default: the role's).",
    )

    @model_validator(mode="after")
    def _reasoning_needs_reason_first(self) -> Arm:
        _check_reasoning(self.reason_first, self.reasoning_tier, self.reasoning_prompt)
        return self


def _check_reasoning(on: bool | None, tier: str | None, prompt: str | None) -> None:
    set_ = [n for n, v in (("reasoning_tier", tier), ("reasoning_prompt", prompt)) if v]
    if set_ and not on:
        raise ValueError(
            f"{' and '.join(set_)} shape the private reasoning call of reason_first, which is "
            f"{on!r} here; add reason_first: true or remove {' and '.join(set_)}"
        )
