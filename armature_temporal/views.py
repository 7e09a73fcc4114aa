"""What ``armature report`` and ``armature dashboard`` show, computed from the trace store.

Three layers: ``load_*`` read :class:`RunTrace` objects from a TraceStore; ``build_*`` are pure
functions from those to report and dashboard models (what ``--json`` prints); ``render_*`` turn
the models into rich renderables. Aggregates are kept per spec version (spec_hash) and never
mix versions.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.traces import FAILURE_TAXONOMY, TraceRecord

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

    from armature_temporal.store import TraceStore
    from armature_temporal.store.schema import RunRow

__all__ = [
    "AttemptView",
    "ConfigUsage",
    "GateView",
    "HQSTrend",
    "RunReport",
    "RunTrace",
    "SpecDashboard",
    "SpecSummary",
    "StageView",
    "ToolCallView",
    "VersionStats",
    "build_dashboard",
    "build_overview",
    "build_report",
    "failure_counts",
    "load_run",
    "load_runs",
    "percentile",
    "render_dashboard",
    "render_overview",
    "render_report",
    "sparkline",
]

_BARS = "▁▂▃▄▅▆▇█"
#: Points shown in a sparkline (the newest); ``--json`` has the whole series.
SPARK_WIDTH = 40


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
    records: list[TraceRecord] = Field(default_factory=list)


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
    attempt_records: list[AttemptView] = Field(default_factory=list)
    tool_calls: list[ToolCallView] = Field(default_factory=list)


class GateView(_View):
    stage_id: str
    decision: str
    by: str | None = None
    comment: str | None = None
    decided_at: str


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
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    records: int
    stages: list[StageView]
    gates: list[GateView]


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
    )


def build_report(trace: RunTrace, gates: Sequence[GateView] = ()) -> RunReport:
    """A run's report: each stage with every one of its attempts and tool calls."""
    order: list[str] = []
    attempts: dict[str, list[AttemptView]] = defaultdict(list)
    tools: dict[str, list[ToolCallView]] = defaultdict(list)
    finished: dict[str, TraceRecord] = {}
    for r in trace.records:
        if r.stage_id is None or r.kind not in ("attempt", "tool", "stage"):
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
                attempt_records=tried,
                tool_calls=tools[sid],
            )
        )
    made = [r for r in trace.records if r.kind == "attempt"]
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
        prompt_tokens=sum(r.prompt_tokens for r in made),
        completion_tokens=sum(r.completion_tokens for r in made),
        cost_usd=sum(r.cost_usd for r in made),
        records=len(trace.records),
        stages=stages,
        gates=list(gates),
    )


# --- a spec over many runs -----------------------------------------------------------------


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


class SpecDashboard(_View):
    """Everything ``armature dashboard SPEC`` shows; versions oldest first."""

    spec_name: str
    runs: int
    versions: list[VersionStats]
    taxonomy: dict[str, int]


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


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation; None for no values."""
    data = sorted(values)
    if not data:
        return None
    rank = (len(data) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return data[low] + (data[high] - data[low]) * (rank - low)


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
    failed ``output_invalid`` with no model attempt at all (a template or condition error).
    """
    counts: Counter[str] = Counter({code: 0 for code in FAILURE_TAXONOMY})
    invalid_attempts: Counter[tuple[str, str | None]] = Counter()
    stage_invalid: list[tuple[str, str | None]] = []
    for r in records:
        if r.kind == "attempt" and r.output_valid is False:
            invalid_attempts[(r.run_id, r.stage_id)] += 1
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
    )


def _by_version(runs: Iterable[RunTrace]) -> list[list[RunTrace]]:
    """Runs grouped by spec_hash, each group oldest first, groups by their first run."""
    groups: dict[str, list[RunTrace]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: r.started_at):
        groups[run.spec_hash].append(run)
    return list(groups.values())


def build_dashboard(spec_name: str, runs: Sequence[RunTrace]) -> SpecDashboard:
    """The dashboard of one spec from its runs (any order), one section per spec version."""
    versions = [_version_stats(group) for group in _by_version(runs)]
    total: Counter[str] = Counter()
    for v in versions:
        total.update(v.taxonomy)
    return SpecDashboard(
        spec_name=spec_name,
        runs=len(runs),
        versions=versions,
        taxonomy={code: total[code] for code in total},
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
        )
        for g in store.gate_decisions(run_id)
    ]
    return trace, gates


def load_runs(
    store: TraceStore, *, spec: str | None = None, limit: int = 500, records: bool = True
) -> list[RunTrace]:
    """The newest ``limit`` runs (of ``spec``, if given), oldest first; with their records
    unless ``records`` is False."""
    rows = store.runs(spec=spec, limit=limit)
    return [_trace(row, store.records(row.run_id) if records else []) for row in reversed(rows)]


# --- rendering -----------------------------------------------------------------------------


def _short(value: Any, width: int = 60) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _table(*columns: str) -> Table:
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _colour(status: str) -> str:
    return {"completed": "green", "running": "cyan", "skipped": "dim"}.get(status, "red")


def render_report(report: RunReport) -> RenderableType:
    """Header, stages, every attempt, tool calls and gate decisions."""
    from rich.console import Group
    from rich.text import Text

    colour = _colour(report.status)
    head = Text.assemble(
        "run ",
        (report.run_id, "bold"),
        f" · spec {report.spec_name}"
        + (f" v{report.spec_version}" if report.spec_version else "")
        + f" · spec_hash {report.spec_hash[:12]} · ",
        (report.status, colour),
    )
    facts = Text(
        f"started {report.started_at[:19]} · latency {_ms(report.latency_ms)} · "
        f"HQS {_num(report.hqs)} · tokens {report.prompt_tokens} prompt + "
        f"{report.completion_tokens} completion · cost ${report.cost_usd:.4f} · "
        f"{report.records} trace records"
    )
    parts: list[Any] = [head, facts]
    if report.parent_run_id:
        parts.append(Text(f"child of {report.parent_run_id}"))
    if report.reason:
        parts.append(Text(f"reason: {report.reason}"))
    stages = _table("stage", "role", "status", "tier", "attempts", "judge", "error / output")
    for st in report.stages:
        detail = f"[{st.error_type}] {st.error or ''}" if st.error_type else _short(st.output)
        role = f"{st.role} ({st.role_type})" if st.role else (st.kind or "")
        stages.add_row(
            st.stage_id,
            role,
            Text(st.status, style=_colour(st.status)),
            (st.tier or "") + (" ↑" if st.escalated else ""),
            str(st.attempts or ""),
            _num(st.judge_score),
            Text(_short(detail, 70)),
        )
    parts += [Text("\nstages", style="bold"), stages]
    rows = [a for st in report.stages for a in st.attempt_records]
    if rows:
        attempts = _table(
            "seq", "stage", "iter", "attempt", "tier", "model", "arm", "valid", "latency",
            "tokens", "cost", "error / output",
        )  # fmt: skip
        for a in rows:
            valid = "—" if a.valid is None else ("yes" if a.valid else "no")
            attempts.add_row(
                str(a.seq),
                a.stage_id,
                str(a.iteration or ""),
                str(a.attempt),
                (a.tier or "") + (" ↑" if a.escalated else ""),
                a.model or "",
                a.arm_id or "",
                Text(valid, style="green" if a.valid else "red"),
                _ms(a.latency_ms),
                f"{a.prompt_tokens}+{a.completion_tokens}",
                f"${a.cost_usd:.4f}",
                Text(_short(a.error if a.valid is False else a.output, 50)),
            )
        parts += [Text(f"\nattempts ({len(rows)})", style="bold"), attempts]
    calls = [c for st in report.stages for c in st.tool_calls]
    if calls:
        tools = _table("seq", "stage", "tool", "status", "policy", "error")
        for c in calls:
            policy = (c.policy_action or "") + (" (approved)" if c.approved else "")
            tools.add_row(
                str(c.seq), c.stage_id, c.tool or "", c.status or "", policy, _short(c.error)
            )
        parts += [Text("\ntool calls", style="bold"), tools]
    if report.gates:
        gates = _table("stage", "decision", "by", "at", "comment")
        for g in report.gates:
            gates.add_row(g.stage_id, g.decision, g.by or "", g.decided_at[:19], g.comment or "")
        parts += [Text("\ngate decisions", style="bold"), gates]
    return Group(*parts)


def _version_label(v: VersionStats) -> str:
    return f"v{v.spec_version or '?'} {v.spec_hash[:8]}"


def render_dashboard(board: SpecDashboard, *, columns: int = 3) -> RenderableType:
    """Panels: HQS per version, failure taxonomy, latency/tokens/cost, configurations."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    title = Text.assemble(
        ("dashboard ", "bold"),
        (board.spec_name, "bold cyan"),
        f" · {board.runs} runs · {len(board.versions)} version(s)",
    )
    if not board.versions:
        return Group(title, Text("no runs of this spec in the trace store yet"))
    hqs = _table("version", "runs", "completed", "failed", "HQS mean", "last", "trend")
    spend = _table("version", "p50", "p95", "prompt tokens", "completion tokens", "cost")
    for v in board.versions:
        hqs.add_row(
            _version_label(v),
            str(v.runs),
            str(v.completed),
            str(v.failed),
            _num(v.hqs.mean),
            _num(v.hqs.last),
            Text(v.hqs.sparkline, style="cyan"),
        )
        spend.add_row(
            _version_label(v),
            _ms(v.latency_p50_ms),
            _ms(v.latency_p95_ms),
            str(v.prompt_tokens),
            str(v.completion_tokens),
            f"${v.cost_usd:.4f}",
        )
    shown = board.versions[-columns:]
    taxonomy = _table("failure", *[_version_label(v) for v in shown], "all versions")
    for code, total in sorted(board.taxonomy.items(), key=lambda kv: -kv[1]):
        if total:
            taxonomy.add_row(code, *[str(v.taxonomy.get(code, 0)) for v in shown], str(total))
    newest = board.versions[-1]
    configs = _table("stage", "role", "tier", "model", "arm", "attempts", "valid", "p50", "cost")
    for c in newest.configurations:
        configs.add_row(
            c.stage_id,
            c.role or "",
            c.tier or "",
            c.model or "",
            c.arm_id or "",
            str(c.attempts),
            "—" if c.valid_rate is None else f"{c.valid_rate:.0%}",
            _ms(c.latency_p50_ms),
            f"${c.cost_usd:.4f}",
        )
    no_failures = Text("no failures recorded", style="green")
    return Group(
        title,
        Panel(
            hqs,
            title="HQS per spec version (0 ▁ … █ 1, oldest → newest)",
            title_align="left",
            expand=False,
        ),
        Panel(
            taxonomy if any(board.taxonomy.values()) else no_failures,
            title="failure taxonomy",
            title_align="left",
            expand=False,
        ),
        Panel(spend, title="run latency, tokens and cost", title_align="left", expand=False),
        Panel(
            configs,
            title=f"configurations in use ({_version_label(newest)})",
            title_align="left",
            expand=False,
        ),
    )


def render_overview(specs: Sequence[SpecSummary]) -> RenderableType:
    table = _table("spec", "runs", "versions", "completed", "HQS (newest version)", "trend", "last")
    for s in specs:
        table.add_row(
            s.spec_name,
            str(s.runs),
            str(s.versions),
            str(s.completed),
            _num(s.hqs_mean),
            s.sparkline,
            s.last_started[:19],
        )
    return table
