"""The workflow spec language: pydantic models for every field a spec may hold.

This module holds the stage and the spec; their parts live in ``spec.fields`` (base types),
``spec.roles`` (role, arm), ``spec.control`` (retries, loops, gates), ``spec.tiers``,
``spec.sections``, ``spec.safety``, ``spec.simulation`` and ``spec.experience``, all importable
from here. Models check shape and local rules; whole-document rules (references, cycles, tiers,
templates, subagent files) live in ``spec.checks``, and ``spec.loader`` maps each problem to its
YAML line. Field descriptions feed ``armature schema`` and the README's spec reference.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from armature_temporal.spec.arm_policy import BANDIT_DESCRIPTION, ArmPolicy
from armature_temporal.spec.caching import CACHE_DESCRIPTION, StageCache
from armature_temporal.spec.confidence import (
    CONFIDENCE_DESCRIPTION,
    MIN_CONFIDENCE_DESCRIPTION,
    ConfidenceConfig,
)
from armature_temporal.spec.context_window import ContextField, ContextWindow, PinRule
from armature_temporal.spec.control import Gate, LoopConfig, OnFail, RetryLoop
from armature_temporal.spec.experience import Experience
from armature_temporal.spec.fields import (
    IDENTIFIER,
    SPEC_NAME,
    STANDARD_TIERS,
    Expression,
    FanIn,
    FieldValueError,
    OutputMode,
    RoleType,
    Seconds,
    StrList,
    _gate_shorthand,
    _Model,
    unwrap_expression,
)
from armature_temporal.spec.knowledge import RETRIEVE_DESCRIPTION, KnowledgeConfig, StageRetrieve
from armature_temporal.spec.mcp import McpServer
from armature_temporal.spec.memory import MemoryCapture, MemoryConfig
from armature_temporal.spec.roles import Arm, Role
from armature_temporal.spec.safety import (
    NETWORK_DESCRIPTION,
    Condition,
    HttpSafe,
    SafetyRule,
    SandboxSettings,
)
from armature_temporal.spec.sections import (
    HQS_COMPONENTS,
    SURFACE_GROUPS,
    Adapter,
    AgentRef,
    ContextLayer,
    ContextPolicy,
    Continuation,
    Contracts,
    FinetuneConfig,
    HQSConfig,
    InputsSchema,
    OutputContract,
    SelfImprovement,
    Signature,
    SkillDef,
    ToolCall,
    ToolModule,
    Trigger,
)
from armature_temporal.spec.simulation import SIMULATE_DESCRIPTION, StageSimulation
from armature_temporal.spec.tiers import ModelTier, RoleTypeDefault, _tier_shorthand

__all__ = [
    "HQS_COMPONENTS",
    "IDENTIFIER",
    "SPEC_NAME",
    "STANDARD_TIERS",
    "SURFACE_GROUPS",
    "Adapter",
    "AgentRef",
    "Arm",
    "Condition",
    "ContextLayer",
    "ContextPolicy",
    "ContextWindow",
    "Continuation",
    "Contracts",
    "Experience",
    "FinetuneConfig",
    "Gate",
    "HQSConfig",
    "HttpSafe",
    "LoopConfig",
    "MemoryCapture",
    "MemoryConfig",
    "ModelTier",
    "OnFail",
    "OutputContract",
    "PinRule",
    "RetryLoop",
    "Role",
    "RoleTypeDefault",
    "SafetyRule",
    "SelfImprovement",
    "Signature",
    "SkillDef",
    "Spec",
    "Stage",
    "StageCache",
    "ToolCall",
    "ToolModule",
    "Trigger",
    "unwrap_expression",
]


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
        None,
        description="Path (relative to this spec, inside the top-level spec's folder tree) of "
        "a spec run as child workflows.",
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
    min_confidence: float | None = Field(None, ge=0, le=1, description=MIN_CONFIDENCE_DESCRIPTION)
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
    network: bool | None = Field(None, description=NETWORK_DESCRIPTION)
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
    bandit: ArmPolicy | None = Field(None, description=BANDIT_DESCRIPTION)
    reward_cost_per_1k_tokens: float = Field(
        0.0,
        ge=0,
        le=1,
        description="With reward: auto, subtracted from a chosen arm's reward per 1,000 tokens "
        "the stage spent (prompt and completion of every model call of the execution: "
        "reason_first's reasoning, the answers, tool turns, retries), before clipping to "
        "[0, 1], so an arm that costs more must win by more; 0 (default): quality only.",
    )
    simulate: StageSimulation | None = Field(None, description=SIMULATE_DESCRIPTION)
    cache: StageCache | None = Field(None, description=CACHE_DESCRIPTION)
    retrieve: StageRetrieve | None = Field(None, description=RETRIEVE_DESCRIPTION)

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
            raise FieldValueError(
                "output_schema", "output_schema needs output_mode: json or guided_json"
            )
        if self.partition_source is not None:
            if not kinds or kinds[0] == "adapter":
                raise ValueError(
                    "partition_source runs an LLM, tool or subagent stage once per item; add "
                    "role, tool or subagent_spec"
                )
        elif self.subagent_spec is None:
            for name in ("fan_out", "fan_in", "partition_key"):
                if getattr(self, name) is not None:
                    raise FieldValueError(
                        name,
                        f"{name} goes with subagent_spec and fan_out, or with partition_source",
                    )
        elif self.fan_out is None:
            for name in ("fan_in", "partition_key"):
                if getattr(self, name) is not None:
                    raise FieldValueError(name, f"{name} needs fan_out, e.g. fan_out: 4")
        if self.inject_file_as is not None and self.partition_source is None:
            raise FieldValueError(
                "inject_file_as",
                "inject_file_as reads each partition_source item; add partition_source",
            )
        if self.isolated and self.subagent_spec is None:
            raise FieldValueError("isolated", "isolated applies to subagent_spec stages; remove it")
        if self.block_below is not None and (self.role is None or self.role.type != "judge"):
            raise FieldValueError(
                "block_below", "block_below applies to judge stages (role type: judge)"
            )
        if self.reward_cost_per_1k_tokens and (not self.arms or self.reward != "auto"):
            raise FieldValueError(
                "reward_cost_per_1k_tokens",
                "reward_cost_per_1k_tokens lowers the auto reward of a stage's arms; this stage "
                "has no arms or reward: external",
            )
        if "reward" in self.model_fields_set and not self.arms:
            raise FieldValueError(
                "reward", "reward says how arms are rewarded; this stage has no arms"
            )
        if self.bandit is not None and not self.arms:
            raise FieldValueError(
                "bandit", "bandit says how this stage's arms learn; this stage has no arms"
            )
        if self.arms and self.role is None:
            raise FieldValueError(
                "arms", "arms vary an LLM stage's tier, params or prompt; add a role"
            )
        if self.role is None and self.loop is not None:
            raise FieldValueError("loop", "loop repeats an LLM stage; add a role")
        if self.retrieve is not None and self.role is None:
            raise FieldValueError(
                "retrieve", "retrieve puts passages into a model's prompt; add a role"
            )
        if self.cache is not None and (self.role is None or self.role.tools):
            raise FieldValueError(
                "cache", "cache reuses a model's answer: an LLM stage without tools only"
            )
        return self


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
    http_safe: list[HttpSafe] = Field(
        default_factory=list,
        description="Requests that change nothing and send out nothing that matters, as "
        "[{host, methods}], e.g. [{host: api.example.com, methods: [GET, HEAD]}]: those "
        "http_request calls are fully reversible (verification runs may make them). Any other "
        "request is an action (reversibility none), a GET too: its URL carries data out. A "
        "subagent's call is safe only if every enclosing spec marks it safe too.",
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
    experience: Experience | None = Field(None, description="Lessons learned across runs.")
    knowledge: KnowledgeConfig | None = Field(
        None,
        description="Documents indexed for retrieval: stages search them (retrieve:, the "
        "retrieve tool).",
    )
    confidence: ConfidenceConfig | None = Field(None, description=CONFIDENCE_DESCRIPTION)
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
    context: ContextField = Field(
        None,
        description="How tool loops keep their window within the model's: token_budget, "
        "reply_reserve, keep_recent turns verbatim, older ones dropped to stubs or summarize'd "
        "by a tier, pin rules, offload_over for large tool results (read back with recall); "
        "false turns it off. A role's context: overrides it field by field.",
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
    mcp_servers: list[McpServer] = Field(
        default_factory=list,
        description="MCP servers whose tools stages use (role.tools, a stage's tool:): stdio "
        "ones are started in the tools sandbox, http ones reached at their url. Their tools "
        "are listed when the spec is planned and pinned in the plan; name one "
        "mcp:<server>/<tool>, <server>.<tool>, or by its bare name where one server alone "
        "lists it.",
    )
    sandbox: SandboxSettings | None = Field(
        None,
        description="What tool programs get: allow_network, env (0.7.0's section; its "
        "Docker fields are accepted with a warning).",
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
    def _one_server_each(self) -> Spec:
        names = [s.name for s in self.mcp_servers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"mcp_servers: name {twice[0]!r} is declared twice; give each a name")
        return self

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
