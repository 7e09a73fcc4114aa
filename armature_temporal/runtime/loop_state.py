"""A tool loop's state between workflow executions: what a long loop carries into the child
workflow that runs its later turns, and from one of that child's executions to the next
(continue-as-new), and what the child hands back to the run.

A loop runs its first ``context.segment_turns`` turns in the run's own history; then the run
starts an ``AgentLoop`` child workflow (workflows/agent_loop.py) with a :class:`LoopState`, and
the child continues as new every ``segment_turns`` turns (sooner if Temporal suggests it), so no
history holds more than one segment of turns. The state carries references, not transcripts:
the tool results out of the window travel as message-store hashes
(runtime/message_store.py), and only the turns the window holds travel whole.

Plain data, no behaviour that touches I/O (like runtime/models.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.models import GateDecision, LLMCallResult, RunInput, ToolApproval

__all__ = [
    "AGENT_LOOP_WORKFLOW",
    "AgentLoopInput",
    "AgentLoopOutcome",
    "ArchivedSpan",
    "ChainHead",
    "KeeperState",
    "LoopState",
    "MessageSlice",
    "MessageSliceQuery",
    "PendingTurn",
    "TurnState",
]

#: The child workflow's type name.
AGENT_LOOP_WORKFLOW = "AgentLoop"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnState(_Model):
    """One turn of a :class:`~armature_temporal.runtime.context.ContextKeeper`. A turn out of
    the window travels as a stub: its calls, and each result's handle and reference."""

    number: int
    assistant: dict[str, Any] = Field(default_factory=dict)
    results: list[dict[str, Any]] = Field(default_factory=list)
    #: Result texts not stored by reference (errors, results of a loop without a store).
    full: dict[str, str] = Field(default_factory=dict)
    #: Handle -> message-store reference of each stored result.
    refs: dict[str, str] = Field(default_factory=dict)
    calls: list[str] = Field(default_factory=list)
    pinned: bool = False
    tokens: list[int] = Field(default_factory=list)


class ArchivedSpan(_Model):
    """Turns ``first``..``last`` out of the window, past the stubs the window's note lists: their
    handles' references are in one message-store entry, ``ref`` (runtime/context_carry.py)."""

    first: int
    last: int
    ref: str


class KeeperState(_Model):
    """A keeper's turns (whole while in the window, stubs once out, archived once the note no
    longer lists them) and its bookkeeping."""

    turns: list[TurnState] = Field(default_factory=list)
    archives: list[ArchivedSpan] = Field(default_factory=list)
    out_upto: int = 0
    summary: str | None = None
    base_tokens: int | None = None
    context_window: int | None = None
    compactions: int = 0
    offloaded: int = 0


class PendingTurn(_Model):
    """A turn whose tool calls stopped at one that waits for a person: the model's reply, the
    results of the calls before it, and which call waits."""

    llm: LLMCallResult
    results: list[tuple[dict[str, Any], str, str | None]] = Field(default_factory=list)
    waiting: int = 0


class LoopState(_Model):
    """Everything one attempt's tool loop needs to take its next turn."""

    stage_id: str
    tier: str
    prompt: str
    params: dict[str, Any] = Field(default_factory=dict)
    variables: dict[str, Any] = Field(default_factory=dict)
    attempt: int
    lessons: list[str] = Field(default_factory=list)
    #: The passages the stage's ``retrieve:`` found for this execution.
    knowledge: list[dict[str, Any]] = Field(default_factory=list)
    #: The facts block its prompt carries (memory.extract_knowledge), or "".
    facts: str = ""
    context: dict[str, Any] = Field(default_factory=dict)
    sim_seed: str | None = None
    judged_quality: float | None = None
    #: reason_first: the attempt's private reasoning, which every turn's prompt carries.
    reasoning: str = ""
    #: Tool-calling turns taken so far.
    turn: int = 0
    #: A hook's approval of the model call was given (the next call goes ahead).
    approved: bool = False
    #: The earlier turns' model calls, summed (the attempt's record counts every turn).
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    keeper: KeeperState | None = None
    #: The stage's loop budgets spent so far (all its attempts).
    used_tokens: int = 0
    used_cost_usd: float = 0.0
    started: datetime | None = None
    stopped: str | None = None
    pending: PendingTurn | None = None
    #: The run's decision on what the loop handed back for (a tool call or the model call).
    decision: GateDecision | None = None
    #: The stage's loop progress (``StageResult.loop``), as last shown.
    progress: dict[str, Any] | None = None


class ChainHead(_Model):
    """Where the run's trace chain stands: the next record's ``seq`` and the last hash."""

    seq: int
    head: str


class AgentLoopInput(_Model):
    """Start (or continue as new) the child that runs a long loop's later turns."""

    #: The run's input (its plan, inputs and policies), less the prior run it carried.
    run: RunInput
    run_id: str
    stage_id: str
    state: LoopState
    chain: ChainHead
    #: The run's model calls and stage executions so far (contracts count across the loop).
    llm_calls: int = 0
    executions: int = 0
    #: Which of the child's executions this is (1: the first).
    segment: int = 1
    #: Answer-cache entries the child's earlier executions kept (summaries).
    cache_kept: int = 0


class AgentLoopOutcome(_Model):
    """How the child's loop ended: an ``answer``; a hand-back to the run for a person's
    decision (``approval``, on ``tool_call`` or, without one, on the model call a hook
    stopped); or a ``failure`` (``provider`` failures are an attempt's, the rest the stage's)."""

    kind: Literal["answer", "approval", "failure"]
    state: LoopState
    chain: ChainHead
    answer: LLMCallResult | None = None
    message: str = ""
    tool_call: ToolApproval | None = None
    error_type: str | None = None
    provider: bool = False
    llm_calls: int = 0
    executions: int = 0
    #: Cache entries the child kept (summaries), for the run's settlement.
    cache_kept: int = 0
    segments: int = 1


class MessageSliceQuery(_Model):
    """Read ``length`` characters from ``start`` of a stored tool-loop message; with ``key``,
    ``ref`` is an archive (runtime/context_carry.py) and the message is the one it names
    ``key``."""

    ref: str
    start: int = 0
    length: int = Field(20_000, ge=1)
    key: str | None = None


class MessageSlice(_Model):
    text: str = ""
    total_chars: int = 0
    #: False: the archive has no such key.
    found: bool = True
