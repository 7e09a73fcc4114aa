"""dashboard_summary on SQLite and PostgreSQL: per spec version, never mixing versions or specs."""

from __future__ import annotations

import statistics

import pytest

from armature_temporal.store import TraceStore
from armature_temporal.store.queries import VersionSummary, dashboard_summary, percentile
from tests.store.chains import SPEC_HASH, make_run

OTHER_HASH = "b" * 64


def test_dashboard_summarises_each_version_newest_first(store: TraceStore) -> None:
    store.write(make_run("a1", latency_ms=1000.0, start=0))
    store.write(make_run("a2", latency_ms=2000.0, start=60, fail_stage="draft"))
    store.write(make_run("a3", latency_ms=4000.0, start=120, judge_score=0.3))
    store.write(make_run("b1", spec_hash=OTHER_HASH, start=1000)[:1])  # still running
    store.write(make_run("b2", spec_hash=OTHER_HASH, latency_ms=3000.0, start=1060))
    store.write(make_run("x1", spec_name="other", latency_ms=99_000.0, fail_stage="classify"))

    def hqs(*run_ids: str) -> float:
        scores = []
        for run_id in run_ids:
            run = store.run(run_id)
            assert run is not None and run.hqs is not None
            scores.append(run.hqs)
        return round(statistics.mean(scores), 4)

    newer, older = dashboard_summary(store, "triage")

    assert newer == VersionSummary(
        spec_hash=OTHER_HASH,
        spec_version="3",
        runs=2,
        statuses={"completed": 1, "running": 1},
        mean_hqs=hqs("b2"),
        failures={},
        latency_p50_ms=3000.0,
        latency_p95_ms=3000.0,
        prompt_tokens=300,
        completion_tokens=60,
        cost_usd=0.003,  # rounded to micro-dollars
        first_started_at="2025-01-06T09:16:40+00:00",
        last_started_at="2025-01-06T09:17:40+00:00",
    )
    assert older == VersionSummary(
        spec_hash=SPEC_HASH,
        spec_version="3",
        runs=3,
        statuses={"completed": 2, "failed": 1},
        mean_hqs=hqs("a1", "a2", "a3"),
        failures={"low_quality": 1, "output_invalid": 1},
        latency_p50_ms=2000.0,
        latency_p95_ms=3800.0,  # between 2000 and 4000, 90% of the way
        prompt_tokens=800,  # 3 + 2 + 3 attempts
        completion_tokens=160,
        cost_usd=0.008,
        first_started_at="2025-01-06T09:00:00+00:00",
        last_started_at="2025-01-06T09:02:00+00:00",
    )


def test_dashboard_of_a_spec_without_runs_is_empty(store: TraceStore) -> None:
    store.write(make_run("a1"))
    assert dashboard_summary(store, "no-such-spec") == []


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([7.0], 95, 7.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([float(n) for n in range(1, 101)], 95, 95.05),
        ([1.0, 2.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 4.0], 100, 4.0),
    ],
)
def test_percentile_interpolates_between_closest_ranks(
    values: list[float], q: float, expected: float | None
) -> None:
    assert percentile(values, q) == (None if expected is None else pytest.approx(expected))
