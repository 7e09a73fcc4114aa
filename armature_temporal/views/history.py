"""A spec's history run by run (the series ``armature dashboard SPEC --html`` draws): HQS, cost
and latency of each run, the improvements applied between them, its improvement rounds, the
bandit arms its stages chose over time and how runs whose prompts carried lessons scored.

Everything here is a pure function of what the trace store keeps: runs and their records
(:class:`~armature_temporal.views.report.RunTrace`), improvement rounds and the proposals applied
to the spec file. ``--json`` prints it under ``history``, so a chart's data is the store's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from armature_temporal.views.report import RunTrace, _View

if TYPE_CHECKING:
    from armature_temporal.improve.models import AppliedChange, ImproveRound

__all__ = [
    "ARM_WINDOWS",
    "AppliedMark",
    "ArmWindow",
    "LessonPoint",
    "RoundPoint",
    "RunPoint",
    "SpecHistory",
    "build_history",
    "run_cost",
]

#: How many windows the arm-share chart splits a spec's runs into (at most).
ARM_WINDOWS = 20
#: The record kinds whose model calls a run pays for (as the store sums ``runs.cost_usd``).
PAID_KINDS = ("attempt", "evaluation", "critique", "context")


class RunPoint(_View):
    """One run: when, which version, how it ended and what it scored and cost."""

    run_id: str
    started_at: str
    spec_hash: str
    spec_version: str | None
    status: str
    hqs: float | None
    cost_usd: float
    latency_ms: float | None
    #: Distinct heuristic ids whose lessons its prompts carried (``lesson:<id>`` provenance).
    lessons: list[str] = Field(default_factory=list)
    #: The bandit arm each stage ran with (stage id -> arm id), for stages with arms.
    arms: dict[str, str] = Field(default_factory=dict)


class AppliedMark(_View):
    """A proposal written to the spec file, with the mean HQS of the runs either side of it."""

    proposal_id: str
    applied_at: str
    base_spec_hash: str
    spec_hash: str
    #: The first run of the version it made (None: not run yet).
    first_run_id: str | None
    runs_before: int
    hqs_before: float | None
    runs_after: int
    hqs_after: float | None


class RoundPoint(_View):
    """An improvement round: the mean HQS of the runs it read, and what became of it."""

    id: str
    created_at: str
    status: str
    spec_hash: str
    mean_hqs: float | None
    runs: int
    drift: float | None


class ArmWindow(_View):
    """How often each arm of one stage was chosen in a window of consecutive runs."""

    stage_id: str
    first_run_id: str
    last_run_id: str
    runs: int
    counts: dict[str, int]


class LessonPoint(_View):
    """The memory loop's learning curve at one run: its lessons, its HQS, and the running
    mean HQS so far of the runs with lessons in their prompts and of those without."""

    run_id: str
    lessons: int
    hqs: float | None
    mean_with: float | None
    mean_without: float | None


class SpecHistory(_View):
    runs: list[RunPoint]
    applied: list[AppliedMark] = Field(default_factory=list)
    rounds: list[RoundPoint] = Field(default_factory=list)
    arms: list[ArmWindow] = Field(default_factory=list)
    memory: list[LessonPoint] = Field(default_factory=list)


def run_cost(run: RunTrace) -> float:
    """What a run's model calls cost: the sum the store keeps as its ``cost_usd``."""
    return sum(r.cost_usd for r in run.records if r.kind in PAID_KINDS)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _point(run: RunTrace) -> RunPoint:
    lessons: list[str] = []
    arms: dict[str, str] = {}
    for r in run.records:
        if r.kind == "attempt":
            for key in r.inputs_provenance:
                lesson = key.split(":", 1)[1] if key.startswith("lesson:") else None
                if lesson is not None and lesson not in lessons:
                    lessons.append(lesson)
        if r.kind in ("attempt", "stage") and r.stage_id and r.arm_id:
            arms[r.stage_id] = r.arm_id
    return RunPoint(
        run_id=run.run_id,
        started_at=run.started_at,
        spec_hash=run.spec_hash,
        spec_version=run.spec_version,
        status=run.status,
        hqs=run.hqs,
        cost_usd=run_cost(run),
        latency_ms=run.latency_ms,
        lessons=lessons,
        arms=arms,
    )


def _applied(points: Sequence[RunPoint], applied: Sequence[AppliedChange]) -> list[AppliedMark]:
    by_hash: dict[str, list[RunPoint]] = defaultdict(list)
    for p in points:
        by_hash[p.spec_hash].append(p)
    marks = []
    for change in applied:
        before, after = by_hash.get(change.base_spec_hash, []), by_hash.get(change.spec_hash, [])
        marks.append(
            AppliedMark(
                proposal_id=change.proposal_id,
                applied_at=change.applied_at,
                base_spec_hash=change.base_spec_hash,
                spec_hash=change.spec_hash,
                first_run_id=after[0].run_id if after else None,
                runs_before=len(before),
                hqs_before=_mean([p.hqs for p in before if p.hqs is not None]),
                runs_after=len(after),
                hqs_after=_mean([p.hqs for p in after if p.hqs is not None]),
            )
        )
    return marks


def _arm_windows(points: Sequence[RunPoint], windows: int) -> list[ArmWindow]:
    stages = sorted({s for p in points for s in p.arms})
    out = []
    for stage in stages:
        chosen = [p for p in points if stage in p.arms]
        size = max(1, -(-len(chosen) // windows))  # ceiling: at most ``windows`` windows
        for i in range(0, len(chosen), size):
            window = chosen[i : i + size]
            out.append(
                ArmWindow(
                    stage_id=stage,
                    first_run_id=window[0].run_id,
                    last_run_id=window[-1].run_id,
                    runs=len(window),
                    counts=dict(sorted(Counter(p.arms[stage] for p in window).items())),
                )
            )
    return out


def _memory(points: Sequence[RunPoint]) -> list[LessonPoint]:
    with_lessons: list[float] = []
    without: list[float] = []
    out = []
    for p in points:
        if p.hqs is not None:
            (with_lessons if p.lessons else without).append(p.hqs)
        out.append(
            LessonPoint(
                run_id=p.run_id,
                lessons=len(p.lessons),
                hqs=p.hqs,
                mean_with=_mean(with_lessons),
                mean_without=_mean(without),
            )
        )
    return out


def build_history(
    runs: Sequence[RunTrace],
    rounds: Sequence[ImproveRound] = (),
    applied: Sequence[AppliedChange] = (),
    *,
    windows: int = ARM_WINDOWS,
) -> SpecHistory:
    """A spec's runs (oldest first, whatever order given), the changes applied to it and its
    rounds, as the series its charts draw."""
    points = [_point(r) for r in sorted(runs, key=lambda r: (r.started_at, r.run_id))]
    uses_memory = any(p.lessons for p in points)
    return SpecHistory(
        runs=points,
        applied=_applied(points, applied),
        rounds=[
            RoundPoint(
                id=r.id,
                created_at=r.created_at,
                status=r.status,
                spec_hash=r.spec_hash,
                mean_hqs=r.mean_hqs,
                runs=r.runs,
                drift=r.drift,
            )
            for r in rounds
        ],
        arms=_arm_windows(points, windows),
        memory=_memory(points) if uses_memory else [],
    )
