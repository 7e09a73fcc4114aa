"""The Plan: the frozen, JSON-serialisable program that the Temporal interpreter runs.

:func:`armature_temporal.spec.compiler.compile_spec` builds it from a validated spec; the
workflow reads nothing else. Its canonical JSON (:func:`canonical_json`) is what hashes and
golden histories are taken over, so a new field needs a default that keeps older plans'
bytes the same.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from armature_temporal.spec.arm_policy import ArmPolicy
from armature_temporal.spec.caching import StageCache
from armature_temporal.spec.context_window import PlanContext
from armature_temporal.spec.experience import ExperienceConfig
from armature_temporal.spec.knowledge import StageRetrieve
from armature_temporal.spec.mcp import PlanMcpServer
from armature_temporal.spec.models import (
    Continuation,
    FinetuneConfig,
    HttpSafe,
    MemoryConfig,
    OutputContract,
    SafetyRule,
    SelfImprovement,
    ToolCall,
    Trigger,
)
from armature_temporal.spec.simulation import StageSimulation

__all__ = [
    "PLAN_FORMAT",
    "Plan",
    "PlanAdapter",
    "PlanArm",
    "PlanGate",
    "PlanLoop",
    "PlanReasoning",
    "PlanRole",
    "PlanStage",
    "ResolvedTier",
    "canonical_json",
]

#: Bumped when the Plan's shape changes incompatibly.
PLAN_FORMAT = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Sparse(_Frozen):
    """A plan model with fields newer than most plans: each in ``sparse_fields`` is left out of
    the serialised form while unset (None, False or empty), so a plan that does not use it
    keeps its bytes (and its hash) and older workers read it."""

    sparse_fields: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_unused(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in self.sparse_fields:
            if not data.get(name):
                data.pop(name, None)
        return data


class ResolvedTier(_Sparse):
    """A tier with every default filled in."""

    name: str
    provider: str
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    valid_rate: float = 1.0
    quality: float = 0.8
    latency_ms: float = 0.0
    adapter: str | None = None
    hedge_rate: float = 0.0
    logprobs: bool | None = None
    #: Tokens the model accepts (ModelTier.context_window).
    context_window: int | None = None

    sparse_fields = ("context_window",)


class PlanReasoning(_Frozen):
    """A ``reason_first`` stage's private reasoning call: its tier (None: the attempt's) and
    what it is asked."""

    tier: str | None = None
    prompt: str


class PlanRole(_Sparse):
    name: str
    type: Literal["worker", "orchestrator", "judge", "researcher"]
    prompt: str
    #: Plain text (not a template) added to the system message: context layers, skills and
    #: the signature's output keys.
    guidance: str = ""
    model_tier: str
    temperature: float | None = None
    max_tokens: int | None = None
    tools: list[str] = Field(default_factory=list)
    max_turns: int = 10
    #: The spec's context: for this role's tool loop (None: PlanContext's defaults), and the
    #: loop's budgets.
    context: PlanContext | None = None
    max_tokens_total: int | None = None
    max_cost_usd: float | None = None
    deadline_s: float | None = None
    #: ``reason_first``: the private reasoning call before each attempt's answer (None: none).
    reasoning: PlanReasoning | None = None

    sparse_fields = ("context", "max_tokens_total", "max_cost_usd", "deadline_s", "reasoning")


class PlanGate(_Frozen):
    message: str | None = None
    timeout_s: float | None = None
    on_timeout: Literal["approve", "reject", "fail"] = "fail"
    on_reject: Literal["stop", "continue"] = "stop"


class PlanLoop(_Frozen):
    max_iterations: int
    until: str | None = None
    #: None carries the whole output.
    carry_forward: list[str] | None = None
    iteration_var: str = "_iteration"
    backoff_s: float = 0.0
    backoff_max_s: float = 60.0


class PlanAdapter(_Frozen):
    """A script or Python function, run by the ``run_adapter`` activity."""

    name: str
    type: Literal["script", "python"]
    #: script: argv templates (or one command string when ``shell``).
    argv: list[str] = Field(default_factory=list)
    shell: bool = False
    fn: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = 60.0
    parse: Literal["json"] | None = None


class PlanArm(_Sparse):
    arm_id: str
    model_tier: str
    params: dict[str, Any] = Field(default_factory=dict)
    prompt: str
    #: ``reason_first`` on this arm (or inherited from the role): its private reasoning call.
    reasoning: PlanReasoning | None = None

    sparse_fields = ("reasoning",)


class PlanStage(_Sparse):
    """One stage, ready to execute. ``kind`` says which activity family runs it."""

    id: str
    kind: Literal["llm", "tool", "adapter", "fan_out", "gate"]
    depends_on: list[str] = Field(default_factory=list)
    #: The part of depends_on that templates implied (shown by ``armature plan``).
    implicit_depends_on: list[str] = Field(default_factory=list)
    role: PlanRole | None = None
    output_mode: Literal["text", "json", "guided_json"] = "text"
    output_schema: dict[str, Any] | None = None
    max_attempts: int = 1
    backoff_s: float = 0.0
    backoff_max_s: float | None = None
    escalate: bool = False
    escalation_ladder: list[str] = Field(default_factory=list)
    loop: PlanLoop | None = None
    gate: PlanGate | None = None
    tool: ToolCall | None = None
    fan_out: int | None = None
    fan_in: Literal["list", "merge", "first", "consensus"] | None = None
    partition_key: str | None = None
    post_run: bool = False
    condition: str | None = None
    skip_if: str | None = None
    timeout_s: float | None = None
    arms: list[PlanArm] = Field(default_factory=list)
    reward: Literal["auto", "external"] = "auto"
    #: Subtracted from an arm's auto reward per 1,000 tokens the stage spent (0: none).
    reward_cost_per_1k_tokens: float = 0.0
    retry_until: str | None = None
    adapter: PlanAdapter | None = None
    partition_source: str | None = None
    inject_file_as: str | None = None
    isolated: bool = False
    fail_as_value: bool = False
    block_below: float | None = None
    min_confidence: float | None = None  # the stage's own, else confidence.min of its role type
    output_max_chars: int | None = None
    #: The context keys the stage sees (signature.input); None: all of its context.
    context_keys: list[str] | None = None
    #: Context keys it never sees (context_policy.never and layers' never).
    context_never: list[str] = Field(default_factory=list)
    evaluate: list[str] = Field(default_factory=list)
    simulate: StageSimulation | None = None  # the simulate provider's pitfalls
    cache: StageCache | None = None
    #: retrieve: with its collection resolved; left out of the canonical JSON when None.
    retrieve: StageRetrieve | None = None
    #: Its tool programs get network (through the egress proxy): network:, else
    #: sandbox.allow_network. Plans from before it existed: False, as they ran; left out of
    #: the canonical JSON when False.
    network: bool = False
    #: bandit: (context features, evolution) of the stage's arms; left out when None.
    bandit: ArmPolicy | None = None

    sparse_fields = ("network", "retrieve", "bandit", "reward_cost_per_1k_tokens")


class Plan(_Sparse):
    """The compiled workflow. ``stages`` is in topological order (ties keep spec order);
    post_run stages come last. ``children`` holds inlined subagent plans by stage id."""

    format: int = PLAN_FORMAT
    name: str
    version: str
    description: str = ""
    mission: str = ""
    spec_hash: str
    policy_version: str
    inputs_schema: dict[str, Any]
    tiers: dict[str, ResolvedTier]
    tier_ladder: list[str]
    stages: list[PlanStage]
    safety_mode: Literal["permissive", "strict"] = "permissive"
    safety_rules: list[SafetyRule] = Field(default_factory=list)
    http_allow_hosts: list[str] = Field(default_factory=list)
    #: Requests marked safe (spec ``http_safe``); left out of the canonical JSON when empty.
    http_safe: list[HttpSafe] = Field(default_factory=list)
    #: Variables every tool program gets (sandbox.env); left out of the canonical JSON when empty.
    sandbox_env: dict[str, str] = Field(default_factory=dict)
    continuation: Continuation | None = None
    triggers: list[Trigger] = Field(default_factory=list)
    self_improvement: SelfImprovement | None = None
    finetune: FinetuneConfig | None = None
    children: dict[str, Plan] = Field(default_factory=dict)
    max_llm_calls: int | None = None
    max_iterations: int | None = None
    #: Bound on the whole run (contracts.timeout_hours), seconds.
    run_timeout_s: float | None = None
    required_outputs: list[OutputContract] = Field(default_factory=list)
    completion: str | None = None
    memory: MemoryConfig | None = None
    #: The namespace memory is kept under (memory.workflow_name or the spec's name).
    memory_name: str | None = None
    experience: ExperienceConfig | None = None
    tool_modules: list[str] = Field(default_factory=list)
    hqs_weights: dict[str, float] | None = None
    #: Every field of the spec is durable on Temporal; 0.7.0's checkpoint: asked for it.
    checkpoint: bool = False
    #: The spec's MCP servers with the tools they listed when it was planned (left out of the
    #: canonical JSON when there are none).
    mcp_servers: list[PlanMcpServer] = Field(default_factory=list)
    #: The knowledge collection the ``retrieve`` tool searches (knowledge.collection, else the
    #: spec's name) when the spec has ``knowledge:``; left out of the canonical JSON when None.
    knowledge_collection: str | None = None

    def stage(self, stage_id: str) -> PlanStage:
        """The stage with this id; KeyError names the known ids."""
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(
            f"no stage {stage_id!r} in plan {self.name!r}; stages: {[s.id for s in self.stages]}"
        )

    sparse_fields = ("http_safe", "sandbox_env", "mcp_servers", "knowledge_collection")

    def mcp_tool(self, name: str) -> tuple[PlanMcpServer, Any] | None:
        """The server and pinned tool of ``mcp:<server>/<tool>``, or None."""
        from armature_temporal.spec.mcp import split_canonical

        split = split_canonical(name)
        for server in self.mcp_servers if split is not None else ():
            if server.name == split[0]:  # type: ignore[index]
                for tool in server.tools:
                    if tool.name == split[1]:  # type: ignore[index]
                        return server, tool
        return None

    def to_json(self) -> str:
        """Canonical JSON: the same spec always gives the same bytes."""
        return canonical_json(self.model_dump(mode="json"))


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text: the form hashes are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
