"""The messages between the interpreter workflow, its activities and its clients.

Every workflow and activity takes one of these models and returns one; Temporal carries them
with the pydantic data converter. They are plain data: no behaviour that touches I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from armature_temporal.runtime.bandit_models import (
    BanditMaintenanceInput as BanditMaintenanceInput,
)
from armature_temporal.runtime.bandit_models import BanditRewardInput as BanditRewardInput
from armature_temporal.runtime.bandit_models import BanditSelectInput as BanditSelectInput
from armature_temporal.runtime.bandit_models import BanditSelectResult as BanditSelectResult
from armature_temporal.runtime.confidence._models import Confidence
from armature_temporal.spec.compiler import Plan, PlanAdapter, PlanStage, ResolvedTier
from armature_temporal.spec.mcp import PlanMcpServer, PlanMcpTool
from armature_temporal.spec.safety import HttpSafe

__all__ = [
    "UNAUTHENTICATED",
    "AdapterCallInput",
    "AdapterCallResult",
    "DecisionProof",
    "GateDecision",
    "GateInfo",
    "GateProofCheck",
    "GateProofResult",
    "LLMCallInput",
    "LLMCallResult",
    "Lessons",
    "LessonsQuery",
    "LessonsReward",
    "MemoryCapture",
    "MemoryEntry",
    "MemoryQuery",
    "MemoryValues",
    "PolicySet",
    "PriorRunQuery",
    "PriorRunResult",
    "RefusedSignal",
    "RunEvent",
    "RunEventType",
    "RunInput",
    "RunResult",
    "RunStatus",
    "StageResult",
    "StageStatus",
    "ToolApproval",
    "ToolCallInput",
    "ToolCallResult",
]

StageStatus = Literal[
    "pending",
    "running",
    "waiting_gate",
    "completed",
    "failed",
    "skipped",
    "rejected",
    "cancelled",
]
RunState = Literal["running", "waiting_gate", "completed", "failed", "rejected", "cancelled"]
#: The failure taxonomy: one code per failed or degraded stage.
ErrorType = Literal[
    "output_invalid",
    "template_error",
    "tool_error",
    "timeout",
    "low_quality",
    "gate_rejected",
    "policy_blocked",
    "provider_error",
    "dependency_failed",
    "cancelled",
    "judge_blocked",
    "limit_exceeded",
    "verification_gate",
    "knowledge_error",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _without_grants(data: dict[str, Any]) -> dict[str, Any]:
    """A tool call's sandbox grants are newer than most workers: sent only when given, so a
    tools worker from before them still reads the calls that do not use them."""
    for name in ("network", "sandbox_env", "mcp_server", "mcp_tool"):
        if not data.get(name):
            data.pop(name, None)
    return data


class PolicySet(_Model):
    """A parent run's safety policy, which a subagent's own policy can only tighten."""

    safety_mode: Literal["permissive", "strict"] = "permissive"
    safety_rules: list[Any] = Field(default_factory=list)
    http_allow_hosts: list[str] = Field(default_factory=list)
    #: The requests it marks safe: a subagent's request is safe only where every level says so.
    http_safe: list[HttpSafe] = Field(default_factory=list)


class RunInput(_Model):
    """Start a run: the compiled plan travels in the input; the workflow never reads files."""

    plan: Plan
    inputs: dict[str, Any] = Field(default_factory=dict)
    prior_run: dict[str, Any] | None = None
    parent_run_id: str | None = None
    outer_policies: list[PolicySet] = Field(default_factory=list)
    # A verification run (improvement, memory CI, fine-tune pairs): no gate is ever approved
    # (a stage gate holds its stage and everything after it; tool, hook and adapter approvals
    # are refused), only fully reversible tool calls run, and no bandit is rewarded.
    verification: bool = False
    #: Which replicate of these inputs this run is: the simulate provider seeds its noise from
    #: the run inputs and this number, so runs with the same inputs and replicate share it.
    replicate: int = Field(0, ge=0)
    #: The lessons (heuristic ids) every LLM stage but the judges carries (memory CI replays
    #: with and without one): promoted ones, and quarantined ones only in a verification run;
    #: None: the prompt compiler chooses promoted ones.
    lessons: list[str] | None = None


class ToolApproval(_Model):
    """The exact tool call a mid-stage approval asks about, so an approver (``/ui``, the API's
    gates) sees what will run: the tool, its arguments, how far it can be undone, and what
    asked for a person (a safety rule, a hook, or a tool registered as destructive)."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    #: ``full``, ``partial`` or ``none``; None in runs started before it was recorded.
    reversibility: str | None = None
    #: The safety rule that asked, as the spec wrote it (None: a hook or the destructive floor).
    rule: dict[str, Any] | None = None
    rule_index: int | None = None
    #: Why a person is asked: the rule's message, the hook's reason, or the destructive floor.
    reason: str = ""
    #: The pre_tool hook that asked, when one did.
    hook: str | None = None


class GateInfo(_Model):
    stage: str
    message: str | None = None
    since: str
    timeout_s: float | None = None
    on_timeout: str = "fail"
    #: For a tool call's approval (gate id ``stage`` or ``stage#n``): the call itself.
    tool_call: ToolApproval | None = None


#: ``by`` of a gate decision no valid proof vouches for (a raw ``temporal workflow signal`` or
#: ``update``, the Temporal Web UI, anything else that reached the frontend).
UNAUTHENTICATED = "signal"


class DecisionProof(_Model):
    """What ``decide_gate`` (the CLI, the run API, the library) attaches to a decision: a MAC,
    under a key derived from the trace key, over the run, the gate, the decision, the comment,
    who the sender authenticated (``by``), when (``issued_at``) and a ``nonce``
    (:mod:`armature_temporal.runtime.gate_auth`). The worker checks it."""

    issued_at: str
    nonce: str
    mac: str


class GateDecision(_Model):
    """A decision on a waiting gate (update ``resolve_gate`` or signal ``gate``).

    Temporal does not say who sent an update or a signal, so the run never takes ``by`` from
    what arrives: it records the name a valid ``proof`` vouches for, else ``by="signal"``
    (unauthenticated) with what the sender claimed kept apart in ``claimed_by`` and, when a
    proof was sent but did not check, why in ``unverified``. Decisions the run takes itself
    (a timeout, a verification run) name what took them.
    """

    stage: str
    decision: Literal["approve", "reject"]
    comment: str | None = None
    by: str | None = None
    claimed_by: str | None = None
    proof: DecisionProof | None = None
    unverified: str | None = None


class GateProofCheck(_Model):
    """``verify_gate_decision``'s input: a decision as it arrived at run ``run_id``, and since
    when its gate waits (a proof made before that is not for this wait)."""

    run_id: str
    decision: GateDecision
    waiting_since: str


class GateProofResult(_Model):
    """The authenticated decider (``by``), or None and why the proof did not check."""

    by: str | None = None
    problem: str | None = None


class RefusedSignal(_Model):
    """A ``gate`` signal the run refused (``temporal workflow signal`` and the Web UI send
    signals, which cannot answer back), kept so the status query and ``runs show`` say why."""

    signal: str = "gate"
    stage: str | None = None
    received: Any = None
    reason: str
    at: str


class StageResult(_Model):
    status: StageStatus = "pending"
    output: Any = None
    error: str | None = None
    error_type: ErrorType | None = None
    attempts: int = 0
    iterations: int = 0
    tier: str | None = None
    escalated: bool = False
    gate: GateDecision | None = None
    children: list[dict[str, Any]] = Field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None
    #: The run's verdict on the stage's ``evaluate`` criteria, after the run: ``{scores,
    #: mean, rationale, tier}``, or ``{error, tier}`` when the evaluation itself failed.
    evaluation: dict[str, Any] | None = None
    #: A tool loop's progress: the stage_progress event's data, latest turn.
    loop: dict[str, Any] | None = None


class RunStatus(_Model):
    """What the ``status`` query returns while a run is in flight."""

    run_id: str
    spec_name: str
    spec_hash: str
    state: RunState
    stages: dict[str, StageResult]
    pending_gates: list[GateInfo] = Field(default_factory=list)
    refused_signals: list[RefusedSignal] = Field(default_factory=list)


#: What a run's event log records (``GET /run/{id}/events``, ``armature runs watch``).
RunEventType = Literal[
    "stage_start",
    "stage_progress",
    "stage_complete",
    "gate_waiting",
    "gate_decided",
    "run_complete",
    "run_failed",
]


class RunEvent(_Model):
    """One entry of a run's own event log (the interpreter's ``events`` query).

    ``seq`` counts from 1 without gaps; the workflow appends in the order its code runs, so a
    replay gives every event the same ``seq`` and a follower that reconnects with the last
    ``seq`` it saw gets exactly the rest. ``stage`` is the stage (or, for a gate, the gate id
    a decision names) or None for run events; ``at`` is workflow time, ISO 8601. (A worker
    without a workflow cache answers a query by replaying the history, which can run the
    next step ahead of its workflow task with a provisional time: a later answer then gives
    the same event — same ``seq``, type, stage and data — a slightly later ``at``.)

    ``data`` by type: stage_start ``{kind}``; stage_progress (a tool loop's turn) ``{turn,
    max_turns, window_tokens, budget, compactions, tokens_total, cost_usd, stopped?}``;
    stage_complete ``{status, output | output_ref,
    error?, error_type?, tier?, attempts?}``; gate_waiting ``{message, timeout_s,
    on_timeout}``; gate_decided ``{decision, by, comment}``; run_complete ``{status, outputs |
    output_ref}``; run_failed ``{status, reason}``. Outputs over 8 KiB of JSON travel as
    ``output_ref`` (``/run/<id>``, where ``GET`` shows them whole).
    """

    seq: int = Field(ge=1)
    type: RunEventType
    run_id: str
    stage: str | None = None
    at: str
    data: dict[str, Any] = Field(default_factory=dict)


class RunResult(_Model):
    run_id: str
    spec_name: str
    spec_hash: str
    state: RunState
    reason: str | None = None
    stages: dict[str, StageResult]
    outputs: dict[str, Any] = Field(default_factory=dict)
    refused_signals: list[RefusedSignal] = Field(default_factory=list)


class LLMCallInput(_Model):
    """One model call: the activity renders the prompt from these variables."""

    run_id: str
    stage: PlanStage
    tier: ResolvedTier
    prompt_template: str
    mission: str = ""
    variables: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 1
    params: dict[str, Any] = Field(default_factory=dict)
    tools: list[str] = Field(default_factory=list)
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    turn: int = 0
    spec_name: str = ""
    approved: bool = False
    #: Modules (tools: [{module}]) whose tools the role may call; loaded before the call.
    tool_modules: list[str] = Field(default_factory=list)
    #: The accumulated context the stage sees (run inputs and upstream outputs its template
    #: does not already quote), listed after the task in the prompt.
    context: dict[str, Any] = Field(default_factory=dict)
    #: Who retries a provider failure: Temporal's retry policy (runs started before provider
    #: failures were counted by the workflow), or the workflow (the activity raises them
    #: non-retryable, saying in its details whether another try can help).
    provider_retries: Literal["temporal", "workflow"] = "temporal"
    #: The simulate provider's seed for this run (from its inputs and replicate); None: the
    #: run id seeds it (runs started before seeds came from inputs).
    sim_seed: str | None = None
    #: Judge stages: the mean latent quality of the simulated outputs it judges, which a
    #: simulated judge scores (with noise); None: none of them has one.
    judged_quality: float | None = None
    #: Lesson texts from the heuristics memory, put in the system message's Lessons block.
    lessons: list[str] = Field(default_factory=list)
    #: Passages retrieved for the stage (``retrieve:``), as ``{ref, heading, text}``, put in
    #: the prompt's Knowledge block.
    knowledge: list[dict[str, Any]] = Field(default_factory=list)
    #: The facts kept from earlier runs (memory.extract_knowledge), a system message block.
    facts: str = ""
    #: Tools the engine itself answers (``recall``), as ``{name, description, parameters}``.
    extra_tools: list[dict[str, Any]] = Field(default_factory=list)
    #: Count the tokens of the prompt and of each transcript message (a context policy's
    #: window), and report the model's context window.
    count_tokens: bool = False
    #: reason_first, the answer call: the private reasoning its prompt carries (after the
    #: task, marked private); "": none.
    reasoning: str = ""
    #: reason_first, the reasoning call itself: what it is asked after the task; "": this is
    #: not a reasoning call.
    reasoning_request: str = ""


class LLMCallResult(_Model):
    output: Any = None
    valid: bool
    error: str | None = None
    text: str = ""
    model: str
    tier: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    simulated_quality: float | None = None
    #: simulate: ids of the stage's declared pitfalls this output fell into.
    pitfalls_hit: list[str] = Field(default_factory=list)
    #: simulate: ids of the stage's declared needed facts its prompt lacked.
    facts_missing: list[str] = Field(default_factory=list)
    inputs_hash: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    hooks: dict[str, Any] = Field(default_factory=dict)
    #: A cache hit's provenance (``cache``, ``cache_entry``, ``similarity``, ``source_run``,
    #: ``saved_cost_usd``); None for a model call.
    cache: dict[str, Any] | None = None
    needs_approval: str | None = None
    finish_reason: str | None = None
    #: How sure the attempt is of its output, and from what (runtime/confidence).
    confidence: Confidence | None = None
    #: simulate: the output hedged (its tier's hedge_rate): ground truth for calibration.
    simulated_hedged: bool = False
    #: With ``count_tokens``: tokens the model accepts (None: unknown), the prompt's tokens
    #: before the transcript, and each transcript message's, in the order sent.
    context_window: int | None = None
    base_tokens: int | None = None
    message_tokens: list[int] = Field(default_factory=list)
    #: reason_first: the private reasoning call before this answer (``text``, ``tier``,
    #: ``model`` and its own tokens, cost and latency, which the fields above include); for
    #: the stage's trace only, never its output.
    reasoning: dict[str, Any] | None = None


class ToolCallInput(_Model):
    run_id: str
    stage_id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    variables: dict[str, Any] = Field(default_factory=dict)
    render_args: bool = True
    safety_mode: Literal["permissive", "strict"] = "permissive"
    safety_rules: list[Any] = Field(default_factory=list)
    approved: bool = False
    spec_name: str | None = None
    outer_policies: list[PolicySet] = Field(default_factory=list)
    http_allow_hosts: list[str] = Field(default_factory=list)
    #: The requests the spec marks safe (http_safe): the only http_request calls that are
    #: fully reversible.
    http_safe: list[HttpSafe] = Field(default_factory=list)
    verification: bool = False  # a verification run's call: only fully reversible ones run
    tool_modules: list[str] = Field(default_factory=list)  # the plan's; loaded before the call
    network: bool = False  # the stage's grant: programs reach out through the egress proxy
    sandbox_env: dict[str, str] = Field(default_factory=dict)  # sandbox.env, for programs
    #: A tool loop's call under a context policy: store the result's text in the message
    #: store (runtime/message_store.py) and return its reference.
    store_result: bool = False
    #: An MCP tool's call (``tool`` is ``mcp:<server>/<tool>``): the server and the tool as
    #: the plan pinned them.
    mcp_server: PlanMcpServer | None = None
    mcp_tool: PlanMcpTool | None = None

    @model_serializer(mode="wrap")
    def _sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_grants(handler(self))


class ToolCallResult(_Model):
    ok: bool
    output: dict[str, Any] = Field(default_factory=dict)
    error_type: str | None = None
    error: str | None = None
    #: With ``store_result``: the reference of the output's JSON text in the message store.
    content_ref: str | None = None
    policy_action: str = "allow"
    policy_rule: int | None = None
    policy_message: str = ""
    hooks: dict[str, Any] = Field(default_factory=dict)


class AdapterCallInput(_Model):
    """One run of a spec adapter (a script or a Python function) under the run's policy."""

    run_id: str
    stage_id: str
    spec_name: str
    adapter: PlanAdapter
    #: The stage's variables: the argv (or args) templates read them, and a script gets them
    #: as JSON in ``ARMATURE_CONTEXT``, as armature-agents 0.7.0 gave it its context.
    variables: dict[str, Any] = Field(default_factory=dict)
    safety_mode: Literal["permissive", "strict"] = "permissive"
    safety_rules: list[Any] = Field(default_factory=list)
    outer_policies: list[PolicySet] = Field(default_factory=list)
    approved: bool = False
    verification: bool = False
    network: bool = False  # the stage's grant: the script reaches out through the egress proxy
    sandbox_env: dict[str, str] = Field(default_factory=dict)  # sandbox.env, for the script

    @model_serializer(mode="wrap")
    def _sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_grants(handler(self))


class AdapterCallResult(_Model):
    """What the adapter returned, or why it did not run (``ok`` False: ``error_type``
    ``policy_blocked``, ``timeout`` or ``tool_error``)."""

    ok: bool
    #: script: ``{stdout, stderr, exit_code, truncated}``, or with ``parse: json`` the object
    #: it printed; python: the function's (JSON-safe) return value.
    output: Any = None
    error_type: str | None = None
    error: str | None = None
    #: What the safety policy saw: ``{cmd, argv}`` (script) or ``{fn, **args}`` (python).
    seen: dict[str, Any] = Field(default_factory=dict)
    policy_action: str = "allow"
    policy_rule: int | None = None
    policy_message: str = ""


class MemoryQuery(_Model):
    """Read the memory kept under ``memory_name``; ``limits`` caps each ``stage.key``."""

    memory_name: str
    limits: dict[str, int] = Field(default_factory=dict)


class MemoryEntry(_Model):
    """One remembered value and where it came from."""

    stage: str
    key: str
    value: Any = None
    run_id: str
    recorded_at: str


class MemoryValues(_Model):
    """The remembered values, oldest first."""

    entries: list[MemoryEntry] = Field(default_factory=list)


class MemoryCapture(_Model):
    """Keep these values of one finished stage under ``memory_name``, each ``stage.key`` in a
    rolling window of ``max_entries`` (``limits``)."""

    memory_name: str
    entries: list[MemoryEntry]
    limits: dict[str, int]


class LessonsQuery(_Model):
    """The lessons one LLM stage execution carries (``load_lessons``)."""

    spec_name: str
    stage_id: str
    #: The stage's rendered task, for relevance (embedding similarity).
    task_text: str = ""
    top_k: int = 3
    token_budget: int = 300
    #: Seeds the utility samples (the same seed gives the same choice).
    seed: str
    embedding_model: str | None = None
    #: Exactly these heuristic ids (those scoped to the stage) that may enter a prompt:
    #: promoted ones, and quarantined ones in a verification run.
    only_ids: list[str] | None = None
    #: The run is a verification run (memory CI's replays carry the quarantined lesson).
    verification: bool = False
    #: The stage is a judge: its prompt carries no lessons.
    judge: bool = False


class Lessons(_Model):
    """The lessons chosen, in prompt order, and the ids asked for that do not exist."""

    ids: list[str] = Field(default_factory=list)
    texts: list[str] = Field(default_factory=list)
    #: The embedder relevance was measured with (None: none was needed).
    embedder: str | None = None
    missing: list[str] = Field(default_factory=list)
    #: Lessons asked for that may not enter this prompt: ``"<id>: <why>"``.
    refused: list[str] = Field(default_factory=list)


class LessonsReward(_Model):
    """Reward the lessons a stage carried with its outcome (once per lesson and ``key``), and
    retire a promoted one whose posterior mean utility is under ``retire_below`` after
    ``min_uses`` uses."""

    ids: list[str]
    reward: float = Field(ge=0, le=1)
    key: str
    at: str
    retire_below: float = 0.3
    min_uses: int = 10


class PriorRunQuery(_Model):
    spec_name: str
    carry_forward: dict[str, str]
    exclude_run_id: str


class PriorRunResult(_Model):
    run_id: str | None = None
    values: dict[str, Any] = Field(default_factory=dict)
