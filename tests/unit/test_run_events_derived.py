"""Events derived from a closed run's result (for when no worker can replay it)."""

from __future__ import annotations

from armature_temporal.service.events import derived_events


def test_derived_events_put_big_outputs_behind_a_reference() -> None:
    from armature_temporal.runtime.models import RunResult, StageResult

    result = RunResult(
        run_id="r-1",
        spec_name="s",
        spec_hash="h",
        state="completed",
        stages={
            "a": StageResult(
                status="completed",
                output={"text": "x" * 9000},
                started_at="2026-01-01T00:00:00+00:00",
                finished_at="2026-01-01T00:00:02+00:00",
            ),
            "b": StageResult(
                status="completed",
                output={"n": 1},
                started_at="2026-01-01T00:00:01+00:00",
                finished_at="2026-01-01T00:00:01+00:00",
            ),
        },
        outputs={"a": {"text": "x" * 9000}, "b": {"n": 1}},
    )
    events = derived_events("r-1", result, "completed", "2026-01-01T00:00:03+00:00")
    assert [(e.seq, e.type, e.stage) for e in events] == [
        (1, "stage_start", "a"),
        (2, "stage_start", "b"),
        (3, "stage_complete", "b"),
        (4, "stage_complete", "a"),
        (5, "run_complete", None),
    ]
    assert events[3].data["output_ref"] == "/run/r-1" and "output" not in events[3].data
    assert events[2].data["output"] == {"n": 1}
    assert events[4].data["output_ref"] == "/run/r-1"
