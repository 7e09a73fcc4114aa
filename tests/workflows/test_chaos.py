"""The chaos run, smaller: runs of a 6-stage spec on two worker processes, a worker SIGKILLed
every 2–5 s for 30 s and the Temporal server killed and restarted once; every run completes and
no activity completed twice (tests/chaos.py defines the checks; benchmarks/chaos.py runs the
full 40-run shape)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import ChaosConfig, chaos

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_runs_complete_through_worker_kills_and_a_server_restart(tmp_path: Path) -> None:
    config = ChaosConfig(
        runs=6,
        kill_for_s=30,
        server_restart_at_s=15,
        start_over_s=12,
        latency_ms=2500,
        finish_within_s=180,
    )
    report = await chaos(tmp_path / "chaos", config)

    assert report.completed == report.runs, report.failed
    assert report.worker_kills >= 5 and report.server_restarts == 1
    assert report.activity_retries > 0, "no kill landed on a running activity"
    assert report.duplicate_completions == report.missing_completions == 0, report
    assert report.failed_activities == report.rescheduled_stages == 0, report
    assert report.duplicate_records == report.stages_past_first_attempt == 0, report
    assert report.chain_breaks == report.missing_side_effects == 0, report.chain_findings
    assert report.reexecuted_side_effects <= report.tool_retries, report
    assert report.ok
