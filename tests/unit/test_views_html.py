"""The ``--html`` pages as pure functions of the report and dashboard models: every string
from the store is text, never markup; the data blocks keep the exact values; the memory
curve and the DAG levels follow the records and the plan."""

from __future__ import annotations

import json
import re

from armature_temporal.runtime.traces import TraceChain
from armature_temporal.views import RunTrace, build_dashboard, build_report
from armature_temporal.views.html import dashboard_html, report_html
from armature_temporal.views.timeline import build_dag, plan_dag
from tests.cli.test_cli_html import blocks, external_refs
from tests.fakes import plan_from

EVIL = "<script>alert(1)</script>"
T0 = "2030-01-01T00:00:00+00:00"


def at(seconds: float) -> str:
    return f"2030-01-01T00:00:{seconds:06.3f}+00:00"


def run(
    run_id: str,
    *,
    spec: str = "s",
    stage: str = "a",
    hqs: float = 0.5,
    lessons: tuple[str, ...] = (),
    arm: str | None = None,
    start: int = 0,
) -> RunTrace:
    chain = TraceChain(run_id, spec, "h" * 64, "p")
    chain.add("run_start", at(start), data={"inputs": {"topic": EVIL}})
    chain.add(
        "attempt", at(start + 2), stage_id=stage, tier="small", model=EVIL, arm_id=arm,
        output=EVIL, output_valid=True, latency_ms=1500.0, cost_usd=0.25,
        inputs_provenance={f"lesson:{i}": "memory" for i in lessons},
    )  # fmt: skip
    chain.add("stage", at(start + 3), stage_id=stage, status="completed", arm_id=arm, output=EVIL)
    chain.add("run_end", at(start + 4), status="completed", latency_ms=4000.0)
    return RunTrace(
        run_id=run_id, spec_name=spec, spec_hash="h" * 64, status="completed",
        started_at=at(start), finished_at=at(start + 4), latency_ms=4000.0, hqs=hqs,
        records=chain.take(),
    )  # fmt: skip


def test_store_strings_that_look_like_markup_render_as_text() -> None:
    trace = run(EVIL, spec=EVIL, stage=EVIL, arm=EVIL)
    pages = [
        report_html(build_report(trace), dag_missing=EVIL),
        dashboard_html(build_dashboard(EVIL, [trace])),
    ]
    for html in pages:
        assert EVIL not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        # The only <script> elements are the JSON data blocks, and none is closed early.
        assert re.findall(r"<script[^>]*>", html) == re.findall(
            r'<script type="application/json" id="[^"]+">', html
        )
        assert external_refs(html) == []
    data = blocks(pages[0])
    assert data["chart-timeline"][0]["stage_id"] == EVIL  # exact, once parsed
    assert blocks(pages[1])["chart-hqs"] == [{"run_id": EVIL, "hqs": 0.5}]


def test_report_timeline_starts_a_stage_at_its_first_attempt_without_the_plan() -> None:
    view = build_report(run("r1"))  # a run from before runs named their DAG
    assert view.dag == []
    (span,) = view.timeline
    assert (span.start_from, span.start_ms, span.end_ms) == ("attempts", 500.0, 3000.0)
    assert [(a.start_ms, a.end_ms) for a in span.attempts] == [(500.0, 2000.0)]


def test_memory_curve_separates_runs_with_lessons_from_runs_without() -> None:
    runs = [
        run("r1", hqs=0.4, start=0),
        run("r2", hqs=0.8, lessons=("h1", "h2"), start=10),
        run("r3", hqs=0.6, start=20),
        run("r4", hqs=1.0, lessons=("h1",), start=30),
    ]
    history = build_dashboard("s", runs).history
    assert history is not None
    assert [p.lessons for p in history.runs] == [[], ["h1", "h2"], [], ["h1"]]
    assert [(m.lessons, m.mean_with, m.mean_without) for m in history.memory] == [
        (0, None, 0.4), (2, 0.8, 0.4), (0, 0.8, 0.5), (1, 0.9, 0.5),
    ]  # fmt: skip
    assert [p.cost_usd for p in history.runs] == [0.25] * 4
    html = dashboard_html(build_dashboard("s", runs))
    assert json.loads(json.dumps(blocks(html)["chart-memory"]))[3]["mean_with"] == 0.9


def test_dag_levels_follow_depends_on() -> None:
    plan = plan_from(
        """
name: shape
model_tiers: {small: {provider: simulate}}
stages:
  - {id: a, role: {name: A, description: "a"}}
  - {id: b, role: {name: B, description: "b"}}
  - {id: c, depends_on: [a], role: {name: C, description: "c"}}
  - {id: d, depends_on: [b, c], role: {name: D, description: "d"}}
"""
    )
    nodes = build_dag(plan_dag(plan), {"a": "completed"})
    assert [(n.stage_id, n.level, n.status) for n in nodes] == [
        ("a", 0, "completed"), ("b", 0, "not run"), ("c", 1, "not run"), ("d", 2, "not run"),
    ]  # fmt: skip


def test_a_spec_without_runs_gets_a_page_that_says_so() -> None:
    html = dashboard_html(build_dashboard("quiet", []))
    assert "No runs of quiet" in html and "<svg" not in html
