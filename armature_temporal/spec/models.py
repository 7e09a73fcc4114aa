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
    "unwrap_expression",
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

_WRAPPED = re.compile(r"^\s*\{\{(.*)\}\}\s*$", re.S)


def unwrap_expression(value: Any) -> Any:
    """``"{{ expr }}"`` (the 0.7.0 way of writing an expression) is the expression ``expr``."""
    if isinstance(value, str):
        match = _WRAPPED.match(value)
        if match and "{{" not in match.group(1) and "}}" not in match.group(1):
            return match.group(1).strip()
    return value


#: A Jinja expression; ``"{{ expr }}"`` is accepted and means ``expr``.
Expression = Annotated[str, BeforeValidator(unwrap_expression)]


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
        "directory. 'simulate' ignores it, so a real spec goes offline by changing provider only.",
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
    tool_calling: bool | None = Field(
        None,
        description="Whether the model calls tools natively (default: assume it does). "
        "false on a tier that a stage with role tools uses is reported by validate.",
    )
    adapter_support: Literal["dynamic", "static", "none"] | None = Field(
        None,
        description="armature-agents 0.7.0 field, accepted with a warning: LoRA adapters are "
        "served by provider: local with adapter: here.",
    )
    adapter_path_template: str | None = Field(
        None,
        description="armature-agents 0.7.0 field, accepted with a warning (see adapter_support).",
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
        le=200,
        description="Bound on model turns in the tool-calling loop (at most 200: every turn "
        "resends the transcript, and longer loops would outgrow a run's history).",
    )


class RetryLoop(_Model):
    """Recovery loop: retry the stage with the error fed back."""

    max: int = Field(
        3,
        ge=0,
        le=100,
        description="Retries after the first attempt (max: 2 means up to 3 attempts), as in "
        "armature-agents 0.7.0.",
    )
    until: Expression | None = Field(
        None,
        description="Jinja expression over the output (its fields by name, or output); retry "
        "until it is true. The last output is kept when retries run out.",
    )
    backoff_s: Seconds = Field(0.0, description="Wait before the first retry (doubles).")
    backoff_max_s: Seconds | None = Field(None, description="Upper bound on the wait.")
    stage: str | None = Field(
        None,
        description="0.7.0 field: the stage to retry. Only the failing stage itself can be "
        "retried; naming another stage is reported by validate.",
    )
    context: Literal["retry"] = Field(
        "retry",
        description="0.7.0 field: the retry's context mode; 'retry' (the error and attempt "
        "number are fed back as _last_error and _retry_attempt) is the only mode.",
    )


class OnFail(_Model):
    """What to do when a stage's output is invalid or its call fails."""

    loop: RetryLoop | None = Field(None, description="Retry with the error fed back.")
    escalate: bool | None = Field(
        None,
        description="After the loop is spent, move one tier up the ladder and try again. "
        "Default: on for guided_json stages (when a higher tier exists), off otherwise.",
    )


class LoopConfig(_Model):
    """Deliberate iteration: run the stage repeatedly, refining its own output."""

    max_iterations: int = Field(
        10, ge=1, le=1000, description="Upper bound on iterations, the first included."
    )
    until: Expression | None = Field(
        None,
        description="Jinja expression evaluated after each iteration over the output "
        "(e.g. 'output.score >= 0.9', or a field by name); true stops the loop.",
    )
    carry_forward: Annotated[list[str] | None, BeforeValidator(_listify)] = Field(
        None,
        description="Output fields passed to the next iteration (by name, and under "
        "_iteration.carry_forward); omitted: the whole output.",
    )
    iteration_var: str = Field(
        "_iteration",
        pattern=IDENTIFIER.pattern,
        description="Template variable holding num, is_first, is_last and carry_forward.",
    )
    backoff_s: Seconds = Field(0.0, description="Wait before the second iteration (doubles).")
    backoff_max_s: Seconds = Field(60.0, description="Upper bound on the wait.")


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
    on_reject: Literal["stop", "continue"] | None = Field(
        None,
        description="stop: a rejection ends the run (state rejected); continue: the stage "
        "completes with approved: false and its dependents run and can branch on it. "
        "Default: continue when a condition or skip_if reads this stage, else stop.",
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


def _keys_mapping(value: Any) -> Any:
    """``[a, b]`` → ``{a: "", b: ""}`` (names with no description)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {v: "" for v in value}
    return value


KeysMapping = Annotated[dict[str, str], BeforeValidator(_keys_mapping)]


class Signature(_Model):
    """What a stage reads and writes, by name (armature-agents 0.7.0)."""

    input: KeysMapping = Field(
        default_factory=dict,
        description="Context keys (run inputs, upstream stage ids) this stage sees; the rest "
        "of the accumulated context is hidden from it. Empty: all of it.",
    )
    output: KeysMapping = Field(
        default_factory=dict,
        description="Output keys with their meaning; listed in the prompt as what to return.",
    )


class Adapter(_Model):
    """A script or Python function a stage runs (``adapter: name``), as an activity."""

    name: str | None = Field(None, description="Defaults to its key under adapters.")
    type: Literal["script", "python"] = Field(..., description="script or python.")
    cmd: str | list[str] | None = Field(
        None,
        description="script: the command, as a string (split like a shell would, then run "
        "without a shell) or an argv list; each part is a Jinja template over the context.",
    )
    shell: bool = Field(
        False,
        description="script: run cmd through /bin/sh -c (pipes, globs). Off by default: the "
        "safety rules match the argv that runs, and a shell would hide it.",
    )
    fn: str | None = Field(None, description="python: module:function (or module.function).")
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="python: keyword arguments; string values are Jinja templates.",
    )
    timeout: Seconds = Field(60.0, description="Bound on one run of the adapter.")
    parse: Literal["json"] | None = Field(
        None,
        description="script: json parses stdout as a JSON object (exit 0 required) instead of "
        "returning {stdout, stderr, exit_code}.",
    )

    @model_validator(mode="after")
    def _check_type_fields(self) -> Adapter:
        if self.type == "script" and not self.cmd:
            raise ValueError("a script adapter needs cmd, e.g. cmd: python3 tools/fetch.py")
        if self.type == "python" and not self.fn:
            raise ValueError("a python adapter needs fn, e.g. fn: my_pkg.tasks:fetch")
        if self.type == "python" and (self.cmd is not None or self.shell or self.parse):
            raise ValueError("cmd, shell and parse belong to script adapters; remove them")
        if self.type == "script" and self.fn is not None:
            raise ValueError("fn belongs to python adapters; remove it or set type: python")
        return self


class ContextPolicy(_Model):
    """Which context layers a prompt must carry and which keys it must never see."""

    must: StrList = Field(
        default_factory=list, description="context_layers names put into the prompt."
    )
    never: StrList = Field(
        default_factory=list,
        description="Context keys (run inputs, stage ids, layer names) the stage never sees.",
    )


class Arm(_Model):
    """A bandit variant of a stage; the selected arm's fields override the stage's own."""

    arm_id: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="Stable id of the arm.")
    model_tier: str | None = Field(None, description="Tier this arm uses.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="temperature, max_tokens or provider params."
    )
    description: str | None = Field(None, description="Prompt template this arm uses.")


def _older_stage_fields(value: Any) -> Any:
    """armature-agents 0.7.0 stage spellings: ``tool_call`` is ``tool``; ``present`` is the
    gate's message."""
    if not isinstance(value, dict):
        return value
    data = dict(value)
    if "tool_call" in data and "tool" not in data:
        data["tool"] = data.pop("tool_call")
    if "present" in data:
        present = data.pop("present")
        gate = data.get("gate")
        if gate is None or gate == "human":
            data["gate"] = {"type": "human", "message": present}
        elif isinstance(gate, dict) and "message" not in gate:
            data["gate"] = {**gate, "message": present}
        else:
            raise ValueError(
                "present and gate.message both give the gate's message; keep one of them"
            )
    return data


class Stage(_Model):
    """One step of the workflow. It is an LLM stage (role), a tool stage (tool), a script or
    Python adapter (adapter), a fan-out (subagent_spec) or a bare approval (gate alone)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _older_spellings(cls, value: Any) -> Any:
        return _older_stage_fields(value)

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
        None,
        description="subagent_spec: the list split across the children — a dot path "
        "(inputs.topics, plan.queries) or a bare context name (queries), which each child "
        "receives under the same name. With partition_source: the name each item is bound to "
        "(default item).",
    )
    partition_source: str | None = Field(
        None,
        description="Jinja template resolving to a list (e.g. '{{ plan.queries }}'): the stage "
        "runs once per item, at most fan_out at a time, results combined by fan_in.",
    )
    isolated: bool = Field(
        False,
        description="subagent_spec: children receive only the signature.input keys of the "
        "context, not all of it.",
    )
    post_run: bool = Field(
        False, description="Run after the whole DAG, with _transcript and _diagnostics."
    )
    condition: Expression | None = Field(
        None,
        description="Jinja expression; the stage runs only when it is true (a skipped stage's "
        "output is {_skipped: true}).",
    )
    skip_if: Expression | None = Field(None, description="Jinja expression; true skips the stage.")
    timeout_s: Seconds | None = Field(None, description="Bound on one attempt of the stage.")
    arms: list[Arm] = Field(
        default_factory=list, description="Bandit variants chosen per run by Thompson sampling."
    )
    adapter: str | None = Field(
        None, description="Makes this an adapter stage: the name of an entry under adapters."
    )
    signature: Signature | None = Field(
        None, description="Narrows the context this stage sees and names its output keys."
    )
    fail_as_value: bool = Field(
        False,
        description="On failure, complete with output {_failed: true, error, error_type} "
        "instead of failing the run; dependents run and can branch on it.",
    )
    block_below: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Judge stages: a score below this stops the stage's dependents "
        "(judge_blocked) and fails the run.",
    )
    output_max_chars: int | None = Field(
        None,
        ge=1,
        description="Truncate the stored output's text to this many characters, marked "
        "'...[truncated]' (default: contracts.output_max_chars).",
    )
    evaluate: StrList = Field(
        default_factory=list,
        description="Quality criteria a judge-tier model scores the output against after the "
        "run; shown by armature report.",
    )
    context_policy: ContextPolicy | None = Field(
        None, description="Adds to the spec's context_policy for this stage."
    )
    inject_file_as: str | None = Field(
        None,
        description="With partition_source: each item is a file path whose text (read by the "
        "file_read tool, under the safety rules) is bound to this name; '' if unreadable.",
    )
    response_stage: bool = Field(
        False,
        description="0.7.0 field (token streaming), accepted with a warning: follow a run "
        "with armature submit --wait or the Web UI.",
    )
    sandbox_image: str | None = Field(
        None, description="0.7.0 field (Docker sandbox), accepted with a warning."
    )
    agent: str | None = Field(
        None,
        description="0.7.0 field: an agent_library key whose role this stage uses.",
    )
    subagent_spec_path: str | None = Field(
        None,
        description="0.7.0 loader field, accepted with a warning: subagent_spec is resolved "
        "relative to the spec's folder.",
    )
    reward: Literal["auto", "external"] = Field(
        "auto",
        description="How a chosen arm is rewarded: auto (a judge that depends on this stage, "
        "else its gate decision, else output quality) or external (armature reward / "
        "runtime_update).",
    )

    @model_validator(mode="after")
    def _check_kind(self) -> Stage:
        kinds = [
            k for k in ("role", "tool", "adapter", "subagent_spec") if getattr(self, k) is not None
        ]
        if len(kinds) > 1:
            raise ValueError(
                f"a stage does one thing, but this one has {' and '.join(kinds)}; "
                "split it into separate stages joined by depends_on"
            )
        if not kinds and self.gate is None and self.agent is None:
            raise ValueError(
                "a stage needs role (LLM work), tool (a tool call), adapter (a script or "
                "Python function), subagent_spec (child workflows) or gate (an approval)"
            )
        if self.agent is not None and kinds:
            raise ValueError(f"agent supplies the role; remove {kinds[0]} or agent")
        if self.output_mode == "guided_json" and self.output_schema is None:
            raise ValueError("output_mode guided_json needs an output_schema")
        if self.output_schema is not None and self.output_mode == "text":
            raise ValueError("output_schema needs output_mode: json or guided_json")
        if self.partition_source is not None:
            if not kinds or kinds[0] == "adapter":
                raise ValueError(
                    "partition_source runs an LLM, tool or subagent stage once per item; add "
                    "role, tool or subagent_spec"
                )
        elif self.subagent_spec is None:
            for name in ("fan_out", "fan_in", "partition_key"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} goes with subagent_spec and fan_out, or with partition_source"
                    )
        elif self.fan_out is None:
            for name in ("fan_in", "partition_key"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs fan_out, e.g. fan_out: 4")
        if self.inject_file_as is not None and self.partition_source is None:
            raise ValueError(
                "inject_file_as reads each partition_source item; add partition_source"
            )
        if self.isolated and self.subagent_spec is None:
            raise ValueError("isolated applies to subagent_spec stages; remove it")
        if self.block_below is not None and (self.role is None or self.role.type != "judge"):
            raise ValueError("block_below applies to judge stages (role type: judge)")
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


def _carry_list(value: Any) -> Any:
    """0.7.0's ``carry_forward: [{key: stage.field}, ...]`` → ``{field: stage.field}``."""
    if not isinstance(value, list):
        return value
    out: dict[str, Any] = {}
    for item in value:
        ref = item.get("key") if isinstance(item, dict) and set(item) == {"key"} else item
        if not isinstance(ref, str):
            raise ValueError(
                f"carry_forward items are stage.field strings (or {{key: stage.field}}), "
                f"got {item!r}"
            )
        out[ref.rpartition(".")[2] or ref] = ref
    return out


class Continuation(_Model):
    """Values carried from the latest completed run of this spec into the next."""

    carry_forward: Annotated[dict[str, str], BeforeValidator(_carry_list)] = Field(
        default_factory=dict,
        description="key: stage.field pairs to carry; also a list of stage.field (or "
        "{key: stage.field}) items, each carried under its field's name.",
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
    drift_threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="0.7.0 field, accepted with a warning until drift scoring lands.",
    )
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


_TYPE_NAMES = {
    "str": "string",
    "string": "string",
    "text": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "array": "array",
    "dict": "object",
    "object": "object",
}
_INPUT_ITEM_KEYS = {"name", "type", "description", "required", "default", "enum"}


def _inputs_shorthand(value: Any) -> Any:
    """``inputs: [a, b]`` is a JSON Schema object with those (required) properties; the 0.7.0
    list of ``{name, type, description, required, default}`` is one whose items are required
    only when they say ``required: true``."""
    if not isinstance(value, list):
        return value
    if all(isinstance(v, str) for v in value):
        return {
            "type": "object",
            "properties": {name: {} for name in value},
            "required": list(value),
        }
    properties: dict[str, Any] = {}
    required: list[str] = []
    for item in value:
        if isinstance(item, str):
            properties[item] = {}
            required.append(item)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError(f"each input is a name or {{name, type, description}}; got {item!r}")
        unknown = set(item) - _INPUT_ITEM_KEYS
        if unknown:
            raise ValueError(
                f"input {item['name']!r} has unknown key(s) {sorted(unknown)}; allowed: "
                f"{sorted(_INPUT_ITEM_KEYS)}"
            )
        prop: dict[str, Any] = {}
        kind = item.get("type")
        if kind is not None:
            if str(kind).lower() not in _TYPE_NAMES:
                raise ValueError(
                    f"input {item['name']!r} has type {kind!r}; use one of "
                    f"{sorted(set(_TYPE_NAMES.values()))}"
                )
            prop["type"] = _TYPE_NAMES[str(kind).lower()]
        for key in ("description", "default", "enum"):
            if key in item:
                prop[key] = item[key]
        properties[item["name"]] = prop
        if item.get("required") is True:
            required.append(item["name"])
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


InputsSchema = Annotated[dict[str, Any] | None, BeforeValidator(_inputs_shorthand)]


class OutputContract(_Model):
    """An output the run must produce (checked when the run ends)."""

    stage: str = Field(..., min_length=1, description="The stage that produces it.")
    key: str = Field(..., min_length=1, description="The field of that stage's output.")
    required: bool = Field(False, description="A missing or null value fails the run.")
    description: str = Field("", description="What it is.")


class Contracts(_Model):
    """The run's contract: its inputs, required outputs and limits."""

    inputs: InputsSchema = Field(
        None,
        description="Same as top-level inputs; also the 0.7.0 list of {name, type, "
        "description, required, default}.",
    )
    outputs: list[OutputContract] = Field(
        default_factory=list, description="Outputs the run must produce."
    )
    completion: str | None = Field(
        None, description="What 'done' means, for people (shown by armature plan)."
    )
    max_llm_calls: int | None = Field(
        None,
        ge=1,
        description="The run fails (limit_exceeded) before its LLM call number N+1; counts "
        "every model call of every attempt, iteration and tool turn.",
    )
    max_iterations: int | None = Field(
        None,
        ge=1,
        description="The run fails before its stage execution number N+1 (retries and loop "
        "iterations count).",
    )
    timeout_hours: float | None = Field(
        None,
        gt=0,
        description="Wall-clock bound on the whole run, human gates included (a Temporal "
        "run timeout).",
    )
    output_max_chars: int | None = Field(
        None, ge=1, description="Default output_max_chars for every stage."
    )


class MemoryCapture(_Model):
    """One output kept across runs."""

    stage: str = Field(..., min_length=1, description="The stage whose output is captured.")
    key: str = Field(..., min_length=1, description="The output field to keep.")
    max_entries: int = Field(5, ge=1, le=1000, description="Rolling window; oldest go first.")


class MemoryConfig(_Model):
    """Outputs remembered across runs of this spec, in the trace store."""

    enabled: bool = Field(True, description="false turns memory off without deleting it.")
    fresh: bool = Field(False, description="true: capture, but start each run with none.")
    capture: list[MemoryCapture] = Field(default_factory=list, description="What to keep.")
    inject_as: str = Field(
        "_memory",
        pattern=IDENTIFIER.pattern,
        description="Template variable holding {stage: {key: [values, newest first]}}; "
        "_stale_memory_keys names those older than 30 days.",
    )
    workflow_name: str | None = Field(
        None, description="Share another spec's memory (default: this spec's name)."
    )
    db: str | None = Field(
        None, description="0.7.0 field, accepted with a warning: memory lives in the trace store."
    )
    extract_knowledge: bool = Field(False, description="0.7.0 field, accepted with a warning.")
    inject_knowledge_as: str = Field("_knowledge", description="0.7.0 field (extract_knowledge).")
    reconcile: bool = Field(True, description="0.7.0 field; entries are kept as captured.")
    reconcile_llm: bool = Field(False, description="0.7.0 field, accepted with a warning.")
    navigation_tools: bool = Field(False, description="0.7.0 field, accepted with a warning.")


class ToolModule(_Model):
    """A Python module whose ``register(registry)`` adds tools by name."""

    module: str = Field(
        ...,
        pattern=r"^[A-Za-z_][\w.]*$",
        description="Dotted import path, importable by the worker.",
    )
    api_key_env: StrList = Field(
        default_factory=list,
        description="Environment variables its tools need (armature doctor checks them).",
    )


class SkillDef(_Model):
    """Reusable instructions a role adds to its prompt (``role.skills``)."""

    id: str | None = Field(None, description="Defaults to its key in skill_library.")
    description: str = Field("", description="The skill's heading in the prompt.")
    content: str | None = Field(None, description="The skill's text.")
    path: str | None = Field(
        None, description="A file holding the text, relative to the spec's folder."
    )
    adapter: dict[str, Any] | None = Field(
        None,
        description="0.7.0 field (a LoRA adapter replacing the text), accepted with a warning.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SkillDef:
        if self.content is None and self.path is None and self.adapter is None:
            raise ValueError("a skill needs content (its text) or path (a file with the text)")
        if self.content is not None and self.path is not None:
            raise ValueError("give a skill content or path, not both")
        return self


class AgentRef(_Model):
    """An agent bundle file (agent.yaml with a role) a stage uses by ``agent: key``."""

    path: str = Field(..., min_length=1, description="agent.yaml, relative to the spec.")
    version: str | None = Field(None, description="Informational.")


class ContextLayer(_Model):
    """A named block of context that context_policy.must puts into prompts."""

    name: str = Field(..., pattern=IDENTIFIER.pattern, description="Its name in must/never.")
    precedence: int = Field(0, description="Higher layers come first.")
    content: str | None = Field(None, description="The text.")
    src: str | None = Field(None, description="A file with the text, relative to the spec.")
    never: StrList = Field(
        default_factory=list, description="Context keys no stage may see (a floor)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> ContextLayer:
        if (self.content is None) == (self.src is None):
            raise ValueError(f"context layer {self.name!r} needs exactly one of content or src")
        return self


HQS_COMPONENTS: tuple[str, ...] = ("output_valid", "success", "judge", "latency", "happy_path")


class HQSConfig(_Model):
    """How this spec's runs are scored."""

    weights: dict[Literal["output_valid", "success", "judge", "latency", "happy_path"], float] = (
        Field(
            default_factory=dict,
            description="Component weights (missing ones keep their defaults: output_valid "
            "0.35, success 0.25, judge 0.20, latency 0.10, happy_path 0.10).",
        )
    )

    @model_validator(mode="after")
    def _check_weights(self) -> HQSConfig:
        bad = {k: v for k, v in self.weights.items() if v < 0}
        if bad:
            raise ValueError(f"HQS weights must be >= 0, got {bad}")
        complete = len(self.weights) == len(HQS_COMPONENTS)
        if complete and sum(self.weights.values()) <= 0:
            raise ValueError("HQS weights sum to 0; give at least one a positive weight")
        return self


#: Older self_improvement.editable_surfaces names and what they cover here.
SURFACE_GROUPS: dict[str, tuple[str, ...]] = {
    "descriptions": ("description",),
    "model_tiers": ("model_tier",),
    "retry_counts": (),
    "timeouts": (),
    "schemas": (),
}


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
    hqs: HQSConfig | None = Field(None, description="HQS weights for this spec.")
    checkpoint: bool = Field(
        False,
        description="0.7.0 field: resume after a crash. Every run here is durable on Temporal "
        "whatever its value (armature plan says so).",
    )
    adapters: dict[str, Adapter] = Field(
        default_factory=dict, description="Scripts and Python functions stages run by name."
    )
    tools: list[ToolModule] = Field(
        default_factory=list,
        description="Python modules whose register(registry) adds tools by name.",
    )
    memory: MemoryConfig | None = Field(
        None, description="Outputs remembered across runs, injected into later prompts."
    )
    skill_library: dict[str, SkillDef] = Field(
        default_factory=dict, description="Skills roles add to their prompts (role.skills)."
    )
    agent_library: dict[str, AgentRef] = Field(
        default_factory=dict, description="Agent bundles stages use by agent: key."
    )
    context_layers: list[ContextLayer] = Field(
        default_factory=list, description="Named context blocks for context_policy.must."
    )
    context_policy: ContextPolicy | None = Field(
        None, description="Layers every stage's prompt carries, keys none may see."
    )
    roles: dict[str, Any] = Field(
        default_factory=dict,
        description="0.7.0 field (a role library for export), accepted with a warning.",
    )
    failures: dict[str, Any] = Field(
        default_factory=dict, description="0.7.0 field (documentation), accepted with a warning."
    )
    file_state: dict[str, Any] | None = Field(
        None, description="0.7.0 field, accepted with a warning."
    )
    trace: dict[str, Any] | None = Field(
        None,
        description="0.7.0 field, accepted with a warning: every run here is traced "
        "(armature traces).",
    )
    adapter_factory: dict[str, Any] | None = Field(
        None, description="0.7.0 field, accepted with a warning: use finetune:."
    )
    mcp_servers: list[Any] = Field(
        default_factory=list, description="0.7.0 field, accepted with a warning."
    )
    sandbox: dict[str, Any] | None = Field(
        None, description="0.7.0 field (Docker sandbox), accepted with a warning."
    )
    destinations: dict[str, Any] | None = Field(
        None, description="0.7.0 field (packaging), accepted with a warning."
    )
    closure: dict[str, Any] | None = Field(
        None, description="0.7.0 field (missions), accepted with a warning."
    )
    mission_source: Literal["static", "work_unit"] = Field(
        "static", description="0.7.0 field (missions); work_unit is accepted with a warning."
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
