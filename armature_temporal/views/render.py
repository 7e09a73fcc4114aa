"""Rich renderables for the report and dashboard models (imported lazily: rich loads only
when something is rendered)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from armature_temporal.views.cache import cache_panel
from armature_temporal.views.dashboard import SpecDashboard, SpecSummary, VersionStats
from armature_temporal.views.report import RunReport

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

__all__ = ["fitting_width", "render_dashboard", "render_overview", "render_report"]


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


# Columns whose text wraps at spaces when the table is too wide; every other column keeps its
# values whole on one line (a status folded into "compl" / "eted" helps nobody).
_WRAPPING = {"role", "error / output", "criterion", "comment", "error", "evaluation"}


def _table(*columns: str) -> Table:
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    for col in columns:
        if col in _WRAPPING:
            table.add_column(col, overflow="fold", min_width=min(len(col), 12) + 8)
        else:
            table.add_column(col, no_wrap=True)
    return table


def fitting_width(renderable: RenderableType, width: int) -> int:
    """The width to print ``renderable`` at: ``width``, or wider when one of its tables (in
    a group or a panel too) needs more to keep every one-line value (stage ids, statuses,
    numbers) whole and every word of its wrapping columns (up to 30 characters) unbroken,
    those columns up to 40 wide."""
    from rich.console import Console, Group
    from rich.measure import Measurement
    from rich.panel import Panel
    from rich.table import Table

    console = Console(width=max(width, 1000))

    def needed(item: Any) -> int:
        if isinstance(item, Group):
            return max((needed(r) for r in item.renderables), default=0)
        if isinstance(item, Panel):
            return needed(item.renderable) + 4  # the borders and their padding
        if not isinstance(item, Table):
            return 0
        total = 3 * (len(item.columns) - 1)
        for col in item.columns:
            sizes = [Measurement.get(console, console.options, c) for c in (col.header, *col.cells)]
            if col.no_wrap:
                total += max(m.maximum for m in sizes)
            else:
                longest_word = min(30, max(m.minimum for m in sizes))
                widest = min(40, max(m.maximum for m in sizes))
                total += max(col.min_width or 0, longest_word, widest)
        return total

    return max(width, needed(renderable))


def _colour(status: str) -> str:
    return {"completed": "green", "running": "cyan", "skipped": "dim"}.get(status, "red")


def render_report(report: RunReport, *, full: bool = False) -> RenderableType:
    """Header, stages, every attempt, tool calls and gate decisions; with ``full``, outputs,
    errors and rationales whole rather than cut to a line."""

    def cut(value: Any, width: int = 60) -> str:
        if full:
            return (
                ""
                if value is None
                else (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
            )
        return _short(value, width)

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
    if report.inputs is not None:
        parts.append(Text(f"inputs: {cut(report.inputs, 100)}"))
    if report.parent_run_id:
        parts.append(Text(f"child of {report.parent_run_id}"))
    if report.reason:
        parts.append(Text(f"reason: {report.reason}"))
    evaluated = any(st.evaluation for st in report.stages)
    critiqued = any(st.critique for st in report.stages)
    columns = ["stage", "role", "status", "tier", "attempts", "judge"]
    stages = _table(
        *columns,
        *(["evaluation"] if evaluated else []),
        *(["critic /10"] if critiqued else []),
        "error / output",
    )
    for st in report.stages:
        detail = f"[{st.error_type}] {st.error or ''}" if st.error_type else cut(st.output)
        role = f"{st.role} ({st.role_type})" if st.role else (st.kind or "")
        tries = str(st.attempts or "")
        if st.kind == "fan_out":  # what it counts is children, not attempts
            tries, detail = "", f"({st.attempts} children) {detail}"
        stages.add_row(
            st.stage_id,
            role,
            Text(st.status, style=_colour(st.status)),
            (st.tier or "") + (" ↑" if st.escalated else ""),
            tries,
            _num(st.judge_score),
            *([_evaluation(st.evaluation)] if evaluated else []),
            *([_num((st.critique or {}).get("score"))] if critiqued else []),
            Text(cut(detail, 70)),
        )
    parts += [Text("\nstages", style="bold"), stages]
    judged = [st for st in report.stages if st.evaluation]
    if judged:
        criteria = _table("stage", "criterion", "score")
        for st in judged:
            assert st.evaluation is not None
            for criterion, score in (st.evaluation.get("scores") or {}).items():
                criteria.add_row(st.stage_id, criterion, _num(score))
            label = "error" if "error" in st.evaluation else "rationale"
            why = Text(cut(st.evaluation.get(label), 90), style="red" if label == "error" else "")
            criteria.add_row(st.stage_id, Text(label, style="dim"), why)
        parts += [Text("\nevaluations", style="bold"), criteria]
    carried = {st.stage_id: _lessons(st) for st in report.stages if _lessons(st)}
    if carried:
        lessons = _table("stage", "lessons in its prompt (armature memory show ID)")
        for sid, ids in carried.items():
            lessons.add_row(sid, ", ".join(ids))
        parts += [Text("\nlessons", style="bold"), lessons]
    searched = [st for st in report.stages if st.retrievals]
    if searched:
        seen = _table("stage", "via", "query", "passages it saw (reference, score)")
        for st in searched:
            for found in st.retrievals:
                shown = (
                    Text(cut(found["error"], 90), style="red")
                    if found.get("error")
                    else Text(
                        "\n".join(
                            f"{p['ref']} ({p['score']:.3f}, sha256 {str(p['sha256'])[:12]})"
                            for p in found.get("passages") or []
                        )
                        or "(none found)"
                    )
                )
                seen.add_row(st.stage_id, found.get("via", ""), cut(found.get("query"), 60), shown)
        parts += [Text("\nknowledge", style="bold"), seen]
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
                Text(cut(a.error if a.valid is False else a.output, 50)),
            )
        parts += [Text(f"\nattempts ({len(rows)})", style="bold"), attempts]
    calls = [c for st in report.stages for c in st.tool_calls]
    if calls:
        tools = _table("seq", "stage", "tool", "status", "policy", "error")
        for c in calls:
            policy = (c.policy_action or "") + (" (approved)" if c.approved else "")
            tools.add_row(
                str(c.seq), c.stage_id, c.tool or "", c.status or "", policy, cut(c.error)
            )
        parts += [Text("\ntool calls", style="bold"), tools]
    if report.gates:
        gates = _table("stage", "decision", "by", "at", "comment")
        for g in report.gates:
            by = Text(g.decider, style="" if g.verified and not g.claimed_by else "red")
            gates.add_row(g.stage_id, g.decision, by, g.decided_at[:19], g.comment or "")
        parts += [Text("\ngate decisions", style="bold"), gates]
        parts += [
            Text(f"gate {g.stage_id}: its record does not verify: {g.unverified}", style="red")
            for g in report.gates
            if not g.verified
        ]
    return Group(*parts)


def _evaluation(evaluation: dict[str, Any] | None) -> Text:
    """A stage's evaluation in one cell: the mean of its criteria, or that it failed."""
    from rich.text import Text

    if not evaluation:
        return Text("")
    if "error" in evaluation:
        return Text("failed", style="red")
    scores = evaluation.get("scores") or {}
    criteria = "criterion" if len(scores) == 1 else "criteria"
    return Text(f"{_num(evaluation.get('mean'))} ({len(scores)} {criteria})")


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
    hqs = _table("version", "runs", "completed", "failed", "HQS mean", "last", "drift", "trend")
    spend = _table("version", "p50", "p95", "prompt tokens", "completion tokens", "cost")
    for v in board.versions:
        hqs.add_row(
            _version_label(v),
            str(v.runs),
            str(v.completed),
            str(v.failed),
            _num(v.hqs.mean),
            _num(v.hqs.last),
            _num(v.drift),
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
    calibration = _calibration(newest)
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
        *cache_panel(board.versions),
        Panel(
            configs,
            title=f"configurations in use ({_version_label(newest)})",
            title_align="left",
            expand=False,
        ),
        *(
            [
                Panel(
                    calibration,
                    title=f"confidence calibration ({_version_label(newest)}; good = judge "
                    "≥ 0.5, else gate approved)",
                    title_align="left",
                    expand=False,
                )
            ]
            if calibration is not None
            else []
        ),
    )


def _calibration(version: VersionStats) -> RenderableType | None:
    """Per stage: its confidence sources, refusals, hedging rate and Brier score, then its
    reliability table (bins with outputs only)."""
    from rich.console import Group

    if not version.calibration:
        return None
    summary = _table(
        "stage", "outputs", "sources", "min", "refused", "hedging", "judged", "good", "Brier"
    )
    reliability = _table("stage", "confidence", "outputs", "mean confidence", "good rate")
    for c in version.calibration:
        summary.add_row(
            c.stage_id,
            str(c.final_outputs),
            ", ".join(f"{k} {n}" for k, n in sorted(c.sources.items())),
            _num(c.min_confidence),
            str(c.low_confidence_attempts),
            "—" if c.hedging_rate is None else f"{c.hedging_rate:.0%}",
            str(c.judged),
            "—" if c.good_rate is None else f"{c.good_rate:.0%}",
            _num(c.brier, 3),
        )
        for b in c.bins:
            if b.outputs:
                reliability.add_row(
                    c.stage_id,
                    f"{b.low:.1f}–{b.high:.1f}",
                    str(b.outputs),
                    _num(b.mean_confidence),
                    "—" if b.good_rate is None else f"{b.good_rate:.0%}",
                )
    return Group(summary, reliability)


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


def _lessons(stage: Any) -> list[str]:
    """The heuristic ids a stage's attempts carried, in first-use order."""
    return list(dict.fromkeys(i for a in stage.attempt_records for i in a.lessons))
