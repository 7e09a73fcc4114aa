"""Falsifiable predictions (improve/predict.py): failure codes read off a diagnosis, what a
change predicts, how the next round checks it, and the drift score."""

from __future__ import annotations

from typing import Any

from armature_temporal.improve.models import Diagnosis, SpecChange, StageStats
from armature_temporal.improve.predict import drift, failures, predictions, verify


def stats(stage: str, **kw: Any) -> StageStats:
    base: dict[str, Any] = {
        "stage": stage,
        "runs": 10,
        "attempts": 10,
        "invalid_rate": 0.0,
        "escalation_rate": 0.0,
        "failure_rate": 0.0,
        "first_try_rate": 1.0,
    }
    return StageStats(**{**base, **kw})


def diag(*stages: StageStats, runs: int = 10) -> Diagnosis:
    return Diagnosis(
        spec_name="s",
        spec_hash="h" * 64,
        runs=runs,
        mean_hqs=0.5,
        stages=list(stages),
        sample_inputs=[],
    )


def change(field: str, stage: str = "draft") -> SpecChange:
    return SpecChange(stage=stage, field=field, new="x", why="w")  # type: ignore[arg-type]


def test_failures_use_the_proposer_thresholds_and_name_kind_and_stage() -> None:
    d = diag(
        stats("draft", invalid_rate=0.5, escalation_rate=0.3),
        stats("check", invalid_rate=0.19, judge_score=0.4, truncated=2),
        stats("idle", runs=0, invalid_rate=1.0),
    )
    assert failures(d) == {
        "output_invalid:draft",
        "escalated:draft",
        "low_judge:check",
        "truncated:check",
    }


def test_a_change_predicts_fixes_on_its_stage_for_what_its_field_acts_on() -> None:
    d = diag(
        stats("draft", invalid_rate=0.5, truncated=1),
        stats("other", invalid_rate=0.5),
    )
    assert predictions(change("model_tier"), d) == (["output_invalid:draft"], [])
    assert predictions(change("max_tokens"), d) == (
        ["output_invalid:draft", "truncated:draft"],
        [],
    )
    # A constraining description may cost quality: it predicts that risk, unless already failing.
    assert predictions(change("description"), d) == (
        ["output_invalid:draft"],
        ["low_judge:draft"],
    )
    judged = diag(stats("draft", invalid_rate=0.5, judge_score=0.5))
    assert predictions(change("temperature"), judged) == (["output_invalid:draft"], [])


def test_verify_splits_predictions_into_verified_missed_and_unexpected() -> None:
    after = diag(stats("draft", escalation_rate=0.5), stats("check", failure_rate=0.5))
    v = verify(
        proposal_id="p1",
        spec_hash="h" * 64,
        predicted_fixes=["output_invalid:draft", "escalated:draft"],
        predicted_regressions=["low_judge:draft"],
        before=["output_invalid:draft", "escalated:draft"],
        diagnosis=after,
        ever_fixed=[],
    )
    assert v.verified_fixes == ["output_invalid:draft"]
    assert v.missed_predictions == ["escalated:draft", "low_judge:draft"]
    assert v.unexpected_regressions == ["stage_failed:check"]
    assert v.current_failures == ["escalated:draft", "stage_failed:check"]
    assert v.regressed == [] and v.drift == 0.0


def test_drift_is_regressed_share_of_current_failures_with_at_least_one_below() -> None:
    assert drift([], ["output_invalid:draft"]) == 0.0  # max(len(current), 1): no division by 0
    assert drift(["output_invalid:draft"], ["output_invalid:draft"]) == 1.0
    assert drift(["a:x", "b:x", "c:x", "d:x"], ["a:x", "z:y"]) == 0.25
    v = verify(
        proposal_id=None,
        spec_hash="h" * 64,
        predicted_fixes=[],
        predicted_regressions=[],
        before=["output_invalid:draft", "escalated:draft"],
        diagnosis=diag(stats("draft", invalid_rate=0.5, escalation_rate=0.5)),
        ever_fixed=["output_invalid:draft"],
    )
    assert v.regressed == ["output_invalid:draft"] and v.drift == 0.5


def test_the_dashboard_shows_each_versions_newest_drift() -> None:
    from rich.console import Console

    from armature_temporal.improve.models import ImproveRound
    from armature_temporal.views.dashboard import build_dashboard
    from armature_temporal.views.render import render_dashboard
    from tests.unit.test_improve_core import run

    runs = [run(spec_hash="a" * 64), run(spec_hash="b" * 64)]
    rounds = [
        ImproveRound(
            id=f"r{i}",
            spec_name="s",
            spec_hash="a" * 64,
            created_at=f"2025-01-0{i}",
            status="at_target",
            drift=d,
        )
        for i, d in ((1, 0.1), (2, 0.75))
    ]
    board = build_dashboard("s", runs, rounds)
    assert {v.spec_hash[0]: v.drift for v in board.versions} == {"a": 0.75, "b": None}
    console = Console(width=200, record=True)
    console.print(render_dashboard(board))
    shown = console.export_text()
    assert "drift" in shown and "0.75" in shown
