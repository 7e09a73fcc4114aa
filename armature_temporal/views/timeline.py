"""One run's shape in time and as a graph (what ``armature report RUN --html`` draws): a span
per stage with its model attempts, and the stages laid out by topological level.

The trace store keeps when each stage ended (its ``stage`` record) and when each model attempt
or tool call ended and how long it took (``recorded_at``, ``latency_ms``). A stage's start is
when the scheduler began it: the end of its last dependency (the run's start for a stage
without any) when the plan is known, else the start of its first attempt or tool call; a stage
with neither (a gate, without the plan) starts where it ends. The plan is not part of the
record: ``armature report --spec FILE`` and ``armature serve`` (for the specs it serves) give
it, checked against the run's spec_hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.traces import TraceRecord

if TYPE_CHECKING:
    from armature_temporal.spec.compiler import Plan

__all__ = [
    "AttemptSpan",
    "DagNode",
    "DagStage",
    "StageSpan",
    "build_dag",
    "build_timeline",
    "plan_dag",
    "recorded_dag",
]

# The suffixes of the judges a workflow runs for a stage (see report.HELPER_SUFFIXES).
_HELPERS = ("__consensus", "__evaluation")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class AttemptSpan(_Model):
    """One model attempt or tool call inside a stage's span (ms from the run's start)."""

    kind: Literal["attempt", "tool"]
    seq: int
    start_ms: float
    end_ms: float
    tier: str | None = None
    valid: bool | None = None


class StageSpan(_Model):
    """One stage's span: ``start``/``end`` as recorded (ISO), and in ms from the run's start."""

    stage_id: str
    status: str
    start: str
    end: str
    start_ms: float
    end_ms: float
    #: Where ``start`` comes from: its dependencies' ends (the plan), its first attempt or tool
    #: call, or (neither known) its own end.
    start_from: Literal["dependencies", "attempts", "end"]
    attempts: list[AttemptSpan] = Field(default_factory=list)


class DagNode(_Model):
    """A stage of the plan: its kind, dependencies, topological level and how it ended."""

    stage_id: str
    kind: str
    depends_on: list[str]
    level: int
    status: str


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _ms(at: datetime, origin: datetime) -> float:
    return round((at - origin).total_seconds() * 1000, 3)


def _owner(stage_id: str) -> str:
    return stage_id.rsplit("__", 1)[0] if stage_id.endswith(_HELPERS) else stage_id


class DagStage(BaseModel):
    """A stage's place in the DAG: the plan's, or what the run recorded of it (``dag`` in its
    ``run_start`` record, in runs since the ``dag-in-trace`` patch)."""

    id: str
    kind: str
    depends_on: list[str] = Field(default_factory=list)


def recorded_dag(records: Sequence[TraceRecord]) -> list[DagStage] | None:
    """The DAG a run recorded at its start, or None (a run from before it was recorded)."""
    for r in records:
        if r.kind == "run_start":
            dag = (r.data or {}).get("dag")
            return [DagStage.model_validate(s) for s in dag] if isinstance(dag, list) else None
    return None


def plan_dag(plan: Plan) -> list[DagStage]:
    """The plan's stages as DAG nodes."""
    return [DagStage(id=s.id, kind=s.kind, depends_on=list(s.depends_on)) for s in plan.stages]


def build_timeline(
    run_start: str, records: Sequence[TraceRecord], dag: Sequence[DagStage] | None = None
) -> list[StageSpan]:
    """Each stage that recorded its end, in the order it ended, with its attempts' spans."""
    origin = _at(run_start)
    ends: dict[str, TraceRecord] = {}
    calls: dict[str, list[AttemptSpan]] = {}
    for r in records:
        if r.stage_id is None:
            continue
        if r.kind == "stage":
            ends[r.stage_id] = r
        elif r.kind in ("attempt", "tool"):
            end = _at(r.recorded_at)
            calls.setdefault(_owner(r.stage_id), []).append(
                AttemptSpan(
                    kind="attempt" if r.kind == "attempt" else "tool",
                    seq=r.seq,
                    start_ms=_ms(end - timedelta(milliseconds=r.latency_ms), origin),
                    end_ms=_ms(end, origin),
                    tier=r.tier,
                    valid=r.output_valid,
                )
            )
    deps = {s.id: list(s.depends_on) for s in dag} if dag is not None else None
    spans = []
    for sid, record in ends.items():
        ended = _at(record.recorded_at)
        tried = calls.get(sid, [])
        start: datetime
        source: Literal["dependencies", "attempts", "end"]
        if deps is not None and sid in deps:
            before = [_at(ends[d].recorded_at) for d in deps[sid] if d in ends]
            start, source = (max(before) if before else origin), "dependencies"
        elif tried:
            start = origin + timedelta(milliseconds=min(a.start_ms for a in tried))
            source = "attempts"
        else:
            start, source = ended, "end"
        start = min(start, ended)
        spans.append(
            StageSpan(
                stage_id=sid,
                status=record.status or "unknown",
                start=start.isoformat(),
                end=record.recorded_at,
                start_ms=_ms(start, origin),
                end_ms=_ms(ended, origin),
                start_from=source,
                attempts=tried,
            )
        )
    return spans


def build_dag(dag: Sequence[DagStage], statuses: dict[str, str]) -> list[DagNode]:
    """The stages with their topological level (0: no dependencies; else one more than the
    deepest dependency), in plan order; ``statuses`` says how each ended (else not run)."""
    deps = {s.id: list(s.depends_on) for s in dag}
    level: dict[str, int] = {}

    def depth(sid: str, seen: frozenset[str] = frozenset()) -> int:
        if sid not in level:
            inner = [d for d in deps.get(sid, []) if d in deps and d not in seen]
            level[sid] = 1 + max((depth(d, seen | {sid}) for d in inner), default=-1)
        return level[sid]

    return [
        DagNode(
            stage_id=s.id,
            kind=s.kind,
            depends_on=deps[s.id],
            level=depth(s.id),
            status=statuses.get(s.id, "not run"),
        )
        for s in dag
    ]
