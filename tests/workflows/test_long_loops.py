"""A long agent tool loop stays within Temporal's history limits.

Every turn of an agent stage sends its window to ``llm_call`` (and, like the real activity, the
fake returns the messages it was sent). Here no context window is known for the simulate tier,
so the window is every turn, its stored tool results by reference. A run takes a loop's first
100 turns (``context.segment_turns``), an AgentLoop child the rest.

The first test runs loops of 25, 50 and 100 tool calls side by side, checks each ran exactly
the activities it should, across the run and its child, pins the 100-turn run well inside
Temporal's limits and prints the sizes (``pytest -s``) so the growth can be watched from release
to release. The second runs a 199-turn loop with a 40 KiB brief (before intermediate turns
stopped echoing the transcript back, the server terminated such a run around turn 320) and
expects it to finish.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from activities.llm import llm_call
from armature_temporal.service.client import run_outcome
from tests.fakes import fake_llm_call_tool_loop, plan_from, start
from worker import ACTIVITIES, build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: Temporal warns from 10,240 events / 10 MiB and terminates a run at 51,200 events / 50 MiB.
MAX_EVENTS = 10_000
MAX_HISTORY_BYTES = 10 * 1024 * 1024

LOOP_SPEC = """\
name: long-loop
inputs:
  type: object
  properties: {tool_turns: {type: integer}}
  required: [tool_turns]
model_tiers: {small: {provider: simulate}}
stages:
  - id: explore
    role:
      name: Explorer
      description: "List the workspace {{ inputs.tool_turns }} times, then say what you saw."
      tools: [file_list]
      max_turns: 101
"""


async def activity_counts(handle: WorkflowHandle[Any, Any]) -> Counter[str]:
    """How many activities of each type the run scheduled (a retry schedules no new one)."""
    counts: Counter[str] = Counter()
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            counts[event.activity_task_scheduled_event_attributes.activity_type.name] += 1
    return counts


async def loop_executions(
    client: Client, run_id: str, stage: str
) -> list[WorkflowHandle[Any, Any]]:
    """Each execution of the stage's AgentLoop child (first attempt), oldest first: a loop
    past its segment (100 turns by default) continues there, continuing as new."""
    from temporalio.service import RPCError

    handles: list[WorkflowHandle[Any, Any]] = []
    run_of: str | None = None
    child = f"{run_id}.{stage}.a1.loop1"
    try:
        while True:
            handle = client.get_workflow_handle(child, run_id=run_of)
            await handle.describe()
            handles.append(handle)
            run_of = None
            async for event in handle.fetch_history_events():
                started = event.workflow_execution_started_event_attributes
                run_of = started.continued_execution_run_id or None
                break
            if run_of is None:
                return handles[::-1]
    except RPCError:  # no child: the loop fit in the run's own history
        return handles[::-1]


async def test_a_100_turn_tool_loop_stays_within_history_limits(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(LOOP_SPEC)
    activities = [fake_llm_call_tool_loop, *(a for a in ACTIVITIES if a is not llm_call)]
    sizes: dict[int, tuple[int, int]] = {}
    async with build_worker(client, task_queue, activities=activities):
        handles = {
            turns: await start(client, plan, task_queue, {"tool_turns": turns})
            for turns in (25, 50, 100)
        }
        results = await asyncio.wait_for(
            asyncio.gather(*(run_outcome(h) for h in handles.values())), timeout=60
        )
    for (turns, handle), result in zip(handles.items(), results, strict=True):
        assert result is not None and result.state == "completed", result and result.reason
        assert result.outputs["explore"] == {"content": f"listed the workspace {turns} times"}
        counts = await activity_counts(handle)
        children = await loop_executions(client, handle.id, "explore")
        # The run takes the first 100 turns (context.segment_turns); its child the rest.
        assert counts["tool_call"] == min(turns, 100), counts
        assert len(children) == (turns >= 100)
        for child in children:
            counts += await activity_counts(child)
        assert counts["tool_call"] == turns, counts
        assert counts["llm_call"] == turns + 1, counts
        desc = await handle.describe()
        sizes[turns] = (desc.history_length, desc.raw_info.history_size_bytes)

    print("\ntool turns   events   history bytes   bytes/turn")
    for turns, (events, size) in sizes.items():
        print(f"{turns:>10}   {events:>6}   {size:>13,}   {size // turns:>10,}")
    events, size = sizes[100]
    assert events < MAX_EVENTS, f"{events} events"
    assert size < MAX_HISTORY_BYTES, f"history is {size:,} bytes"


BRIEF_SPEC = """\
name: long-brief-loop
inputs:
  type: object
  properties: {brief: {type: string}, tool_turns: {type: integer}}
  required: [brief, tool_turns]
model_tiers: {small: {provider: simulate}}
stages:
  - id: explore
    role:
      name: Explorer
      description: |
        {{ inputs.brief }}
        List the workspace {{ inputs.tool_turns }} times, then say what you saw.
      tools: [file_list]
      max_turns: 200
"""


async def test_a_tool_loop_within_the_max_turns_the_spec_accepts_is_not_terminated_by_temporal(
    client: Client, task_queue: str
) -> None:
    """An agent with a 40 KiB brief making 199 small tool calls (the spec accepts up to 200
    turns) must not outgrow the history.

    Before max_turns was capped at 200 and intermediate turns stopped echoing the transcript
    back, the server terminated such a run ("Workflow history size exceeds limit.") around turn
    320, with no run_end trace and no failure reason.
    """
    plan = plan_from(BRIEF_SPEC)
    inputs = {"brief": "Read this brief carefully. " * 1517, "tool_turns": 199}
    activities = [fake_llm_call_tool_loop, *(a for a in ACTIVITIES if a is not llm_call)]
    async with build_worker(client, task_queue, activities=activities):
        handle = await start(client, plan, task_queue, inputs)
        result = await asyncio.wait_for(run_outcome(handle), timeout=120)
    # A terminated run's coroutines stay cached in the worker until collected; collect them
    # here, not during pytest's teardown (where closing them raises outside the workflow loop).
    gc.collect()
    desc = await handle.describe()
    if desc.status == WorkflowExecutionStatus.TERMINATED:
        turns = (await activity_counts(handle))["llm_call"]
        reason = ""
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                reason = event.workflow_execution_terminated_event_attributes.reason
        raise AssertionError(
            f"the server terminated the run at model turn {turns} ({reason!r}): "
            f"{desc.history_length} events, {desc.raw_info.history_size_bytes:,} history bytes"
        )
    assert result is not None and result.state == "completed", result and result.reason
    assert result.outputs["explore"] == {"content": "listed the workspace 199 times"}
