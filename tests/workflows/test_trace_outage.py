"""A trace-store outage neither fails a run nor loses its records."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from activities.traces import record_traces
from armature_temporal.service.client import decide_gate
from armature_temporal.spec.compiler import load_plan
from armature_temporal.store import TraceStore
from tests.fakes import FLAKY_STORE, SPECS, fake_record_traces_flaky, start, wait_for_gate
from worker import ACTIVITIES, build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_records_buffered_during_an_outage_are_written_later(
    client: Client, task_queue: str
) -> None:
    activities = [fake_record_traces_flaky, *(a for a in ACTIVITIES if a is not record_traces)]
    FLAKY_STORE["failures_left"] = 3  # every attempt of the flush before the gate fails
    try:
        async with build_worker(client, task_queue, activities=activities):
            handle = await start(client, load_plan(SPECS / "customer-triage.yaml"), task_queue)
            await wait_for_gate(handle, "approve_reply", timeout_s=60)
            assert FLAKY_STORE["failures_left"] == 0
            assert TraceStore().records(handle.id) == []  # nothing written yet
            await decide_gate(client, handle.id, "approve_reply", "approve")
            result = await handle.result()
    finally:
        FLAKY_STORE["failures_left"] = 0
    assert result.state == "completed"
    records = TraceStore().records(handle.id)
    kinds = [r.kind for r in records]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and "gate" in kinds
    assert [r.seq for r in records] == list(range(len(records)))
    checked, breaks = TraceStore().verify([handle.id])
    assert checked == 1 and breaks == []
