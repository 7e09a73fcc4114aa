"""A run waiting at a human gate survives the Temporal server's crash.

The test runs a dev server of its own with its state in a file (tests/dev_server.py), SIGKILLs
it while a run waits at its gate, starts it again on the same state, approves, and the run
finishes, on the worker that was polling all along.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import decide_gate
from armature_temporal.spec.compiler import load_plan
from armature_temporal.store import TraceStore
from tests.dev_server import dev_server
from tests.fakes import SPECS, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_gate_waits_across_a_server_crash_and_the_run_finishes_after_approval(
    tmp_path: Path, task_queue: str
) -> None:
    async with dev_server(tmp_path / "temporal") as server:
        client = await server.client()
        async with build_worker(client, task_queue):
            handle = await start(client, load_plan(SPECS / "customer-triage.yaml"), task_queue)
            await wait_for_gate(handle, "approve_reply", timeout_s=60)

            await server.restart(down_s=1.0)
            assert server.state_file.exists()

            # A fresh client, as a person approving later would have; the run is still there,
            # still waiting at its gate, and the worker picks up again.
            after = await server.client()
            again = after.get_workflow_handle(handle.id, result_type=RunResult)
            await wait_for_gate(again, "approve_reply", timeout_s=60)
            await decide_gate(after, handle.id, "approve_reply", "approve", comment="after restart")
            result = await asyncio.wait_for(again.result(), timeout=90)

    assert result.state == "completed", result.reason
    gate = result.stages["approve_reply"].gate
    assert gate is not None and (gate.decision, gate.comment) == ("approve", "after restart")
    assert all(s.status in ("completed", "skipped") for s in result.stages.values())
    checked, breaks = TraceStore().verify([handle.id])
    assert checked == 1 and breaks == []
