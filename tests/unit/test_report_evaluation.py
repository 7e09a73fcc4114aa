"""A run's report shows each stage's post-run evaluation (its ``evaluate`` criteria's scores and
mean, or that the evaluation failed), in ``--json`` and in the rendered table, and counts the
judge's tokens and cost in the run's totals."""

from __future__ import annotations

from rich.console import Console

from armature_temporal.runtime.traces import TraceChain
from armature_temporal.views import RunTrace, build_report, render_report

AT = "2025-03-01T12:00:00+00:00"
SCORES = {"names the account": 0.5, "is actionable": 1.0}


def trace() -> RunTrace:
    chain = TraceChain("r-1", "triage", "h" * 64, "p" * 64)
    chain.add("run_start", AT)
    for stage, tokens in (("draft", 100), ("notes", 30), ("lost", 0)):
        chain.add("attempt", AT, stage_id=stage, prompt_tokens=tokens, output_valid=True)
        chain.add("stage", AT, stage_id=stage, status="completed", output={"content": stage})
    chain.add(
        "evaluation",
        AT,
        stage_id="draft",
        status="completed",
        tier="frontier",
        output={"scores": SCORES, "mean": 0.75, "rationale": "clear, names acct-17", "tier": "f"},
        prompt_tokens=40,
        cost_usd=0.002,
    )
    failed = {"error": "evaluation failed after 2 attempt(s): not JSON", "tier": "frontier"}
    chain.add("evaluation", AT, stage_id="lost", status="failed", output=failed, error="x")
    chain.add("run_end", AT, status="completed")
    return RunTrace(
        run_id="r-1",
        spec_name="triage",
        spec_hash="h" * 64,
        status="completed",
        started_at=AT,
        records=chain.take(),
    )


def test_each_stage_carries_its_evaluation_and_the_judge_counts_in_the_totals() -> None:
    report = build_report(trace())
    stages = {s.stage_id: s for s in report.stages}
    assert stages["draft"].evaluation == {
        "scores": SCORES,
        "mean": 0.75,
        "rationale": "clear, names acct-17",
        "tier": "f",
    }
    assert stages["notes"].evaluation is None
    assert stages["lost"].evaluation is not None and "error" in stages["lost"].evaluation
    assert list(stages) == ["draft", "notes", "lost"]  # evaluations add no stage of their own
    assert report.prompt_tokens == 100 + 30 + 40 and report.cost_usd == 0.002
    assert report.model_dump(mode="json")["stages"][0]["evaluation"]["mean"] == 0.75


def test_the_rendered_report_shows_the_mean_and_every_criterion() -> None:
    console = Console(width=200, record=True)
    console.print(render_report(build_report(trace())))
    text = console.export_text()
    assert "evaluation" in text and "0.75 (2 criteria)" in text
    assert "names the account" in text and "0.50" in text and "is actionable" in text
    assert "clear, names acct-17" in text
    assert "failed" in text and "evaluation failed after 2 attempt(s)" in text
