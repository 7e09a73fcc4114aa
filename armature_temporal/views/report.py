"""One run's report (``armature report RUN``): the run as the trace store has it, and the
models its report is built from.

:func:`load_run` reads a :class:`RunTrace` (and its gate decisions) from a TraceStore;
:func:`build_report` is a pure function from those to a :class:`RunReport` (what ``--json``
prints). Rendering is in :mod:`armature_temporal.views.render`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.views.timeline import (
    DagNode,
    StageSpan,
    build_dag,
    build_timeline,
    plan_dag,
    recorded_dag,
)

if TYPE_CHECKING:
    from armature_temporal.spec.compiler import Plan
    from armature_temporal.store import TraceStore
    from armature_temporal.store.schema import RunRow

__all__ = [
    "AttemptView",
    "GateView",
    "RunReport",
    "RunTrace",
    "StageView",
    "ToolCallView",
    "build_report",
    "load_run",
]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunTrace(_View):
    """One run as the store has it: its summary row and its chain of records."""

    run_id: str
    spec_name: str
    spec_hash: str
    spec_version: str | None = None
    parent_run_id: str | None = None
    status: str
    reason: str | None = None
    started_at: str
    finished_at: str | None = None
    latency_ms: float | None = None
    hqs: float | None = None
    # An improvement round's verification run (recent inputs replayed, gates deciding
    # themselves): dashboards, exports and diagnoses leave these out.
    verification: bool = False
    records: list[TraceRecord] = Field(default_factory=list)

    @property
    def inputs(self) -> dict[str, Any] | None:
        """The run inputs its ``run_start`` record holds (None: no such record)."""
        start = next((r for r in self.records if r.kind == "run_start"), None)
        inputs = start.data.get("inputs") if start is not None else None
        return inputs if isinstance(inputs, dict) else None


# --- one run -------------------------------------------------------------------------------


class AttemptView(_View):
    seq: int
    stage_id: str
    iteration: int
    attempt: int
    tier: str | None
    model: str | None
    arm_id: str | None
    valid: bool | None
    escalated: bool
    error_type: str | None
    error: str | None
    latency_ms: float
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    output: Any = None
    #: Heuristic ids of the lessons this attempt's prompt carried (``lesson:<id>`` provenance).
    lessons: list[str] = Field(default_factory=list)


class ToolCallView(_View):
    seq: int
    stage_id: str
    tool: str | None
    status: str | None
    policy_action: str | None
    approved: bool
    error_type: str | None
    error: str | None


class StageView(_View):
    stage_id: str
    kind: str | None = None
    role: str | None = None
    role_type: str | None = None
    status: str
    tier: str | None = None
    attempts: int = 0
    iterations: int = 0
    escalated: bool = False
    error_type: str | None = None
    error: str | None = None
    judge_score: float | None = None
    output: Any = None
    #: The ``evaluate`` criteria judged after the run: ``{scores, mean, rationale, tier}``, or
    #: ``{error, tier}``; None when the stage has no criteria (or was not evaluated).
    evaluation: dict[str, Any] | None = None
    #: The experience critic's verdict after the run: ``{score (0-10), evidence, critic_tier}``;
    #: None when the spec has no experience section (or the stage was not critiqued).
    critique: dict[str, Any] | None = None
    attempt_records: list[AttemptView] = Field(default_factory=list)
    tool_calls: list[ToolCallView] = Field(default_factory=list)
    #: Its searches of knowledge (``retrieve:`` or the ``retrieve`` tool), in order: ``{via,
    #: collection, query, passages: [{ref, sha256, score}]}``, or ``{..., error}``.
    retrievals: list[dict[str, Any]] = Field(default_factory=list)


class GateView(_View):
    """A gate decision. ``by`` is who decided as the run recorded it (``signal``: nobody
    proved who; ``claimed_by`` is then what the sender claimed). ``verified`` is whether the
    store's row checks against its MAC; when it does not, ``unverified`` says why and every
    field here may have been edited."""

    stage_id: str
    decision: str
    by: str | None = None
    comment: str | None = None
    decided_at: str
    claimed_by: str | None = None
    verified: bool = False
    unverified: str | None = None

    @property
    def decider(self) -> str:
        """``by`` as a person should read it: an unauthenticated sender's claim labelled as
        one, an unverified row marked so."""
        shown = self.by or "?"
        if self.claimed_by:
            shown += f" (unauthenticated; claimed {self.claimed_by!r})"
        if not self.verified:
            shown += " (UNVERIFIED record)"
        return shown


class RunReport(_View):
    """Everything ``armature report RUN`` prints."""

    run_id: str
    spec_name: str
    spec_version: str | None
    spec_hash: str
    parent_run_id: str | None
    status: str
    reason: str | None
    started_at: str
    finished_at: str | None
    latency_ms: float | None
    hqs: float | None
    #: The run inputs it started with (defaults filled in), from its run_start record.
    inputs: dict[str, Any] | None = None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    records: int
    stages: list[StageView]
    gates: list[GateView]
    #: Each stage's span in time with its attempts (see :mod:`.timeline`).
    timeline: list[StageSpan] = Field(default_factory=list)
    #: The plan's stages by topological level; empty when the plan was not given.
    dag: list[DagNode] = Field(default_factory=list)


def _attempt_view(r: TraceRecord) -> AttemptView:
    return AttemptView(
        seq=r.seq,
        stage_id=r.stage_id or "",
        iteration=r.iteration,
        attempt=r.attempt,
        tier=r.tier,
        model=r.model,
        arm_id=r.arm_id,
        valid=r.output_valid,
        escalated=r.escalated,
        error_type=r.error_type,
        error=r.error,
        latency_ms=r.latency_ms,
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
        cost_usd=r.cost_usd,
        output=r.output,
        lessons=[k.split(":", 1)[1] for k in r.inputs_provenance if k.startswith("lesson:")],
    )


# The ids of the judges a workflow runs for a stage, ``<stage>__consensus`` (a fan-out's
# reconciling judge) and ``<stage>__evaluation``: their attempts belong to ``<stage>``.
HELPER_SUFFIXES = ("__consensus", "__evaluation")


def build_report(
    trace: RunTrace, gates: Sequence[GateView] = (), plan: Plan | None = None
) -> RunReport:
    """A run's report: each stage with every one of its attempts and tool calls, and their
    spans in time; its DAG and stage starts from what the run recorded, else from ``plan``
    (the version the run ran)."""
    dag = recorded_dag(trace.records) or (plan_dag(plan) if plan is not None else None)
    order: list[str] = []
    attempts: dict[str, list[AttemptView]] = defaultdict(list)
    tools: dict[str, list[ToolCallView]] = defaultdict(list)
    finished: dict[str, TraceRecord] = {}
    evaluations: dict[str, dict[str, Any]] = {}
    critiques: dict[str, dict[str, Any]] = {}
    retrievals: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in trace.records:
        if r.kind == "retrieval" and r.stage_id is not None:
            retrievals[r.stage_id].append({**r.data, **({"error": r.error} if r.error else {})})
        if r.kind == "evaluation" and r.stage_id is not None and isinstance(r.output, dict):
            evaluations[r.stage_id] = r.output
        if r.kind == "critique" and r.stage_id is not None:
            critiques[r.stage_id] = {
                "score": r.data.get("score"),
                "evidence": r.data.get("evidence") or [],
                "critic_tier": r.data.get("critic_tier"),
                **({"error": r.error} if r.error else {}),
            }
        if r.stage_id is None or r.kind not in ("attempt", "tool", "stage"):
            continue
        if r.kind == "attempt" and r.stage_id.endswith(HELPER_SUFFIXES):
            # A judge the workflow ran for a stage (a fan-out's consensus judge): its calls
            # are the stage's, shown under their own id in the attempts, never as a stage
            # of their own that never ends.
            owner = r.stage_id.rsplit("__", 1)[0]
            if owner not in order:
                order.append(owner)
            attempts[owner].append(_attempt_view(r))
            continue
        if r.stage_id not in order:
            order.append(r.stage_id)
        if r.kind == "attempt":
            attempts[r.stage_id].append(_attempt_view(r))
        elif r.kind == "tool":
            tools[r.stage_id].append(
                ToolCallView(
                    seq=r.seq,
                    stage_id=r.stage_id,
                    tool=r.data.get("tool"),
                    status=r.status,
                    policy_action=r.data.get("policy_action"),
                    approved=bool(r.data.get("approved")),
                    error_type=r.error_type,
                    error=r.error,
                )
            )
        else:
            finished[r.stage_id] = r
    stages = []
    for sid in order:
        end = finished.get(sid)
        tried = attempts[sid]
        last = tried[-1] if tried else None
        stages.append(
            StageView(
                stage_id=sid,
                kind=end.data.get("kind") if end else ("llm" if tried else None),
                role=end.role if end else None,
                role_type=end.role_type if end else None,
                status=(end.status or "unknown") if end else "running",
                tier=end.tier if end else (last.tier if last else None),
                attempts=end.attempt if end else len(tried),
                iterations=end.iteration if end else 0,
                escalated=end.escalated if end else bool(last and last.escalated),
                error_type=end.error_type if end else None,
                error=end.error if end else None,
                judge_score=end.judge_score if end else None,
                output=end.output if end else None,
                evaluation=evaluations.get(sid),
                critique=critiques.get(sid),
                attempt_records=tried,
                tool_calls=tools[sid],
                retrievals=retrievals.get(sid, []),
            )
        )
    # Model calls: the stages' attempts, the evaluations' judge calls, the critiques and the
    # context summaries.
    made = [r for r in trace.records if r.kind in ("attempt", "evaluation", "critique", "context")]
    return RunReport(
        run_id=trace.run_id,
        spec_name=trace.spec_name,
        spec_version=trace.spec_version,
        spec_hash=trace.spec_hash,
        parent_run_id=trace.parent_run_id,
        status=trace.status,
        reason=trace.reason,
        started_at=trace.started_at,
        finished_at=trace.finished_at,
        latency_ms=trace.latency_ms,
        hqs=trace.hqs,
        inputs=trace.inputs,
        prompt_tokens=sum(r.prompt_tokens for r in made),
        completion_tokens=sum(r.completion_tokens for r in made),
        cost_usd=sum(r.cost_usd for r in made),
        records=len(trace.records),
        stages=stages,
        gates=list(gates),
        timeline=build_timeline(trace.started_at, trace.records, dag),
        dag=build_dag(dag, {s.stage_id: s.status for s in stages}) if dag is not None else [],
    )


# --- reading the store ---------------------------------------------------------------------


def _trace(row: RunRow, records: list[TraceRecord]) -> RunTrace:
    return RunTrace(
        run_id=row.run_id,
        spec_name=row.spec_name,
        spec_hash=row.spec_hash,
        spec_version=row.spec_version,
        parent_run_id=row.parent_run_id,
        status=row.status,
        reason=row.reason,
        started_at=row.started_at,
        finished_at=row.finished_at,
        latency_ms=row.latency_ms,
        hqs=row.hqs,
        verification=bool(row.verification),
        records=records,
    )


def load_run(store: TraceStore, run_id: str) -> tuple[RunTrace, list[GateView]] | None:
    """A run with its records and gate decisions, or None when the store has neither."""
    records = store.records(run_id)
    row = store.run(run_id)
    if row is None:
        if not records:
            return None
        first, last = records[0], records[-1]
        trace = RunTrace(
            run_id=run_id,
            spec_name=first.spec_name,
            spec_hash=first.spec_hash,
            status=(last.status or "unknown") if last.kind == "run_end" else "running",
            started_at=first.recorded_at,
            records=records,
        )
    else:
        trace = _trace(row, records)
    gates = [
        GateView(
            stage_id=g.stage_id,
            decision=g.decision,
            by=g.decided_by,
            comment=g.comment,
            decided_at=g.decided_at,
            claimed_by=g.claimed_by,
            verified=g.trusted,
            unverified=g.record_problem,
        )
        for g in store.gate_decisions(run_id)
    ]
    return trace, gates
