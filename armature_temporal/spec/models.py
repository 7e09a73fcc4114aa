"""The workflow spec language: pydantic models for every field a spec may hold.

The models check shape and local rules (types, ranges, which fields go together). Rules that
need the whole document — stage references, cycles, tiers, templates, subagent files — live in
:mod:`armature_temporal.spec.checks`, and :mod:`armature_temporal.spec.loader` maps every
problem back to its line in the YAML file. Each field's ``description`` feeds ``armature
schema`` (editor completion) and the spec reference in the README.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from armature_temporal.spec.durations import parse_duration

__all__ = [
    "STANDARD_TIERS",
    "Arm",
    "Condition",
    "Continuation",
    "FinetuneConfig",
    "Gate",
    "LoopConfig",
    "ModelTier",
    "OnFail",
    "RetryLoop",
    "Role",
    "RoleTypeDefault",
    "SafetyRule",
    "SelfImprovement",
    "Spec",
    "Stage",
    "ToolCall",
    "Trigger",
]

RoleType = Literal["worker", "orchestrator", "judge", "researcher"]
OutputMode = Literal["text", "json", "guided_json"]
FanIn = Literal["list", "merge", "first", "consensus"]
RuleOp = Literal["contains", "not_contains", "equals", "not_equals", "matches_regex", "truthy"]
RuleAction = Literal["allow", "block", "warn", "log", "require_approval"]

#: The built-in tier ladder, smallest first. Escalation moves up this order.
STANDARD_TIERS: tuple[str, ...] = ("tiny", "small", "medium", "large", "frontier")

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SPEC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

Seconds = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}]},
        mode="validation",
    ),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _listify(value: Any) -> Any:
    """Accept a single string where a list of strings is expected."""
    return [value] if isinstance(value, str) else value


StrList = Annotated[list[str], BeforeValidator(_listify)]


class ModelTier(_Model):
    """A named model configuration. Stages pick a tier, never a model directly."""

    provider: str = Field(
        "simulate",
        description="litellm provider prefix (openai, anthropic, ollama, hosted_vllm, openrouter, "
        "...), or Armature's own 'simulate' (offline, deterministic) or 'local' (a transformers "
        "model from a local path).",
    )
    model: str | None = Field(
        None,
        description="Model name for the provider (e.g. gpt-4o-mini); for 'local', the model "
        "directory. Not used by 'simulate'.",
    )
    api_base: str | None = Field(None, description="Base URL of the provider's API.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable holding the API key (never the key)."
    )
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Upper bound on output tokens.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments passed to the provider."
    )
    adapter: str | None = Field(
        None,
        description="'local' only: a LoRA adapter directory; 'latest' for the newest "
        "verified adapter the fine-tune loop trained for the calling stage; 'latest:<stage>' "
        "for that stage's.",
    )
    valid_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="simulate only: probability that an output satisfies the schema (default 1.0).",
    )
    quality: float | None = Field(
        None,
        ge=0,
        le=1,
        description="simulate only: mean judge score of its outputs (default 0.8).",
    )
    latency_ms: float | None = Field(
        None, ge=0, description="simulate only: how long each call takes (default 0)."
    )

    @model_validator(mode="after")
    def _check_provider_fields(self) -> ModelTier:
        simulate_only = {"valid_rate", "quality", "latency_ms"} & self.model_fields_set
        if self.provider != "simulate" and simulate_only:
            names = ", ".join(sorted(simulate_only))
            raise ValueError(
                f"{names} only apply to provider 'simulate', not {self.provider!r}; "
                "remove them or set provider: simulate"
            )
        if self.provider in ("simulate",) and self.model is not None:
            raise ValueError(
                "provider 'simulate' takes no model; remove model or name a real provider"
            )
        if self.provider == "local" and not self.model:
            raise ValueError(
                "provider 'local' needs model: the directory of a transformers model (relative "
                "to this spec's directory, or absolute)"
            )
        if self.provider not in ("simulate",) and not self.model:
            raise ValueError(
                f"provider {self.provider!r} needs a model, e.g. model: gpt-4o-mini "
                "(or use provider: simulate to run offline)"
            )
        return self


class RoleTypeDefault(_Model):
    """Defaults applied to every stage whose role has this type."""

    model_tier: str | None = Field(None, description="Tier used when the role names none.")
    temperature: float | None = Field(None, ge=0, le=2, description="Default temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Default output-token bound.")


def _tier_shorthand(value: Any) -> Any:
    return {"model_tier": value} if isinstance(value, str) else value


class Role(_Model):
    """Who does a stage's work: the prompt, the tier and the tools."""

    name: str = Field(..., min_length=1, description="A short human name for the role.")
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
    max_turns: int = Field(
        10,
        ge=1,
        le=200,
        description="Bound on model turns in the tool-calling loop (at most 200: every turn "
        "resends the transcript, and longer loops would outgrow a run's history).",
    )


class RetryLoop(_Model):
    """Recovery loop: retry the stage with the error fed back."""

    max: int = Field(..., ge=1, le=100, description="Attempts in total, the first included.")
    backoff_s: Seconds = Field(0.0, description="Wait before the second attempt (doubles).")
    backoff_max_s: Seconds | None = Field(None, description="Upper bound on the wait.")


class OnFail(_Model):
    """What to do when a stage's output is invalid or its call fails."""

    loop: RetryLoop | None = Field(None, description="Retry with the error fed back.")
    escalate: bool = Field(
        False, description="After the loop is spent, move one tier up the ladder and try again."
    )


class LoopConfig(_Model):
    """Deliberate iteration: run the stage repeatedly, refining its own output."""

    max_iterations: int = Field(..., ge=1, le=1000, description="Upper bound on iterations.")
    until: str | None = Field(
        None,
        description="Jinja expression evaluated after each iteration over the output "
        "(e.g. 'output.score >= 0.9'); true stops the loop.",
    )
    carry_forward: StrList = Field(
        default_factory=list, description="Output fields passed to the next iteration."
    )
    iteration_var: str = Field(
        "_iteration",
        pattern=IDENTIFIER.pattern,
        description="Template variable holding num, is_first, is_last and carry_forward.",
    )


class Gate(_Model):
    """A durable human approval. ``gate: human`` is short for ``{type: human}``."""

    type: Literal["human"] = Field("human", description="The only gate type: a person decides.")
    message: str | None = Field(
        None, description="Jinja template shown to the approver (can quote stage outputs)."
    )
    timeout: Seconds | None = Field(
        None, description="How long to wait ('2d', '30m', seconds); none waits forever."
    )
    on_timeout: Literal["approve", "reject", "fail"] = Field(
        "fail", description="What happens when the timeout passes."
    )

    @model_validator(mode="after")
    def _timeout_policy_needs_timeout(self) -> Gate:
        if "on_timeout" in self.model_fields_set and self.timeout is None:
            raise ValueError("on_timeout needs a timeout, e.g. timeout: 2d")
        return self


def _gate_shorthand(value: Any) -> Any:
    if isinstance(value, str):
        if value != "human":
            raise ValueError(f"unknown gate {value!r}; write gate: human or gate: {{type: human}}")
        return {"type": "human"}
    return value


class ToolCall(_Model):
    """A stage that calls one tool directly, with no model."""

    name: str = Field(..., min_length=1, description="Built-in tool name or module:function.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Arguments; string values are Jinja templates."
    )


class Arm(_Model):
    """A bandit variant of a stage; the selected arm's fields override the stage's own."""

    arm_id: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="Stable id of the arm.")
    model_tier: str | None = Field(None, description="Tier this arm uses.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="temperature, max_tokens or provider params."
    )
    description: str | None = Field(None, description="Prompt template this arm uses.")


class Stage(_Model):
    """One step of the workflow. It is an LLM stage (role), a tool stage (tool), a fan-out
    (subagent_spec) or a bare approval (gate alone)."""

    id: str = Field(
        ...,
        pattern=IDENTIFIER.pattern,
        description="Unique id; letters, digits, underscores (templates say {{ id.field }}).",
    )
    depends_on: StrList = Field(
        default_factory=list, description="Stages that must finish before this one starts."
    )
    role: Role | None = Field(None, description="Makes this an LLM stage.")
    output_mode: OutputMode = Field(
        "text",
        description="text, json (parse and validate), or guided_json (also ask the provider "
        "for schema-constrained output).",
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="JSON Schema the output must satisfy (json and guided_json)."
    )
    on_fail: OnFail | None = Field(None, description="Retry and escalation policy.")
    loop: LoopConfig | None = Field(None, description="Deliberate iteration.")
    gate: Annotated[Gate | None, BeforeValidator(_gate_shorthand)] = Field(
        None, description="Wait for a human after the stage's work (or alone: just approval)."
    )
    tool: ToolCall | None = Field(None, description="Makes this a tool stage.")
    subagent_spec: str | None = Field(
        None, description="Path (relative to this spec) of a spec run as child workflows."
    )
    fan_out: int | None = Field(
        None, ge=1, le=1000, description="How many child workflows of subagent_spec to run."
    )
    fan_in: FanIn | None = Field(
        None, description="How children's outputs combine: list, merge, first, consensus."
    )
    partition_key: str | None = Field(
        None, description="Dot path to a list (e.g. inputs.topics) split across the children."
    )
    post_run: bool = Field(
        False, description="Run after the whole DAG, with _transcript and _diagnostics."
    )
    condition: str | None = Field(
        None, description="Jinja expression; the stage runs only when it is true."
    )
    skip_if: str | None = Field(None, description="Jinja expression; true skips the stage.")
    timeout_s: Seconds | None = Field(None, description="Bound on one attempt of the stage.")
    arms: list[Arm] = Field(
        default_factory=list, description="Bandit variants chosen per run by Thompson sampling."
    )
    reward: Literal["auto", "external"] = Field(
        "auto",
        description="How a chosen arm is rewarded: auto (a judge that depends on this stage, "
        "else its gate decision, else output quality) or external (armature reward / "
        "runtime_update).",
    )

    @model_validator(mode="after")
    def _check_kind(self) -> Stage:
        kinds = [k for k in ("role", "tool", "subagent_spec") if getattr(self, k) is not None]
        if len(kinds) > 1:
            raise ValueError(
                f"a stage does one thing, but this one has {' and '.join(kinds)}; "
                "split it into separate stages joined by depends_on"
            )
        if not kinds and self.gate is None:
            raise ValueError(
                "a stage needs role (LLM work), tool (a tool call), subagent_spec (child "
                "workflows) or gate (an approval)"
            )
        if self.output_mode == "guided_json" and self.output_schema is None:
            raise ValueError("output_mode guided_json needs an output_schema")
        if self.output_schema is not None and self.output_mode == "text":
            raise ValueError("output_schema needs output_mode: json or guided_json")
        if self.subagent_spec is None:
            for name in ("fan_out", "fan_in", "partition_key"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} goes with subagent_spec and fan_out")
        elif self.fan_out is None:
            for name in ("fan_in", "partition_key"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs fan_out, e.g. fan_out: 4")
        if "reward" in self.model_fields_set and not self.arms:
            raise ValueError("reward says how arms are rewarded; this stage has no arms")
        if self.arms and self.role is None:
            raise ValueError("arms vary an LLM stage's tier, params or prompt; add a role")
        if self.role is None and self.loop is not None:
            raise ValueError("loop repeats an LLM stage; add a role")
        return self


class Condition(_Model):
    """When a safety rule applies."""

    field: str = Field(
        ...,
        min_length=1,
        description="Dot path into the tool's args, or _tool_reversibility.",
    )
    op: RuleOp = Field(..., description="How the field is compared with value.")
    value: Any = Field(None, description="What to compare with (a regex for matches_regex).")


class SafetyRule(_Model):
    """A declarative rule checked before every tool call; the first match wins."""

    tool: str = Field(..., min_length=1, description="Tool name, or * for every tool.")
    condition: Condition | None = Field(None, description="Omit to match every call.")
    action: RuleAction = Field(..., description="allow, block, warn, log or require_approval.")
    message: str = Field("", description="Why; shown in traces and errors.")


class Continuation(_Model):
    """Values carried from the latest completed run of this spec into the next."""

    carry_forward: dict[str, str] = Field(
        default_factory=dict, description="key: stage.field pairs to carry."
    )
    inject_as: str = Field(
        "prior_run", pattern=IDENTIFIER.pattern, description="Template variable name."
    )


class Trigger(_Model):
    """Starts runs without a person: a cron schedule or a webhook."""

    type: Literal["cron", "webhook"] = Field(..., description="cron or webhook.")
    schedule: str | None = Field(None, description="cron only: five-field cron expression.")
    path: str | None = Field(None, description="webhook only: URL path, e.g. /hooks/triage.")
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="Run inputs for triggered runs."
    )

    @model_validator(mode="after")
    def _check_type_fields(self) -> Trigger:
        if self.type == "cron" and not self.schedule:
            raise ValueError("a cron trigger needs schedule, e.g. schedule: '0 9 * * 1-5'")
        if self.type == "webhook" and not self.path:
            raise ValueError("a webhook trigger needs path, e.g. path: /hooks/triage")
        if self.type == "cron" and self.path is not None:
            raise ValueError("path belongs to webhook triggers; remove it")
        if self.type == "webhook" and self.schedule is not None:
            raise ValueError("schedule belongs to cron triggers; remove it")
        return self


class SelfImprovement(_Model):
    """The improvement loop: propose verified spec changes from traces."""

    editable_surfaces: StrList = Field(
        default_factory=list,
        description="What it may change: stage_id.description, stage_id.model_tier, "
        "stage_id.temperature, stage_id.max_tokens.",
    )
    target_hqs: float = Field(0.9, ge=0, le=1, description="HQS at which it stops proposing.")
    min_traces: int = Field(20, ge=1, description="Runs needed before it proposes anything.")
    schedule: str = Field("0 3 * * *", description="Cron schedule of the improvement loop.")
    verify_runs: int = Field(
        10,
        ge=2,
        le=100,
        description="Recent inputs each candidate and the current spec are run on to verify "
        "a change (paired HQS).",
    )


class FinetuneConfig(_Model):
    """The fine-tune loop: distil traces into LoRA adapters for a small model."""

    schedule: str = Field("0 4 * * 0", description="Cron schedule of the fine-tune loop.")
    base_model: str = Field(
        ...,
        min_length=1,
        description="Local directory of the base transformers model (relative to the spec's "
        "directory, or absolute); nothing is downloaded.",
    )
    target_stages: StrList = Field(
        default_factory=list,
        description="LLM stages whose successful replies train an adapter each (default: all).",
    )
    min_examples: int = Field(
        20, ge=2, description="Distinct successful replies a stage needs before it is trained."
    )
    max_steps: int = Field(100, ge=1, le=100_000, description="Optimiser steps per adapter.")
    lora_rank: int = Field(8, ge=1, le=256, description="LoRA rank (r) of the adapters.")


def _inputs_shorthand(value: Any) -> Any:
    """``inputs: [a, b]`` is a JSON Schema object with those (required) properties."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {
            "type": "object",
            "properties": {name: {} for name in value},
            "required": list(value),
        }
    return value


InputsSchema = Annotated[dict[str, Any] | None, BeforeValidator(_inputs_shorthand)]


class Contracts(_Model):
    """Alternative home of the run-input schema (``contracts.inputs``)."""

    inputs: InputsSchema = Field(None, description="Same as top-level inputs.")


class Spec(_Model):
    """A whole workflow spec."""

    name: str = Field(
        ...,
        pattern=SPEC_NAME.pattern,
        description="Spec name; names runs (<name>-<id>) and groups traces.",
    )
    version: Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)] = Field(
        "1", description="Your version label for the spec."
    )
    description: str = Field("", description="What the workflow is for.")
    mission: str = Field(
        "", description="Context put at the top of every LLM prompt in this workflow."
    )
    inputs: InputsSchema = Field(
        None, description="Run inputs: a list of names, or a JSON Schema object."
    )
    contracts: Contracts | None = Field(None, description="Holds inputs, as an alternative.")
    model_tiers: dict[str, ModelTier] = Field(
        default_factory=dict,
        description="Tiers by name, smallest first (escalation moves down this list). "
        "Omitted: tiny..frontier on the simulate provider.",
    )
    role_type_defaults: dict[
        RoleType, Annotated[RoleTypeDefault, BeforeValidator(_tier_shorthand)]
    ] = Field(
        default_factory=dict,
        description="Per role type: a tier name, or {model_tier, temperature, max_tokens}.",
    )
    stages: list[Stage] = Field(..., min_length=1, description="The stages; order is free.")
    safety_mode: Literal["permissive", "strict"] = Field(
        "permissive",
        description="permissive allows what no rule blocks; strict denies what no rule allows.",
    )
    safety_rules: list[SafetyRule] = Field(
        default_factory=list, description="Checked before every tool call; first match wins."
    )
    http_allow_hosts: StrList = Field(
        default_factory=list,
        description="Hosts the http_request tool may reach (exact names, or *.example.com for "
        "subdomains); empty allows none. A subagent may only narrow its parent's list.",
    )
    continuation: Continuation | None = Field(
        None, description="Carry values from the previous run."
    )
    triggers: list[Trigger] = Field(default_factory=list, description="Cron and webhook starts.")
    self_improvement: SelfImprovement | None = Field(
        None,
        description="Improvement loop: `armature improve`, or on its schedule once "
        "`armature schedule` applied it.",
    )
    finetune: FinetuneConfig | None = Field(
        None,
        description="Fine-tune loop: `armature finetune`, or on its schedule once "
        "`armature schedule` applied it.",
    )

    @model_validator(mode="after")
    def _one_inputs(self) -> Spec:
        if self.inputs is not None and self.contracts is not None and self.contracts.inputs:
            raise ValueError("declare inputs once: top-level inputs or contracts.inputs")
        return self

    @property
    def inputs_schema(self) -> dict[str, Any]:
        """The run-input JSON Schema, wherever the spec declared it."""
        if self.inputs is not None:
            return self.inputs
        if self.contracts is not None and self.contracts.inputs is not None:
            return self.contracts.inputs
        return {"type": "object", "properties": {}}
