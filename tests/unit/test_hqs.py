"""HQS from a run's records (pure): each component, renormalisation when one is missing, latency
relative to the version's own median, and the judge component only when a judge scored."""

from __future__ import annotations

from typing import Any

import pytest

from armature_temporal.runtime.hqs import WEIGHTS, median, run_hqs
from armature_temporal.runtime.traces import TraceChain, TraceRecord

AT = "2025-01-06T09:00:00+00:00"


def chain(
    *stages: dict[str, Any], status: str = "completed", latency_ms: float = 2000.0
) -> list[TraceRecord]:
    """run_start, per stage its attempts (``valid``: one bool per attempt) and its outcome,
    run_end. Stage keys: id, role_type, valid, status, escalated, judge_score."""
    trace = TraceChain("run-1", "triage", "h" * 64, "p1")
    trace.add("run_start", AT)
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
    assert sum(WEIGHTS.values()) == pytest.approx(1.0)
    assert score.hqs == pytest.approx(
        0.30 + 0.20 * 0.75 + 0.25 * 0.6 + 0.10 * 0.5 + 0.15 * 2 / 3, abs=1e-4
    )


def test_missing_components_are_left_out_and_the_rest_renormalised() -> None:
    records = chain({"id": "draft", "valid": [False, True]}, status="failed")

    score = run_hqs(records, latency_p50_ms=None)  # no judge, no latency baseline

    assert set(score.components) == {"success", "output_valid", "happy_path"}
    assert score.hqs == pytest.approx((0.30 * 0 + 0.20 * 0.5 + 0.15 * 0) / 0.65, abs=1e-4)


def test_run_without_llm_stages_scores_on_success_and_latency_alone() -> None:
    trace = TraceChain("run-2", "triage", "h" * 64, "p1")
    trace.add("run_start", AT)
    trace.add("stage", AT, stage_id="fetch", status="completed", data={"kind": "tool"})
    trace.add("run_end", AT, status="completed", latency_ms=400.0)

    score = run_hqs(trace.take(), latency_p50_ms=100.0)

    assert score.components == {"success": 1.0, "latency": 0.25}
    assert score.hqs == pytest.approx((0.30 + 0.10 * 0.25) / 0.40, abs=1e-4)


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
