"""A spec over many runs (``armature dashboard [SPEC]``): per spec version, its HQS trend,
failure taxonomy, latency, spend and the configurations its attempts used.

:func:`load_runs` reads :class:`~armature_temporal.views.report.RunTrace` objects from a
TraceStore; ``build_*`` are pure functions from those to the dashboard models (what ``--json``
prints). Aggregates are kept per spec version (spec_hash) and never mix versions. Rendering is
in :mod:`armature_temporal.views.render`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from armature_temporal.runtime.stats import percentile
from armature_temporal.runtime.traces import FAILURE_TAXONOMY, TraceRecord
from armature_temporal.views.cache import CacheUsage, cache_usage
from armature_temporal.views.calibration import StageCalibration, build_calibration
from armature_temporal.views.history import SpecHistory, build_history
from armature_temporal.views.report import RunTrace, _trace, _View

if TYPE_CHECKING:
    from armature_temporal.improve.models import AppliedChange, ImproveRound
    from armature_temporal.store import TraceStore

__all__ = [
    "SPARK_WIDTH",
    "ConfigUsage",
    "HQSTrend",
    "SpecDashboard",
    "SpecSummary",
    "VersionStats",
    "build_dashboard",
    "build_overview",
    "failure_counts",
    "load_runs",
    "percentile",
    "sparkline",
]

_BARS = "▁▂▃▄▅▆▇█"
#: Points shown in a sparkline (the newest); ``--json`` has the whole series.
SPARK_WIDTH = 40


class HQSTrend(_View):
    series: list[float]
    mean: float | None
    last: float | None
    sparkline: str


class ConfigUsage(_View):
    """One configuration seen in attempts: stage, role, tier, model and bandit arm."""

    stage_id: str
    role: str | None
    tier: str | None
    model: str | None
    arm_id: str | None
    attempts: int
    valid_rate: float | None
    latency_p50_ms: float | None
    cost_usd: float


class VersionStats(_View):
    """One spec version (spec_hash): its runs, HQS trend, failures, latency and spend.

    ``failed`` counts runs that ended other than completed (failed, rejected, cancelled);
    latency is the wall time of finished runs; tokens and cost are summed over attempts.
    """

    spec_hash: str
    spec_version: str | None
    runs: int
    completed: int
    failed: int
    running: int
    first_started: str
    last_started: str
    hqs: HQSTrend
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    taxonomy: dict[str, int]
    configurations: list[ConfigUsage]
    cache: CacheUsage | None = None
    #: Per LLM stage: confidence against outcomes (reliability table, Brier score, hedging).
    calibration: list[StageCalibration] = Field(default_factory=list)
    #: The drift score of the newest improvement round on this version (None: no round).
    drift: float | None = None


class SpecDashboard(_View):
    """Everything ``armature dashboard SPEC`` shows; versions oldest first."""

    spec_name: str
    runs: int
    versions: list[VersionStats]
    taxonomy: dict[str, int]
    #: Run by run, the series ``--html`` draws (HQS, cost, latency, applied changes, rounds,
    #: bandit arms, lessons); None for a dashboard built without it.
    history: SpecHistory | None = None


class SpecSummary(_View):
    """One line of ``armature dashboard`` (all specs); HQS of the newest version only."""

    spec_name: str
    runs: int
    versions: int
    completed: int
    latest_spec_hash: str
    latest_version: str | None
    hqs_mean: float | None
    sparkline: str
    last_started: str


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH) -> str:
    """Bars for scores in [0, 1] on an absolute scale, so versions compare at a glance."""
    bars = []
    for v in values[-width:]:
        clipped = min(1.0, max(0.0, v))
        bars.append(_BARS[min(len(_BARS) - 1, int(clipped * len(_BARS)))])
    return "".join(bars)


def failure_counts(records: Iterable[TraceRecord]) -> dict[str, int]:
    """Failure taxonomy counts: every code, zero included, plus any unknown code seen.

    Each stage record with an ``error_type`` counts once under it, except ``output_invalid``,
    which counts every invalid model attempt instead (retried or not) — plus the stages that
    failed ``output_invalid`` with no invalid model attempt — and ``low_confidence``, every
    attempt refused for its confidence (retried or not).
    """
    counts: Counter[str] = Counter({code: 0 for code in FAILURE_TAXONOMY})
    invalid_attempts: Counter[tuple[str, str | None]] = Counter()
    stage_invalid: list[tuple[str, str | None]] = []
    for r in records:
        if r.kind == "attempt" and r.output_valid is False:
            invalid_attempts[(r.run_id, r.stage_id)] += 1
        elif r.kind == "attempt" and r.error_type == "low_confidence":
            counts["low_confidence"] += 1
        elif r.kind == "stage" and r.error_type:
            if r.error_type == "output_invalid":
                stage_invalid.append((r.run_id, r.stage_id))
            else:
                counts[r.error_type] += 1
    counts["output_invalid"] += sum(invalid_attempts.values())
    counts["output_invalid"] += sum(1 for key in stage_invalid if key not in invalid_attempts)
    return dict(counts)


def _configurations(records: Sequence[TraceRecord]) -> list[ConfigUsage]:
    groups: dict[tuple[str, str | None, str | None, str | None, str | None], list[TraceRecord]]
    groups = defaultdict(list)
    for r in records:
        if r.kind == "attempt":
            groups[(r.stage_id or "", r.role, r.tier, r.model, r.arm_id)].append(r)
    out = []
    for (stage_id, role, tier, model, arm_id), attempts in groups.items():
        judged = [a.output_valid for a in attempts if a.output_valid is not None]
        out.append(
            ConfigUsage(
                stage_id=stage_id,
                role=role,
                tier=tier,
                model=model,
                arm_id=arm_id,
                attempts=len(attempts),
                valid_rate=round(sum(judged) / len(judged), 4) if judged else None,
                latency_p50_ms=percentile((a.latency_ms for a in attempts), 50),
                cost_usd=sum(a.cost_usd for a in attempts),
            )
        )
    return sorted(out, key=lambda c: (c.stage_id, c.tier or "", c.model or "", c.arm_id or ""))


def _trend(runs: Sequence[RunTrace]) -> HQSTrend:
    series = [r.hqs for r in runs if r.hqs is not None]
    return HQSTrend(
        series=series,
        mean=round(sum(series) / len(series), 4) if series else None,
        last=series[-1] if series else None,
        sparkline=sparkline(series),
    )


def _version_stats(runs: Sequence[RunTrace]) -> VersionStats:
    records = [rec for run in runs for rec in run.records]
    attempts = [r for r in records if r.kind == "attempt"]
    latencies = [r.latency_ms for r in runs if r.latency_ms is not None and r.finished_at]
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    return VersionStats(
        spec_hash=runs[0].spec_hash,
        spec_version=runs[-1].spec_version,
        runs=len(runs),
        completed=sum(r.status == "completed" for r in runs),
        failed=sum(r.status not in ("completed", "running") for r in runs),
        running=sum(r.status == "running" for r in runs),
        first_started=runs[0].started_at,
        last_started=runs[-1].started_at,
        hqs=_trend(runs),
        latency_p50_ms=round(p50, 1) if p50 is not None else None,
        latency_p95_ms=round(p95, 1) if p95 is not None else None,
        prompt_tokens=sum(a.prompt_tokens for a in attempts),
        completion_tokens=sum(a.completion_tokens for a in attempts),
        cost_usd=sum(a.cost_usd for a in attempts),
        taxonomy=failure_counts(records),
        configurations=_configurations(records),
        cache=cache_usage(records),
        calibration=build_calibration(runs),
    )


def _by_version(runs: Iterable[RunTrace]) -> list[list[RunTrace]]:
    """Runs grouped by spec_hash, each group oldest first, groups by their first run."""
    groups: dict[str, list[RunTrace]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: r.started_at):
        groups[run.spec_hash].append(run)
    return list(groups.values())


def build_dashboard(
    spec_name: str,
    runs: Sequence[RunTrace],
    rounds: Sequence[ImproveRound] = (),
    applied: Sequence[AppliedChange] = (),
) -> SpecDashboard:
    """The dashboard of one spec from its runs (any order), one section per spec version;
    ``rounds`` (its improvement rounds, oldest first) give each version's drift score and,
    with ``applied`` (the proposals written to its spec file), its run-by-run history."""
    drift = {r.spec_hash: r.drift for r in rounds if r.drift is not None}
    versions = [
        _version_stats(group).model_copy(update={"drift": drift.get(group[0].spec_hash)})
        for group in _by_version(runs)
    ]
    total: Counter[str] = Counter()
    for v in versions:
        total.update(v.taxonomy)
    return SpecDashboard(
        spec_name=spec_name,
        runs=len(runs),
        versions=versions,
        taxonomy={code: total[code] for code in total},
        history=build_history(runs, rounds, applied),
    )


def build_overview(runs: Sequence[RunTrace]) -> list[SpecSummary]:
    """One summary per spec (records not needed), most recently run first."""
    by_spec: dict[str, list[RunTrace]] = defaultdict(list)
    for run in runs:
        by_spec[run.spec_name].append(run)
    out = []
    for name, spec_runs in by_spec.items():
        versions = _by_version(spec_runs)
        latest = max(versions, key=lambda g: g[-1].started_at)
        trend = _trend(latest)
        out.append(
            SpecSummary(
                spec_name=name,
                runs=len(spec_runs),
                versions=len(versions),
                completed=sum(r.status == "completed" for r in spec_runs),
                latest_spec_hash=latest[-1].spec_hash,
                latest_version=latest[-1].spec_version,
                hqs_mean=trend.mean,
                sparkline=trend.sparkline,
                last_started=max(r.started_at for r in spec_runs),
            )
        )
    return sorted(out, key=lambda s: s.last_started, reverse=True)


# --- reading the store ---------------------------------------------------------------------


def load_runs(
    store: TraceStore,
    *,
    spec: str | None = None,
    limit: int = 500,
    records: bool = True,
    verification: bool = False,
) -> list[RunTrace]:
    """The newest ``limit`` runs (of ``spec``, if given), oldest first; with their records
    unless ``records`` is False; improvement rounds' verification runs only if asked."""
    rows = store.runs(spec=spec, limit=limit, verification=None if verification else False)
    return [_trace(row, store.records(row.run_id) if records else []) for row in reversed(rows)]
