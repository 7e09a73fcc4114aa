"""``RunContext``: everything one run knows, shared by the interpreter's collaborators."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from armature_temporal.runtime.models import (
    GateDecision,
    GateInfo,
    PolicySet,
    RefusedSignal,
    RunInput,
    RunState,
    StageResult,
)
from armature_temporal.spec.compiler import Plan
from workflows.interpreter.events import EventLog
from workflows.interpreter.failures import StageFailure

__all__ = ["RunContext"]


class RunContext:
    """The mutable state of one run. It lives in the workflow instance (so in Temporal's
    history, by replay) and is read by the ``status`` query."""

    def __init__(self, inp: RunInput, run_id: str, started: datetime) -> None:
        self.run_id = run_id
        self.plan: Plan = inp.plan
        self.inputs = inp.inputs
        self.prior_run = inp.prior_run
        self.prior_run_id: str | None = None
        self.outer_policies = list(inp.outer_policies)
        self.verification = inp.verification
        self.replicate = inp.replicate
        #: stage id → (arm id, decision id) of the arm the bandit chose for it.
        self.arm_choice: dict[str, tuple[str, str]] = {}
        self.rewarded: dict[str, tuple[float, str]] = {}
        self.last_quality: dict[str, float] = {}
        self.results: dict[str, StageResult] = {s.id: StageResult() for s in inp.plan.stages}
        self.outputs: dict[str, Any] = {}
        self.pending: dict[str, GateInfo] = {}
        self.decisions: dict[str, GateDecision] = {}
        #: In a verification run, each stage held unapproved → the gate it is held at (its
        #: own id for the gated stage itself): those stages do not run.
        self.held: dict[str, str] = {}
        #: ``gate`` signals the run refused, with the reason (a signal cannot answer back).
        self.refused_signals: list[RefusedSignal] = []
        self.state: RunState = "running"
        #: What happened so far, for followers (the ``events`` query).
        self.events = EventLog(run_id)
        self.approval_seq: dict[str, int] = {}
        self.started = started
        #: Per stage: the run input names and upstream stage ids of its context (before
        #: signature.input narrows a prompt's share of it).
        self.context_keys: dict[str, tuple[list[str], list[str]]] = {}
        #: Values remembered across runs (memory:), once loaded.
        self.memory: dict[str, Any] | None = None
        self.llm_calls = 0
        self.executions = 0
        #: Stage id -> tokens its model calls spent (prompt and completion; every attempt,
        #: turn and reason_first reasoning): reward_cost_per_1k_tokens reads it.
        self.spent_tokens: dict[str, int] = {}

    def spend_tokens(self, stage_id: str, tokens: int) -> None:
        """Count ``tokens`` more spent by the stage's model calls."""
        self.spent_tokens[stage_id] = self.spent_tokens.get(stage_id, 0) + tokens

    def count_llm_call(self, stage_id: str) -> None:
        """One more model call; past ``contracts.max_llm_calls`` the stage (and run) fails."""
        self.llm_calls += 1
        limit = self.plan.max_llm_calls
        if limit is not None and self.llm_calls > limit:
            raise StageFailure(
                "limit_exceeded",
                f"stage {stage_id!r}: the run reached contracts.max_llm_calls ({limit}); "
                "raise the limit or make the workflow use fewer calls",
            )

    def count_execution(self, stage_id: str) -> None:
        """One more stage execution (attempts and iterations count); past
        ``contracts.max_iterations`` the stage (and run) fails."""
        self.executions += 1
        limit = self.plan.max_iterations
        if limit is not None and self.executions > limit:
            raise StageFailure(
                "limit_exceeded",
                f"stage {stage_id!r}: the run reached contracts.max_iterations ({limit} stage "
                "executions); raise the limit or bound the loops and retries",
            )

    def arm_of(self, stage_id: str) -> tuple[str | None, str | None]:
        """(arm id, decision id) chosen for the stage, or (None, None)."""
        return self.arm_choice.get(stage_id, (None, None))

    def next_approval(self, stage_id: str) -> int:
        """The number of the stage's next mid-stage approval (tool calls, hooks): 1, 2, ..."""
        seq = self.approval_seq.get(stage_id, 0) + 1
        self.approval_seq[stage_id] = seq
        return seq

    def own_policy(self) -> PolicySet:
        """This run's safety policy, as child runs inherit it (outer policies)."""
        return PolicySet(
            safety_mode=self.plan.safety_mode,
            safety_rules=[r.model_dump() for r in self.plan.safety_rules],
            http_allow_hosts=self.plan.http_allow_hosts,
            http_safe=self.plan.http_safe,
        )
