"""Durability of a fan-out: SIGKILL the worker while some children are finished and others are
mid-tool-call, and a fresh worker finishes the run without re-running the finished children.

Each child runs one python tool (``tests.fakes:fake_timed_step``) that logs a ``start`` and an
``end`` line per execution, with the worker's pid, to $ARMATURE_STEP_LOG, so the test can tell
which worker ran each child's tool and how often. Workers are separate processes
(``tests/worker_process.py``); a killed worker's in-flight tool call is retried once its
heartbeat timeout (10 s) expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.models import RunResult
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from tests.fakes import start
from tests.worker_process import spawn

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: The parent must finish within this after the kill: heartbeat timeout (10 s), retry backoff,
#: the sticky-queue fallback and the slow children's 6 s, with room to spare.
FINISH_S = 60.0

CHILD = """\
name: stepper
inputs:
  type: object
  properties: {partition: {type: array}, index: {type: integer}, delays: {type: string}}
stages:
  - id: step
    tool: {name: "tests.fakes:fake_timed_step",
           args: {index: "{{ inputs.index }}", delays: "{{ inputs.delays }}"}}
"""

PARENT = """\
name: stepped-fanout
inputs:
  type: object
  properties:
    items: {type: array, items: {type: string}, default: [a, b, c]}
    delays: {type: string, default: "0,6,6"}
stages:
  - {id: steps, subagent_spec: stepper.yaml, fan_out: 3, partition_key: inputs.items}
"""


def step_log(path: Path) -> list[dict[str, Any]]:
    """The tool executions logged so far (complete lines only)."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return [json.loads(line) for line in lines if line.endswith("\n")]


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 20.0
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.05)


async def event_counts(handle: WorkflowHandle[Any, Any]) -> Counter[str]:
    """Child workflows initiated and tool calls scheduled, plus the last tool attempt."""
    counts: Counter[str] = Counter()
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            counts["children initiated"] += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            counts["tool scheduled"] += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            counts["tool attempt"] = event.activity_task_started_event_attributes.attempt
    return counts


async def test_worker_killed_during_a_fan_out_resumes_without_rerunning_finished_children(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "stepper.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    plan = compile_spec(load_spec(tmp_path / "parent.yaml"))
    address = temporal_env.client.service_client.config.target_host
    log = tmp_path / "steps.jsonl"
    env = {"ARMATURE_STEP_LOG": str(log)}
    run_id = f"stepped-fanout-{uuid.uuid4().hex[:8]}"
    children = [
        client.get_workflow_handle(f"{run_id}/steps/{i}", result_type=RunResult) for i in range(3)
    ]

    async def child_0_done_and_others_mid_call() -> bool:
        started = {e["index"] for e in step_log(log) if e["event"] == "start"}
        if started != {0, 1, 2}:
            return False
        return (await children[0].describe()).status == WorkflowExecutionStatus.COMPLETED

    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            spawn(address, task_queue, tmp_path / "w1.err", env)
        )
        handle = await start(client, plan, task_queue, run_id=run_id)
        await wait_until(child_0_done_and_others_mid_call, "child 0 to finish, 1 and 2 to start")
        await first.crash()
        before = step_log(log)
        # Children 1 and 2 were really mid-call: started on the first worker, not finished.
        assert [(e["index"], e["event"]) for e in before if e["index"] != 0] in (
            [(1, "start"), (2, "start")],
            [(2, "start"), (1, "start")],
        ), before
        second = await stack.enter_async_context(
            spawn(address, task_queue, tmp_path / "w2.err", env)
        )
        result = await asyncio.wait_for(handle.result(), timeout=FINISH_S)

    assert result.state == "completed", result.reason
    assert result.outputs["steps"] == [
        {"index": 0, "slept_s": 0.0},
        {"index": 1, "slept_s": 6.0},
        {"index": 2, "slept_s": 6.0},
    ]
    runs = {i: [(e["event"], e["pid"]) for e in step_log(log) if e["index"] == i] for i in range(3)}
    # Child 0 finished before the kill: its tool ran once, on the first worker, never again.
    assert runs[0] == [("start", first.pid), ("end", first.pid)], runs
    # Children 1 and 2: the killed attempt, then Temporal's retry of it on the second worker.
    for i in (1, 2):
        assert runs[i] == [("start", first.pid), ("start", second.pid), ("end", second.pid)], runs
    # No child workflow was started twice, and no tool call was scheduled twice.
    assert (await event_counts(handle))["children initiated"] == 3
    for i, child in enumerate(children):
        counts = await event_counts(child)
        assert counts["tool scheduled"] == 1, (i, counts)
        assert counts["tool attempt"] == (1 if i == 0 else 2), (i, counts)
