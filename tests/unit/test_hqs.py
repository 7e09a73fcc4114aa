"""HQS from a run's records (pure): each component, renormalisation when one is missing, latency
relative to the version's own median, the judge component only when a judge scored, a spec's
own weights, and where a judge's score is read from."""

from __future__ import annotations

from typing import Any

import pytest

from armature_temporal.runtime.hqs import WEIGHTS, hqs_weights, judge_score, median, run_hqs
from armature_temporal.runtime.traces import TraceChain, TraceRecord

AT = "2025-01-06T09:00:00+00:00"


def chain(
    *stages: dict[str, Any],
    status: str = "completed",
    latency_ms: float = 2000.0,
    start_data: dict[str, Any] | None = None,
) -> list[TraceRecord]:
    """run_start, per stage its attempts (``valid``: one bool per attempt) and its outcome,
    run_end. Stage keys: id, role_type, valid, status, escalated, judge_score."""
    trace = TraceChain("run-1", "triage", "h" * 64, "p1")
    trace.add("run_start", AT, data=start_data or {})
    for stage in stages:
        valid = stage.get("valid", [True])
        for n, ok in enumerate(valid, start=1):
            trace.add(
                "attempt",
                AT,
                stage_id=stage["id"],
                attempt=n,
                role_type=stage.get("role_type", "worker"),
                output_valid=ok,
            )
        trace.add(
            "stage",
            AT,
            stage_id=stage["id"],
            status=stage.get("status", "completed"),
            attempt=len(valid),
            role_type=stage.get("role_type", "worker"),
            escalated=stage.get("escalated", False),
            judge_score=stage.get("judge_score"),
        )
    trace.add("run_end", AT, status=status, latency_ms=latency_ms)
    return trace.take()


def test_every_component_present_weighs_as_documented() -> None:
    records = chain(
        {"id": "draft", "valid": [False, True]},
        {"id": "review"},
        {"id": "judge", "role_type": "judge", "judge_score": 0.6},
    )

    score = run_hqs(records, latency_p50_ms=1000.0)

    assert score.components == {
        "success": 1.0,
        "output_valid": 0.75,  # 3 of 4 attempts
        "judge": 0.6,
        "latency": 0.5,  # 1000 / 2000
        "happy_path": pytest.approx(2 / 3, abs=1e-4),  # draft needed a second attempt
    }
    assert WEIGHTS == {  # the design documents' (and armature-agents 0.7.0's) definition
        "output_valid": 0.35,
        "success": 0.25,
        "judge": 0.20,
        "latency": 0.10,
        "happy_path": 0.10,
    }
    # 0.2625 + 0.25 + 0.12 + 0.05 + 0.0667
    assert score.hqs == pytest.approx(
        0.35 * 0.75 + 0.25 * 1.0 + 0.20 * 0.6 + 0.10 * 0.5 + 0.10 * 2 / 3, abs=1e-4
    )
    assert score.hqs == 0.7492


def test_missing_components_are_left_out_and_the_rest_renormalised() -> None:
    records = chain({"id": "draft", "valid": [False, True]}, status="failed")

    score = run_hqs(records, latency_p50_ms=None)  # no judge, no latency baseline

    assert score.components == {"success": 0.0, "output_valid": 0.5, "happy_path": 0.0}
    # (0.25·0 + 0.35·0.5 + 0.10·0) / (0.25 + 0.35 + 0.10) = 0.175 / 0.70
    assert score.hqs == 0.25


def test_run_without_llm_stages_scores_on_success_and_latency_alone() -> None:
    trace = TraceChain("run-2", "triage", "h" * 64, "p1")
    trace.add("run_start", AT)
    trace.add("stage", AT, stage_id="fetch", status="completed", data={"kind": "tool"})
    trace.add("run_end", AT, status="completed", latency_ms=400.0)

    score = run_hqs(trace.take(), latency_p50_ms=100.0)

    assert score.components == {"success": 1.0, "latency": 0.25}
    # (0.25·1 + 0.10·0.25) / (0.25 + 0.10) = 0.275 / 0.35
    assert score.hqs == pytest.approx(0.7857, abs=1e-4)


@pytest.mark.parametrize(
    ("p50", "latency", "expected"),
    [
        (1000.0, 4000.0, 0.25),  # four times slower than usual
        (1000.0, 1000.0, 1.0),
        (1000.0, 250.0, 1.0),  # faster than usual is capped at 1
        (30_000.0, 60_000.0, 0.5),  # relative: a slow spec is not punished for being slow
        (None, 4000.0, None),  # no baseline yet
        (1000.0, 0.0, None),  # no latency measured
    ],
)
def test_latency_is_relative_to_the_versions_own_median(
    p50: float | None, latency: float, expected: float | None
) -> None:
    score = run_hqs(chain({"id": "draft"}, latency_ms=latency), latency_p50_ms=p50)
    assert score.components.get("latency") == expected


def test_judge_component_only_when_a_judge_stage_scored() -> None:
    unjudged = chain({"id": "draft"}, {"id": "judge", "role_type": "judge"})
    not_a_judge = chain({"id": "draft", "judge_score": 0.1})  # a worker's score is no judgement
    judged = chain(
        {"id": "draft"},
        {"id": "judge-a", "role_type": "judge", "judge_score": 0.9},
        {"id": "judge-b", "role_type": "judge", "judge_score": 0.5},
    )

    assert "judge" not in run_hqs(unjudged, None).components
    assert "judge" not in run_hqs(not_a_judge, None).components
    assert run_hqs(judged, None).components["judge"] == pytest.approx(0.7)


def test_happy_path_counts_llm_stages_done_first_time_without_escalation() -> None:
    records = chain(
        {"id": "a"},
        {"id": "b", "valid": [False, True]},  # second attempt
        {"id": "c", "escalated": True},
        {"id": "d", "status": "failed", "valid": [False]},
    )

    assert run_hqs(records, None).components["happy_path"] == 0.25


def test_no_records_scores_zero() -> None:
    assert run_hqs([], 1000.0).hqs == 0.0


def test_median_ignores_missing_values() -> None:
    assert median([]) is None
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0]) == 2.5
    assert median([4.0, None, 1.0]) == 2.5  # type: ignore[list-item]


# --- a spec's own weights -----------------------------------------------------------------------


def test_weights_the_run_recorded_replace_the_defaults_they_name() -> None:
    stages = (
        {"id": "draft", "valid": [False, True]},
        {"id": "judge", "role_type": "judge", "judge_score": 0.2},
    )
    default = run_hqs(chain(*stages), latency_p50_ms=None)
    judged = run_hqs(
        chain(*stages, start_data={"hqs_weights": {"judge": 1.0, "latency": 0.0}}),
        latency_p50_ms=None,
    )

    # success 1, output_valid 2/3 (2 of 3 attempts), judge 0.2, happy_path 1/2
    assert default.hqs == pytest.approx(
        (0.25 * 1 + 0.35 * 2 / 3 + 0.20 * 0.2 + 0.10 * 0.5) / 0.90, abs=1e-4
    )
    # judge now weighs 1.0; the others keep 0.25, 0.35, 0.10
    assert judged.hqs == pytest.approx(
        (0.25 * 1 + 0.35 * 2 / 3 + 1.0 * 0.2 + 0.10 * 0.5) / 1.70, abs=1e-4
    )
    assert judged.components == default.components


def test_explicit_weights_win_over_the_recorded_ones() -> None:
    records = chain({"id": "draft"}, status="failed", start_data={"hqs_weights": {"success": 0}})

    assert run_hqs(records, None).components == {
        "success": 0.0,
        "output_valid": 1.0,
        "happy_path": 1.0,
    }
    # success weighs 0: (0.35·1 + 0.10·1) / (0.35 + 0.10)
    assert run_hqs(records, None).hqs == 1.0
    # only success counts
    assert (
        run_hqs(records, None, weights={"success": 1, "output_valid": 0, "happy_path": 0}).hqs
        == 0.0
    )


@pytest.mark.parametrize(
    ("weights", "problem"),
    [
        ({"speed": 0.5}, "not a component"),
        ({"judge": -0.1}, ">= 0"),
        ({"judge": float("nan")}, ">= 0"),
        ({"judge": True}, ">= 0"),
        ({"judge": "high"}, ">= 0"),
        ({k: 0.0 for k in WEIGHTS}, "sum to 0"),
    ],
)
def test_weights_that_cannot_score_are_refused(weights: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        hqs_weights(weights)
    with pytest.raises(ValueError, match=problem):
        run_hqs(chain({"id": "draft"}), None, weights=weights)


def test_no_overrides_means_the_defaults() -> None:
    assert hqs_weights(None) == WEIGHTS
    assert hqs_weights({}) == WEIGHTS
    assert hqs_weights({"latency": 0})["latency"] == 0.0


# --- where a judge's score comes from -----------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ({"score": 0.88, "verdict": "APPROVED"}, 0.88),
        ({"quality_score": 0.4}, 0.4),
        ({"risk_level": "high", "confidence": 0.92}, 0.92),  # 0.7.0's quorum-scored judge
        ({"score": 0.3, "quality_score": 0.9, "confidence": 0.1}, 0.3),  # score first
        ({"quality_score": 0.6, "confidence": 0.1}, 0.6),  # then quality_score
        ({"score": 7, "confidence": 0.8}, 0.8),  # out of range: passed over
        ({"score": "0.9", "confidence": 0.5}, 0.5),  # not a number: passed over
        ({"score": True}, None),  # a bool is not a score
        ({"score": float("nan")}, None),
        ({"score": 1}, 1.0),
        ({"score": 0}, 0.0),
        ({"passed": True}, None),
        ("a text judgement", None),
        (None, None),
    ],
)
def test_judge_score_reads_score_then_quality_score_then_confidence(
    output: Any, expected: float | None
) -> None:
    assert judge_score(output) == expected
