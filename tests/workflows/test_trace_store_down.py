"""A real trace-store outage: PostgreSQL behind a loopback proxy that the test cuts while runs
are in flight (tests/store_outage.py). The runs go on, finish their stages, approve a gate and
reach their final flush while the store is gone; their worker is SIGKILLed and replaced
meanwhile; once the store is back every run completes and every record is there, each chain
intact. And a store that hangs instead of refusing holds no worker up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.models import RunResult, RunStatus
from armature_temporal.service.client import decide_gate
from armature_temporal.spec.compiler import load_plan
from armature_temporal.store import TraceStore
from tests.fakes import SPECS, plan_from, start, wait_for_gate
from tests.store_outage import pg_database, store_proxy
from tests.worker_process import spawn
from worker import build_worker
from workflows.interpreter.tracing import FLUSH_EVERY

pytestmark = pytest.mark.asyncio(loop_scope="session")

ITERATIONS = FLUSH_EVERY + 5  # more records than a flush waits for: an intermediate flush fails

LOOP_SPEC = f"""\
name: outage-loop
model_tiers:
  quick: {{provider: simulate, valid_rate: 1.0, latency_ms: 50}}
stages:
  - id: draft
    role: {{name: Drafter, description: "v{{{{ _iteration.num }}}}", model_tier: quick}}
    loop: {{max_iterations: {ITERATIONS}}}
  - {{id: polish, depends_on: [draft], role: {{name: P, description: "{{{{ draft.content }}}}",
     model_tier: quick}}}}
"""
LOOP_RUNS = 3


async def run_state(handle: WorkflowHandle[Any, RunResult]) -> str | None:
    """The run's own state (``completed`` before its final flush has been stored)."""
    with contextlib.suppress(Exception):  # a query can fail while the worker is replaced
        status: RunStatus = await handle.query("status", result_type=RunStatus)
        return status.state
    return None


async def until_done_but_unflushed(
    handles: list[WorkflowHandle[Any, RunResult]], timeout_s: float = 90.0
) -> None:
    """Wait until every run has finished its stages (state completed) while its workflow is
    still running: it waits for its final flush."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        states = [await run_state(h) for h in handles]
        if all(s == "completed" for s in states):
            break
        if loop.time() > deadline:
            raise AssertionError(f"runs did not finish their stages: {states}")
        await asyncio.sleep(0.5)
    for handle in handles:
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING


async def test_runs_finish_through_a_real_store_outage_and_every_record_arrives(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = temporal_env.client.service_client.config.target_host
    with pg_database() as database:
        direct = TraceStore(database.render_as_string(hide_password=False))  # migrates it
        async with store_proxy(database) as proxy:
            url = proxy.url(database).render_as_string(hide_password=False)
            monkeypatch.setenv("ARMATURE_DB_URL", url)  # the workers' store
            async with spawn(address, task_queue, tmp_path / "first.log"):
                await proxy.cut()
                loops = [
                    await start(client, plan_from(LOOP_SPEC), task_queue) for _ in range(LOOP_RUNS)
                ]
                triage = await start(client, load_plan(SPECS / "customer-triage.yaml"), task_queue)
                await wait_for_gate(triage, "approve_reply", timeout_s=60)
                await decide_gate(client, triage.id, "approve_reply", "approve")
                runs = [*loops, triage]
                await until_done_but_unflushed(runs)
            # The worker that ran them all is gone (SIGKILL on leaving spawn); a new one
            # takes the runs over while the store is still down.
            async with spawn(address, task_queue, tmp_path / "second.log"):
                await asyncio.sleep(3)
                for handle in runs:
                    assert direct.records(handle.id) == [], "the store was not down"
                    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
                await proxy.restore()
                results = await asyncio.wait_for(
                    asyncio.gather(*(h.result() for h in runs)), timeout=120
                )

        assert [r.state for r in results] == ["completed"] * len(runs)
        checked, breaks = direct.verify([h.id for h in runs])
        assert checked == len(runs) and breaks == []
        for handle, result in zip(runs, results, strict=True):
            records = direct.records(handle.id)
            assert [r.seq for r in records] == list(range(len(records)))
            kinds = Counter(r.kind for r in records)
            assert records[0].kind == "run_start" and records[-1].kind == "run_end"
            assert kinds["run_start"] == kinds["run_end"] == 1
            assert kinds["stage"] == len(result.stages)
            assert records[-1].status == "completed"
        for handle in loops:
            attempts = [r for r in direct.records(handle.id) if r.kind == "attempt"]
            assert Counter(r.stage_id for r in attempts) == {"draft": ITERATIONS, "polish": 1}
        assert "gate" in {r.kind for r in direct.records(triage.id)}
        direct.close()


CANCEL_SPEC = f"""\
name: outage-cancel
model_tiers:
  quick: {{provider: simulate, valid_rate: 1.0}}
  slow: {{provider: simulate, valid_rate: 1.0, latency_ms: 60000}}
stages:
  - id: draft
    role: {{name: Drafter, description: "v{{{{ _iteration.num }}}}", model_tier: quick}}
    loop: {{max_iterations: {ITERATIONS}}}
  - {{id: polish, depends_on: [draft], role: {{name: P, description: "{{{{ draft.content }}}}",
     model_tier: slow}}}}
"""


async def test_a_store_that_hangs_does_not_freeze_the_worker_nor_lose_a_cancelled_run(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store accepts connections and never answers. Opening it (record_traces' first call)
    used to block the worker's event loop: no workflow task, no heartbeat, no cancellation
    got through until the connection gave up, and here it never did. Now the run is cancelled
    while its flush waits, and once the store answers again its records are all there."""
    with pg_database() as database:
        direct = TraceStore(database.render_as_string(hide_password=False))
        async with store_proxy(database) as proxy:
            monkeypatch.setenv(
                "ARMATURE_DB_URL", proxy.url(database).render_as_string(hide_password=False)
            )
            await proxy.cut(stall=True)  # a store that hangs: each try waits for its timeout
            async with build_worker(client, task_queue):
                handle = await start(client, plan_from(CANCEL_SPEC), task_queue)
                # The loop's records are more than a flush waits for: the first flush starts,
                # and hangs on the store.
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 60
                while proxy.stalls == 0:
                    assert loop.time() < deadline, "no flush reached the store"
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1)
                await handle.cancel()
                await asyncio.sleep(1)
                await proxy.restore()
                with pytest.raises(WorkflowFailureError):
                    await asyncio.wait_for(handle.result(), timeout=120)

        records = direct.records(handle.id)
        assert [r.seq for r in records] == list(range(len(records)))
        assert records[0].kind == "run_start" and records[-1].kind == "run_end"
        assert records[-1].status == "cancelled"
        attempts = Counter(r.stage_id for r in records if r.kind == "attempt")
        assert attempts["draft"] == ITERATIONS
        checked, breaks = direct.verify([handle.id])
        assert checked == 1 and breaks == [], breaks
        direct.close()
