"""Durability with real worker processes: SIGKILL a worker mid-run and the run still finishes.

Workers run as separate processes (``tests/worker_process.py``) against the session dev server,
each logging every ``llm_call`` execution to its own file, so the tests can tell which worker
ran what and how often. A killed worker's in-flight activity is retried once its heartbeat
timeout (10 s) expires; finished stages come back from history and are never executed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.models import RunResult
from tests.fakes import plan_from, start
from tests.worker_process import WorkerProcess as SpawnedWorker
from tests.worker_process import spawn

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: A run must finish within this after its worker died: heartbeat timeout (10 s), a retry
#: backoff, the sticky-queue fallback and the remaining stages, with room to spare.
FINISH_S = 60.0

Call = dict[str, Any]


@dataclass
class CallLoggingWorker:
    """A worker process (see tests.worker_process.spawn) and the file it logs llm_calls to."""

    process: SpawnedWorker
    call_log: Path

    def calls(self) -> list[Call]:
        """The llm_call executions so far (complete lines only)."""
        if not self.call_log.exists():
            return []
        text = self.call_log.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    async def crash(self) -> None:
        """SIGKILL: no graceful shutdown, no final heartbeat, no sticky-queue hand-back."""
        await self.process.crash()


@contextlib.asynccontextmanager
async def worker_process(
    address: str, task_queue: str, workdir: Path, activity_slots: int | None = None
) -> AsyncIterator[CallLoggingWorker]:
    """A worker process logging its llm_call executions; always killed on exit.
    ``activity_slots`` caps the activities it runs at once."""
    workdir.mkdir(parents=True)
    call_log = workdir / "calls.jsonl"
    env = {"ARMATURE_CALL_LOG": str(call_log)}
    if activity_slots is not None:
        env["ARMATURE_TEST_ACTIVITY_SLOTS"] = str(activity_slots)
    async with spawn(address, task_queue, workdir / "stderr.log", env) as process:
        yield CallLoggingWorker(process, call_log)


async def wait_until(
    predicate: Callable[[], bool], what: str, timeout: float = 20.0, every: float = 0.02
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(every)


async def activity_events(handle: WorkflowHandle[Any, RunResult], client: Client) -> Counter[str]:
    """Count ``(stage, event kind)`` from the run's history; retries add no events, so one
    Scheduled/Started/Completed per stage. Started events carry the final attempt number."""
    stage_of: dict[int, str] = {}
    counts: Counter[str] = Counter()
    converter = client.data_converter.payload_converter
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = converter.from_payload(event.user_metadata.summary, str)
            stage_of[event.event_id] = summary.split(":")[0]
            counts[f"{stage_of[event.event_id]} scheduled"] += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            counts[f"{stage_of[attrs.scheduled_event_id]} started"] += 1
            counts[f"{stage_of[attrs.scheduled_event_id]} attempt"] = attrs.attempt
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            counts[f"{stage_of[attrs.scheduled_event_id]} completed"] += 1
    return counts


def address_of(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


CRASH_SPEC = """\
name: crash-resume
model_tiers:
  quick: {provider: simulate, valid_rate: 1.0}
  slow: {provider: simulate, valid_rate: 1.0, latency_ms: 4000}
stages:
  - {id: s1, role: {name: One, description: start, model_tier: quick}}
  - {id: s2, depends_on: [s1], role: {name: Two, description: "{{ s1.content }}",
     model_tier: slow}}
  - {id: s3, depends_on: [s2], role: {name: Three, description: "{{ s2.content }}",
     model_tier: quick}}
  - {id: s4, depends_on: [s3], role: {name: Four, description: "{{ s3.content }}",
     model_tier: quick}}
"""


async def test_worker_killed_mid_stage_resumes_on_a_fresh_worker_and_redoes_only_that_stage(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = plan_from(CRASH_SPEC)
    address = address_of(temporal_env)
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            worker_process(address, task_queue, tmp_path / "first")
        )
        handle = await start(client, plan, task_queue)
        await wait_until(
            lambda: any(c["stage"] == "s2" for c in first.calls()), "s2 to start on worker 1"
        )
        await first.crash()
        second = await stack.enter_async_context(
            worker_process(address, task_queue, tmp_path / "second")
        )
        result = await asyncio.wait_for(handle.result(), timeout=FINISH_S)

    assert result.state == "completed"
    assert set(result.outputs) == {"s1", "s2", "s3", "s4"}
    assert all(result.stages[s].status == "completed" for s in result.outputs)
    before = [(c["stage"], c["activity_attempt"]) for c in first.calls()]
    after = [(c["stage"], c["activity_attempt"]) for c in second.calls()]
    assert before == [("s1", 1), ("s2", 1)]
    # s2 again, as Temporal's retry of the same activity (not an interpreter re-attempt: the
    # stage saw one attempt), then s3 and s4 once; s1 came from history.
    assert [stage for stage, _ in after] == ["s2", "s3", "s4"]
    assert after[0][1] >= 2
    assert result.stages["s2"].attempts == 1
    assert all(c["attempt"] == 1 for c in first.calls() + second.calls())

    events = await activity_events(handle, client)
    for stage in ("s1", "s2", "s3", "s4"):
        assert events[f"{stage} scheduled"] == events[f"{stage} completed"] == 1, events
    assert events["s1 attempt"] == 1
    assert events["s2 attempt"] == after[0][1]


SHARED_SPEC = """\
name: shared-queue
model_tiers:
  slow: {provider: simulate, valid_rate: 1.0, latency_ms: 1500}
stages:
  - {id: a, role: {name: A, description: start, model_tier: slow}}
  - {id: b, depends_on: [a], role: {name: B, description: "{{ a.content }}", model_tier: slow}}
  - {id: c, depends_on: [b], role: {name: C, description: "{{ b.content }}", model_tier: slow}}
  - {id: d, depends_on: [c], role: {name: D, description: "{{ c.content }}", model_tier: slow}}
"""
RUNS = 6


async def test_two_workers_share_runs_and_killing_one_mid_run_loses_nothing(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = plan_from(SHARED_SPEC)
    address = address_of(temporal_env)
    async with contextlib.AsyncExitStack() as stack:
        # Half the runs' activities each at most: a worker that holds a run's workflow task
        # gets its activities handed back eagerly (same queue), and one that started first
        # could otherwise take every run and leave the other idle (CI: "timed out after 20s
        # waiting for both workers to run a stage"). Full, it leaves the rest on the queue.
        workers = [
            await stack.enter_async_context(
                worker_process(address, task_queue, tmp_path / name, activity_slots=RUNS // 2)
            )
            for name in ("w1", "w2")
        ]
        handles = [await start(client, plan, task_queue) for _ in range(RUNS)]
        await wait_until(lambda: all(w.calls() for w in workers), "both workers to run a stage")
        # Kill whichever worker starts the next call, so that call is surely still running.
        seen = [len(w.calls()) for w in workers]
        await wait_until(
            lambda: any(len(w.calls()) > n for w, n in zip(workers, seen, strict=True)),
            "another call to start",
        )
        victim_index = next(
            i for i, (w, n) in enumerate(zip(workers, seen, strict=True)) if len(w.calls()) > n
        )
        victim, survivor = workers[victim_index], workers[1 - victim_index]
        await victim.crash()
        in_flight = victim.calls()[-1]
        results = await asyncio.wait_for(
            asyncio.gather(*(h.result() for h in handles)), timeout=FINISH_S
        )

    stages = [s.id for s in plan.stages]
    for result in results:
        assert result.state == "completed", result.reason
        assert [result.stages[s].status for s in stages] == ["completed"] * len(stages)
        for sid in stages:
            assert result.outputs[sid]["content"]
            assert result.stages[sid].output == result.outputs[sid]
    killed, kept = victim.calls(), survivor.calls()
    assert killed and kept, "both workers should have executed activities"
    # The call that was running when its worker died was retried on the survivor.
    assert any(
        (c["run_id"], c["stage"]) == (in_flight["run_id"], in_flight["stage"])
        and c["activity_attempt"] >= 2
        for c in kept
    ), (in_flight, kept)
    # Every stage of every run ran, and no (run, stage, attempt) ran twice: stages finished
    # before the kill were not executed again. Retries ran on the survivor only, and the
    # first attempt of a retried stage, if it got as far as logging, was on the killed worker
    # (a task the killed worker had polled but not yet started leaves no line at all).
    runs: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for who, calls in (("killed", killed), ("kept", kept)):
        for c in calls:
            runs.setdefault((c["run_id"], c["stage"]), []).append((c["activity_attempt"], who))
    assert len(runs) == RUNS * len(stages)
    for key, executions in runs.items():
        attempts = [a for a, _ in executions]
        assert len(set(attempts)) == len(attempts), (key, executions)
        if max(attempts) > 1:
            assert all(who == "kept" for a, who in executions if a > 1), (key, executions)
            assert all(who == "killed" for a, who in executions if a == 1), (key, executions)
