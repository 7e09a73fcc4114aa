"""``--html``: the dashboard of a spec and the report of a run as one self-contained HTML page
each (inline CSS and SVG, no script that runs, nothing fetched), also served under ``/ui``.

Both render the models ``--json`` prints (:class:`SpecDashboard`, :class:`RunReport`), and
each chart carries the data it draws as a ``<script type="application/json" id="chart-...">``
block, so what a picture shows can be checked against the trace store. Every string from the
store is escaped (:func:`~armature_temporal.views.svg.esc`), so a stage id or spec name that
looks like markup shows as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from armature_temporal.views import svg
from armature_temporal.views.dashboard import SpecDashboard, SpecSummary
from armature_temporal.views.history import SpecHistory
from armature_temporal.views.report import RunReport
from armature_temporal.views.svg import PALETTE, Line, Mark, esc

__all__ = ["dashboard_html", "empty_dashboard_html", "problem_html", "report_html", "specs_html"]

#: How many of the newest runs the dashboard lists (with links, where served).
RECENT_RUNS = 25

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;
max-width:1100px;padding:0 16px;color:#1d2330;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #dde;padding-bottom:4px}
.muted{color:#667;fill:#667}.card{background:#fff;border:1px solid #dde;border-radius:8px;
padding:12px 16px;margin:10px 0}
table{border-collapse:collapse;margin:6px 0}th,td{padding:3px 10px;text-align:left;
border-bottom:1px solid #eef;font-variant-numeric:tabular-nums}th{font-weight:600}
svg{max-width:100%;height:auto}svg text{font-size:11px;fill:#333}
svg .frame{fill:#fff;stroke:#ccd}svg .grid{stroke:#e5e7ee}svg text.muted{fill:#778}
.kpis{display:flex;gap:18px;flex-wrap:wrap}.kpi b{display:block;font-size:20px}
.empty{padding:28px;text-align:center;color:#556;background:#fff;border:1px dashed #bbc;
border-radius:8px}code{background:#eef;padding:1px 4px;border-radius:3px}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:10px;
height:10px;margin-right:4px}nav a{margin-right:12px}
"""


def _json_block(block_id: str, data: Any) -> str:
    """``data`` as a JSON data block; ``<``, ``>`` and ``&`` are \\u-escaped so no value can
    close the element."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{esc(block_id)}">{text}</script>'


def _page(title: str, body: str, nav: str = "") -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f"{nav}{body}</body></html>\n"
    )


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    """A table; ``rows`` hold escaped cell markup."""
    top = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{top}</tr></thead><tbody>{body}</tbody></table>"


def _legend(items: list[tuple[str, str]]) -> str:
    inner = "".join(f'<span><i style="background:{c}"></i>{esc(t)}</span>' for t, c in items)
    return f'<div class="legend">{inner}</div>'


# --- the dashboard -------------------------------------------------------------------------


def _marks(history: SpecHistory) -> list[Mark]:
    """A mark where each version's first run is: red for an applied change, grey otherwise."""
    applied = {a.first_run_id: a for a in history.applied if a.first_run_id}
    marks, seen = [], None
    for i, p in enumerate(history.runs):
        if p.spec_hash == seen:
            continue
        if seen is not None or p.run_id in applied:
            change = applied.get(p.run_id)
            text = f"applied {change.proposal_id}" if change else f"version {p.spec_hash[:8]}"
            marks.append(Mark(i, text, "#d55e00" if change else "#888"))
        seen = p.spec_hash
    return marks


def _run_charts(history: SpecHistory) -> str:
    runs, marks = history.runs, _marks(history)
    n = len(runs)
    hqs = Line(
        "HQS",
        [(i, p.hqs) for i, p in enumerate(runs)],
        tips=[f"{p.run_id}: HQS {_num(p.hqs)} ({p.status})" for p in runs],
    )
    parts = [
        "<h2>HQS per run</h2>",
        '<div class="card">',
        svg.line_chart(n, [hqs], lo=0.0, hi=1.0, unit="HQS", label="HQS per run", marks=marks),
        _legend([("HQS", PALETTE[0]), ("applied change", "#d55e00"), ("new version", "#888")]),
        _json_block("chart-hqs", [{"run_id": p.run_id, "hqs": p.hqs} for p in runs]),
        "</div><h2>Cost per run</h2>",
        '<div class="card">',
        ""
        if any(p.cost_usd for p in runs)
        else '<p class="muted">Every run cost $0 (the simulate provider, or models without '
        "a price).</p>",
        svg.bars(
            [p.cost_usd for p in runs],
            [f"{p.run_id}: {_money(p.cost_usd)}" for p in runs],
            unit="USD",
            label="cost per run",
            marks=marks,
        ),
        _json_block("chart-cost", [{"run_id": p.run_id, "cost_usd": p.cost_usd} for p in runs]),
        "</div><h2>Latency per run</h2>",
        '<div class="card">',
        svg.bars(
            [p.latency_ms / 1000 if p.latency_ms is not None else None for p in runs],
            [f"{p.run_id}: {_num((p.latency_ms or 0) / 1000)} s" for p in runs],
            unit="seconds",
            label="latency per run",
            colour=PALETTE[2],
            marks=marks,
        ),
        _json_block(
            "chart-latency", [{"run_id": p.run_id, "latency_ms": p.latency_ms} for p in runs]
        ),
        "</div>",
    ]
    return "".join(parts)


def _arm_charts(history: SpecHistory) -> str:
    parts = ["<h2>Bandit arm shares over time</h2>"]
    stages = sorted({w.stage_id for w in history.arms})
    if not stages:
        parts.append(
            '<p class="muted">No stage of these runs chose a bandit arm (a stage gets arms '
            "from its <code>arms:</code> in the spec).</p>"
        )
    for stage in stages:
        windows = [w for w in history.arms if w.stage_id == stage]
        shown = [(f"runs {w.first_run_id} … {w.last_run_id}", w.counts) for w in windows]
        parts.append(
            f'<div class="card"><b>{esc(stage)}</b>'
            f"{svg.stacked_shares(shown, label=f'arm shares of {stage}')}</div>"
        )
    parts.append(_json_block("chart-arms", [w.model_dump(mode="json") for w in history.arms]))
    return "".join(parts)


def _learning(board: SpecDashboard, history: SpecHistory) -> str:
    parts = ["<h2>Learning: the improvement loop</h2>", '<div class="card">']
    versions = board.versions
    if len(versions) > 1 or history.rounds or history.applied:
        line = Line(
            "mean HQS",
            [(i, v.hqs.mean) for i, v in enumerate(versions)],
            tips=[
                f"version {v.spec_version or '?'} ({v.spec_hash[:8]}): mean HQS "
                f"{_num(v.hqs.mean)} over {v.runs} run(s)"
                for v in versions
            ],
        )
        parts.append(
            svg.line_chart(
                len(versions),
                [line],
                lo=0.0,
                hi=1.0,
                unit="spec version",
                label="mean HQS per spec version",
            )
        )
    rows = [
        [
            esc(a.proposal_id),
            esc(a.applied_at),
            esc(a.base_spec_hash[:8]),
            esc(a.spec_hash[:8]),
            f"{_num(a.hqs_before)} ({a.runs_before})",
            f"{_num(a.hqs_after)} ({a.runs_after})",
        ]
        for a in history.applied
    ]
    if rows:
        parts.append(
            _table(
                ["applied proposal", "at", "from", "to", "HQS before (runs)", "after (runs)"], rows
            )
        )
    rounds = [
        [
            esc(r.id),
            esc(r.created_at),
            esc(r.status),
            esc(r.spec_hash[:8]),
            _num(r.mean_hqs),
            str(r.runs),
            _num(r.drift),
        ]
        for r in history.rounds
    ]
    if rounds:
        parts.append(
            _table(["round", "at", "status", "version", "mean HQS read", "runs", "drift"], rounds)
        )
    if not (rows or rounds):
        parts.append(
            '<p class="muted">No improvement round has run for this spec yet '
            "(<code>armature improve SPEC_FILE</code> starts one).</p>"
        )
    parts.append(
        _json_block(
            "chart-improve",
            {
                "versions": [
                    {"spec_hash": v.spec_hash, "mean_hqs": v.hqs.mean, "runs": v.runs}
                    for v in versions
                ],
                "applied": [a.model_dump(mode="json") for a in history.applied],
                "rounds": [r.model_dump(mode="json") for r in history.rounds],
            },
        )
    )
    parts.append("</div><h2>Learning: the memory loop</h2>")
    memory = history.memory
    if memory:
        lines = [
            Line(
                "mean HQS, runs with lessons",
                [(i, m.mean_with) for i, m in enumerate(memory)],
                PALETTE[2],
            ),
            Line(
                "mean HQS, runs without",
                [(i, m.mean_without) for i, m in enumerate(memory)],
                PALETTE[1],
            ),
        ]
        parts.append('<div class="card">')
        parts.append(
            svg.line_chart(
                len(memory),
                lines,
                lo=0.0,
                hi=1.0,
                unit="running mean HQS",
                label="memory learning curve",
            )
        )
        parts.append(_legend([(ln.label, ln.colour) for ln in lines]))
        parts.append("</div>")
    else:
        parts.append(
            '<p class="muted">No run\'s prompts carried lessons from memory yet (lessons are '
            "distilled, tested and promoted by the memory loop: <code>armature memory</code>)."
            "</p>"
        )
    parts.append(_json_block("chart-memory", [m.model_dump(mode="json") for m in memory]))
    return "".join(parts)


def _calibration(board: SpecDashboard) -> str:
    parts = ["<h2>Calibration</h2>"]
    data = []
    for v in board.versions:
        for c in v.calibration:
            bins = [
                (b.mean_confidence, b.good_rate, b.outputs)
                for b in c.bins
                if b.mean_confidence is not None and b.good_rate is not None and b.outputs
            ]
            data.append({"spec_hash": v.spec_hash, **c.model_dump(mode="json")})
            title = (
                f"{c.stage_id} (version {v.spec_hash[:8]}): Brier {_num(c.brier)}, good rate "
                f"{_num(c.good_rate)}, {c.judged} judged of {c.final_outputs} final output(s)"
            )
            chart = (
                svg.reliability(bins, label=f"calibration of {c.stage_id}")
                if bins
                else '<p class="muted">No judged output with a confidence yet.</p>'
            )
            parts.append(f'<div class="card"><b>{esc(title)}</b><br>{chart}</div>')
    if not data:
        parts.append(
            '<p class="muted">No LLM stage recorded a confidence with an outcome (a judge '
            "or a gate) yet.</p>"
        )
    parts.append(_json_block("chart-calibration", data))
    return "".join(parts)


def _recent(history: SpecHistory, run_href: Callable[[str], str] | None) -> str:
    rows = []
    for p in history.runs[-RECENT_RUNS:][::-1]:
        name = esc(p.run_id)
        if run_href is not None:
            name = f'<a href="{esc(run_href(p.run_id))}">{name}</a>'
        rows.append(
            [
                name,
                esc(p.started_at),
                esc(p.status),
                _num(p.hqs),
                _money(p.cost_usd),
                _num((p.latency_ms or 0) / 1000) + " s" if p.latency_ms is not None else "-",
            ]
        )
    return "<h2>Newest runs</h2>" + _table(
        ["run", "started", "status", "HQS", "cost", "latency"], rows
    )


def _ladder(bandits: Sequence[dict[str, Any]]) -> str:
    """Each arm stage's unlocking ladder (``armature bandit status``'s entries)."""
    parts = []
    for entry in bandits:
        rows = [
            [
                esc(r["rung"] + (f" [{r['context']}]" if r.get("context") else "")),
                esc(r["status"]),
                esc(r["threshold"]),
                esc(r["progress"]),
                esc((r.get("unlocked_at") or "")[:19]),
            ]
            for r in entry["ladder"]
        ]
        parts.append(f"<h2>Ladder: {esc(entry['bandit'])}</h2>")
        parts.append(_table(["rung", "status", "threshold", "progress", "unlocked at"], rows))
    return _json_block("bandit-ladder", bandits) + "".join(parts) if parts else ""


def dashboard_html(
    board: SpecDashboard,
    nav: str = "",
    run_href: Callable[[str], str] | None = None,
    bandits: Sequence[dict[str, Any]] = (),
) -> str:
    """The dashboard of one spec as a page; a spec without runs gets a page that says so.
    ``run_href`` links each listed run (to its report); ``bandits`` (from a spec file) adds
    each arm stage's unlocking ladder."""
    history = board.history
    if not board.runs or history is None or not history.runs:
        return empty_dashboard_html(board.spec_name, nav)
    versions = [
        [
            esc(v.spec_version or "-"),
            f"<code>{esc(v.spec_hash[:12])}</code>",
            str(v.runs),
            str(v.completed),
            str(v.failed),
            _num(v.hqs.mean),
            _num(v.latency_p50_ms, 0),
            _num(v.latency_p95_ms, 0),
            _money(v.cost_usd),
        ]
        for v in board.versions
    ]
    failures = [[esc(k), str(n)] for k, n in sorted(board.taxonomy.items()) if n]
    body = [
        f"<h1>Dashboard: {esc(board.spec_name)}</h1>",
        f'<p class="muted">{board.runs} run(s) in {len(board.versions)} version(s), from the '
        "trace store (improvement rounds' verification runs left out).</p>",
        _table(
            [
                "version",
                "spec_hash",
                "runs",
                "completed",
                "failed",
                "HQS mean",
                "p50 ms",
                "p95 ms",
                "cost",
            ],
            versions,
        ),
        _run_charts(history),
        _arm_charts(history),
        _ladder(bandits),
        _learning(board, history),
        _calibration(board),
        "<h2>Failures</h2>",
        _table(["failure", "count"], failures) if failures else '<p class="muted">None.</p>',
        _recent(history, run_href),
    ]
    return _page(f"{board.spec_name} — Armature dashboard", "".join(body), nav)


def empty_dashboard_html(spec_name: str, nav: str = "") -> str:
    body = (
        f"<h1>Dashboard: {esc(spec_name)}</h1>"
        f'<div class="empty"><p><b>No runs of {esc(spec_name)} in the trace store yet.</b></p>'
        "<p>Start one with <code>armature submit SPEC_FILE</code>; this page fills in as runs "
        "finish.</p></div>"
    )
    return _page(f"{spec_name} — Armature dashboard", body, nav)


# --- the report ----------------------------------------------------------------------------


def report_html(view: RunReport, nav: str = "", dag_missing: str | None = None) -> str:
    """The report of one run as a page: its stage timeline, its DAG (or ``dag_missing``: why
    not) and its stages."""
    kpis = [
        ("status", esc(view.status)),
        ("HQS", _num(view.hqs)),
        ("cost", _money(view.cost_usd)),
        ("latency", f"{_num((view.latency_ms or 0) / 1000)} s" if view.latency_ms else "-"),
        ("tokens", f"{view.prompt_tokens} + {view.completion_tokens}"),
    ]
    rows = []
    for span in view.timeline:
        tips = [
            (
                a.start_ms,
                a.end_ms,
                f"{span.stage_id} {a.kind} #{a.seq} ({a.tier or '-'}): "
                f"{'valid' if a.valid else 'invalid' if a.valid is False else '-'}, "
                f"{(a.end_ms - a.start_ms) / 1000:.3f} s",
            )
            for a in span.attempts
        ]
        rows.append((span.stage_id, span.start_ms, span.end_ms, span.status, tips))
    stages = [
        [
            esc(s.stage_id),
            esc(s.kind or "-"),
            esc(s.status),
            esc(s.tier or "-"),
            str(s.attempts),
            _num(s.judge_score),
            esc((s.error_type or "") + (f": {s.error}" if s.error else "")),
        ]
        for s in view.stages
    ]
    body = [
        f"<h1>Run {esc(view.run_id)}</h1>",
        f'<p class="muted">spec {esc(view.spec_name)} {esc(view.spec_version or "")} '
        f"(<code>{esc(view.spec_hash[:12])}</code>), started {esc(view.started_at)}"
        f"{', reason: ' + esc(view.reason) if view.reason else ''}</p>",
        '<div class="kpis">'
        + "".join(f'<div class="kpi card"><b>{v}</b>{esc(k)}</div>' for k, v in kpis)
        + "</div>",
        "<h2>Stage timeline</h2>",
        '<div class="card">',
        svg.gantt(rows, label=f"stage timeline of {view.run_id}")
        if rows
        else '<p class="muted">No stage has recorded its end yet.</p>',
        _legend([(s, c) for s, c in svg.STATUS_COLOURS.items()]),
        _json_block("chart-timeline", [s.model_dump(mode="json") for s in view.timeline]),
        "</div><h2>DAG</h2>",
        '<div class="card">',
    ]
    if view.dag:
        nodes = [(n.stage_id, n.level, n.depends_on, n.kind, n.status) for n in view.dag]
        body.append(svg.dag(nodes, label=f"stages of {view.spec_name}"))
    else:
        body.append(f'<p class="muted">{esc(dag_missing or "The plan was not given.")}</p>')
    body += [
        _json_block("chart-dag", [n.model_dump(mode="json") for n in view.dag]),
        "</div><h2>Stages</h2>",
        _table(["stage", "kind", "status", "tier", "attempts", "judge", "error"], stages),
    ]
    return _page(f"{view.run_id} — Armature report", "".join(body), nav)


# --- served pages only ---------------------------------------------------------------------


def specs_html(specs: Sequence[SpecSummary], nav: str = "") -> str:
    """Every spec with runs, each linked to its dashboard page."""
    from urllib.parse import quote

    rows = [
        [
            f'<a href="/ui/specs/{esc(quote(s.spec_name, safe=""))}/dashboard">'
            f"{esc(s.spec_name)}</a>",
            str(s.runs),
            str(s.versions),
            _num(s.hqs_mean),
            esc(s.sparkline),
            esc(s.last_started),
        ]
        for s in specs
    ]
    body = "<h1>Dashboards</h1>" + (
        _table(["spec", "runs", "versions", "HQS mean (newest version)", "trend", "last run"], rows)
        if rows
        else '<div class="empty">No runs in the trace store yet.</div>'
    )
    return _page("Armature dashboards", body, nav)


def problem_html(title: str, message: str, fix: str, nav: str = "") -> str:
    body = (
        f'<h1>{esc(title)}</h1><div class="card"><p>{esc(message)}</p>'
        f"<p><b>Fix:</b> {esc(fix)}</p></div>"
    )
    return _page(title, body, nav)
