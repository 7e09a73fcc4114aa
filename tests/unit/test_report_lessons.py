"""A run's report says which lessons (heuristic ids) each stage's prompt carried: in ``--json``
on every attempt, and as a table of its own in the rendered report."""

from __future__ import annotations

from rich.console import Console

from armature_temporal.runtime.traces import TraceChain
from armature_temporal.views import RunTrace, build_report, render_report

AT = "2025-03-01T12:00:00+00:00"


def trace() -> RunTrace:
    chain = TraceChain("r-1", "notes", "h" * 64, "p" * 64)
    chain.add("run_start", AT)
    carried = {"lesson:h-aaa": "memory", "lesson:h-bbb": "memory", "prior": "prior_run"}
    chain.add("attempt", AT, stage_id="write", inputs_provenance=carried, output_valid=False)
    chain.add(
        "attempt", AT, stage_id="write", attempt=2, inputs_provenance={"lesson:h-aaa": "memory"}
    )
    chain.add("stage", AT, stage_id="write", status="completed", output={"note": "x"})
    chain.add("attempt", AT, stage_id="review", output_valid=True)
    chain.add("stage", AT, stage_id="review", status="completed", output={"score": 0.5})
    chain.add("run_end", AT, status="completed")
    return RunTrace(
        run_id="r-1",
        spec_name="notes",
        spec_hash="h" * 64,
        status="completed",
        started_at=AT,
        records=chain.take(),
    )


def test_each_attempt_names_the_lessons_its_prompt_carried() -> None:
    stages = {s.stage_id: s for s in build_report(trace()).stages}
    assert [a.lessons for a in stages["write"].attempt_records] == [["h-aaa", "h-bbb"], ["h-aaa"]]
    assert [a.lessons for a in stages["review"].attempt_records] == [[]]


def test_the_rendered_report_lists_the_lessons_per_stage() -> None:
    console = Console(width=200, record=True)
    console.print(render_report(build_report(trace())))
    text = console.export_text()
    assert "lessons in its prompt" in text
    line = next(ln for ln in text.splitlines() if "h-aaa" in ln)
    assert "write" in line and "h-bbb" in line  # once per stage, first-use order
    assert line.count("h-aaa") == 1


def test_a_run_without_lessons_has_no_lessons_table() -> None:
    plain = trace()
    records = [r.model_copy(update={"inputs_provenance": {}}) for r in plain.records]
    console = Console(width=200, record=True)
    console.print(render_report(build_report(plain.model_copy(update={"records": records}))))
    assert "lessons in its prompt" not in console.export_text()
