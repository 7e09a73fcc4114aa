"""min_confidence in the spec and the plan, and what the dashboard and the diagnosis read off
attempts refused for low confidence: final outputs, reliability table, Brier score, hedging."""

from __future__ import annotations

from typing import Any

import pytest

from armature_temporal.improve.diagnose import diagnose
from armature_temporal.improve.propose import candidates
from armature_temporal.runtime.traces import RecordKind, TraceRecord
from armature_temporal.spec.loader import SpecError, load_spec_text
from armature_temporal.views.calibration import (
    brier_score,
    build_calibration,
    final_attempts,
    reliability_bins,
)
from armature_temporal.views.dashboard import build_dashboard, failure_counts
from armature_temporal.views.report import RunTrace
from tests.fakes import plan_from

SPEC = """\
name: unsure
model_tiers:
  small: {provider: simulate}
  frontier: {provider: simulate}
confidence: {min: {worker: 0.6}}
stages:
  - id: draft
    role: {name: D, description: x, model_tier: small}
    on_fail: {escalate: true}
  - id: strict
    min_confidence: 0.9
    role: {name: S, description: x, model_tier: small}
  - id: review
    depends_on: [draft]
    role: {name: R, type: judge, description: "{{ draft.content }}", model_tier: frontier}
"""


def test_min_confidence_compiles_from_the_stage_else_its_role_type_default() -> None:
    plan = plan_from(SPEC)
    assert plan.stage("draft").min_confidence == 0.6  # confidence.min.worker
    assert plan.stage("strict").min_confidence == 0.9  # its own wins
    assert plan.stage("review").min_confidence is None  # no default for judges
    assert (
        plan_from(SPEC.replace("confidence: {min: {worker: 0.6}}\n", ""))
        .stage("draft")
        .min_confidence
        is None
    )


def test_min_confidence_is_checked() -> None:
    with pytest.raises(SpecError, match="min_confidence"):
        load_spec_text(SPEC.replace("min_confidence: 0.9", "min_confidence: 1.5"))
    with pytest.raises(SpecError, match="no role"):
        load_spec_text(
            SPEC + "  - {id: ask, gate: human, depends_on: [draft], min_confidence: 0.5}\n"
        )
    with pytest.raises(SpecError, match="confidence"):
        load_spec_text(SPEC.replace("{worker: 0.6}", "{writer: 0.6}"))


# --- trace builders ------------------------------------------------------------------------


def record(kind: RecordKind, run: str = "r", **fields: Any) -> TraceRecord:
    base: dict[str, Any] = {
        "run_id": run,
        "seq": 0,
        "spec_name": "unsure",
        "spec_hash": "h",
        "policy_version": "p",
        "recorded_at": "2025-01-01T00:00:00+00:00",
        "prev_hash": "prev",
    }
    return TraceRecord(kind=kind, **{**base, **fields})


def attempt(
    confidence: float | None,
    *,
    stage: str = "draft",
    refused: bool = False,
    valid: bool = True,
    tier: str = "small",
    source: str = "hedging",
    run: str = "r",
) -> TraceRecord:
    data: dict[str, Any] = {"min_confidence": 0.6}
    if confidence is not None:
        data.update(confidence=confidence, confidence_source=source)
    return record(
        "attempt",
        run,
        stage_id=stage,
        tier=tier,
        role_type="worker",
        output_valid=valid,
        error_type="low_confidence" if refused else None if valid else "output_invalid",
        data=data,
    )


def judge(score: float, run: str = "r", judges: list[str] | None = None) -> TraceRecord:
    return record(
        "stage",
        run,
        stage_id="review",
        status="completed",
        role_type="judge",
        judge_score=score,
        data={"kind": "llm", "judges": judges if judges is not None else ["draft"]},
    )


def trace(run: str, *records: TraceRecord, status: str = "completed") -> RunTrace:
    return RunTrace(
        run_id=run,
        spec_name="unsure",
        spec_hash="h",
        status=status,
        started_at=f"2025-01-01T00:00:0{run[-1]}",
        finished_at="2025-01-01T00:01:00",
        records=list(records),
    )


def test_the_final_output_is_the_last_accepted_else_the_most_confident_refused() -> None:
    accepted = attempt(0.7, tier="frontier")
    finals = final_attempts([attempt(0.3, refused=True), attempt(None, valid=False), accepted])
    assert finals["draft"] is accepted
    best = attempt(0.5, refused=True, tier="frontier")
    finals = final_attempts([attempt(0.3, refused=True), best, attempt(0.5, refused=True)])
    assert finals["draft"] is best  # the earliest of the most confident
    assert final_attempts([attempt(None, valid=False)]) == {}


def test_reliability_bins_and_brier_score() -> None:
    pairs = [(0.1, False), (0.15, True), (0.9, True), (1.0, True)]
    bins = reliability_bins(pairs, bins=5)
    assert [b.outputs for b in bins] == [2, 0, 0, 0, 2]
    assert bins[0].good_rate == 0.5 and bins[0].mean_confidence == 0.125
    assert bins[4].good_rate == 1.0 and bins[1].good_rate is None
    assert brier_score(pairs) == round((0.01 + 0.7225 + 0.01 + 0.0) / 4, 4)
    assert brier_score([]) is None


def test_calibration_reads_judges_evaluations_and_gates_and_the_hedging_rate() -> None:
    runs = [
        # escalated: refused on small, accepted on frontier, judged good
        trace("r1", attempt(0.3, refused=True, run="r1"), attempt(0.8, run="r1"), judge(0.9, "r1")),
        # accepted at once, judged poor
        trace("r2", attempt(0.65, run="r2"), judge(0.2, "r2")),
        # retries spent: the most confident refused output stands; it hedges (detector)
        trace("r3", attempt(0.2, refused=True, run="r3"), attempt(0.4, refused=True, run="r3")),
    ]
    (cal,) = build_calibration(runs)
    assert cal.stage_id == "draft"
    assert cal.final_outputs == 3 and cal.sources == {"hedging": 3}
    assert cal.min_confidence == 0.6 and cal.low_confidence_attempts == 3
    assert cal.judged == 2 and cal.outcome == "judge" and cal.good_rate == 0.5
    assert cal.brier == round(((0.8 - 1) ** 2 + 0.65**2) / 2, 4)
    assert (cal.hedged, cal.hedging_rate) == (1, round(1 / 3, 4))
    # Only the hedge detector's confidences count as hedging.
    (cal,) = build_calibration([trace("r4", attempt(0.1, source="stated", run="r4"))])
    assert (cal.hedged, cal.hedging_rate) == (0, 0.0)
    # An evaluation of the stage, or its gate, is its outcome too.
    evaluated = record("evaluation", "r5", stage_id="draft", judge_score=0.7)
    gated = record("gate", "r6", stage_id="draft", status="reject")
    (cal,) = build_calibration(
        [trace("r5", attempt(0.9, run="r5"), evaluated), trace("r6", attempt(0.9, run="r6"), gated)]
    )
    assert (cal.judged, cal.outcome, cal.good_rate) == (2, "mixed", 0.5)
    # The dashboard carries it per version, and counts each refusal in the taxonomy.
    board = build_dashboard("unsure", runs)
    assert board.versions[0].calibration[0].low_confidence_attempts == 3
    assert failure_counts(r for run in runs for r in run.records)["low_confidence"] == 3


def test_diagnosis_sees_low_confidence_and_proposes_a_tier_up() -> None:
    plan = plan_from(SPEC)
    runs = [
        trace(
            f"r{i}",
            record("run_start", f"r{i}", data={"inputs": {}}),
            *[
                r.model_copy(update={"spec_hash": plan.spec_hash})
                for r in (attempt(0.3, refused=True, run=f"r{i}"), attempt(0.8, tier="frontier"))
            ],
            record(
                "stage",
                f"r{i}",
                stage_id="draft",
                status="completed",
                attempt=2,
                tier="frontier",
                escalated=False,  # isolate the low-confidence evidence
            ),
        ).model_copy(update={"spec_hash": plan.spec_hash})
        for i in range(4)
    ]
    diagnosis = diagnose(plan, runs)
    draft = next(s for s in diagnosis.stages if s.stage == "draft")
    assert draft.low_confidence_rate == 0.5 and draft.invalid_rate == 0.0
    (change,) = candidates(plan, diagnosis, ["draft.model_tier"])
    assert change.new == "frontier"
    assert "refused for low confidence" in change.why


def test_the_benchmarks_auroc_is_mann_whitney() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "confidence.py"
    spec = importlib.util.spec_from_file_location("bench_confidence", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bad = [True, True, False, False]
    assert bench.auroc([0.1, 0.2, 0.8, 0.9], bad) == 1.0  # confident attempts are the good ones
    assert bench.auroc([0.9, 0.8, 0.2, 0.1], bad) == 0.0
    assert bench.auroc([0.5, 0.5, 0.5, 0.5], bad) == 0.5  # ties count half
    assert bench.auroc([0.1, 0.6, 0.5, 0.9], bad) == 0.75
    assert bench.auroc([0.1, 0.2], [True, True]) is None
    low, high = bench.bootstrap([0.1, 0.6, 0.5, 0.9] * 10, bad * 10, boot=200, seed=1)
    assert low is not None and high is not None and low <= 0.75 <= high


def test_validate_warns_when_a_refused_output_could_not_be_retried() -> None:
    from armature_temporal.spec.warnings import spec_warnings

    def warned(text: str) -> list[str]:
        return [
            m for path, m in spec_warnings(load_spec_text(text).spec) if "min_confidence" in path
        ]

    assert warned(SPEC) and "neither retries" in warned(SPEC)[0]  # strict: no on_fail
    fixed = SPEC.replace(
        "    min_confidence: 0.9\n", "    min_confidence: 0.9\n    on_fail: {loop: {max: 2}}\n"
    )
    assert warned(fixed) == []


def test_the_rendered_diagnosis_shows_the_unsure_share() -> None:
    from rich.console import Console

    from armature_temporal.improve.models import Diagnosis, StageStats
    from armature_temporal.improve.render import render_diagnosis

    stats = StageStats(
        stage="draft",
        runs=4,
        attempts=8,
        invalid_rate=0.0,
        escalation_rate=0.5,
        failure_rate=0.0,
        first_try_rate=0.5,
        low_confidence_rate=0.375,
    )
    diagnosis = Diagnosis(
        spec_name="unsure",
        spec_hash="h" * 64,
        runs=4,
        mean_hqs=None,
        stages=[stats],
        sample_inputs=[],
    )
    console = Console(width=120, record=True)
    console.print(render_diagnosis(diagnosis))
    text = console.export_text()
    assert "unsure" in text and "38%" in text
