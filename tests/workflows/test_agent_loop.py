"""A tool loop longer than its segment: the run takes the first ``segment_turns`` turns, an
``AgentLoop`` child the rest, continuing as new every segment (workflows/agent_loop.py).

The model is test_context_windows' fake agent on loopback (real ``llm_call``, real
``file_read``): tool turns reading ``notes.txt`` (``needle.txt`` on turn 3), then ``recall``
of ``t3.1`` — by then archived (runtime/context_carry.py): carried from one execution to the
next as one reference for a span of turns — then the answer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from armature_temporal.commands.run_view import loop_line
from armature_temporal.runtime.context import STUB_LINES
from armature_temporal.runtime.models import RunResult, RunStatus
from armature_temporal.service.client import decide_gate, run_outcome, show_run
from armature_temporal.store.engine import database_url
from armature_temporal.store.trace_store import TraceStore
from tests.fake_agent import fake_agent_serving, turn_of
from tests.fakes import assert_replays, plan_from, start, wait_for_gate
from tests.workflows.test_context_windows import (
    BUDGET,
    NEEDLE,
    RESERVE,
    SPEC,
    FakeAgent,
    by_turn,
    fake_agent_endpoint,
    workspace,
)
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

__all__ = ["fake_agent_endpoint", "workspace"]  # fixtures, used by name


async def history_counts(handle: WorkflowHandle[Any, Any]) -> tuple[int, int, dict[str, Any]]:
    """``(llm_call activities scheduled, child workflows started, the first event's input)``
    of the latest execution of ``handle``'s workflow."""
    calls = children = 0
    first: dict[str, Any] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            first = json.loads(payloads[0].data) if payloads else {}
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            calls += attrs.activity_type.name == "llm_call"
        elif event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            children += 1
    return calls, children, first


TURNS = 70


@pytest.fixture
def long_agent_endpoint() -> Iterator[tuple[str, FakeAgent]]:
    agent = FakeAgent(tool_turns=TURNS)
    with fake_agent_serving(agent) as base:
        yield base, agent


async def test_a_loop_past_its_segment_continues_in_a_child_and_recalls_across_executions(
    client: Client, task_queue: str, long_agent_endpoint: tuple[str, FakeAgent], workspace: Path
) -> None:
    base, agent = long_agent_endpoint
    spec = SPEC.replace("max_turns: 40", f"max_turns: {TURNS + 10}").format(
        base=base, budget=BUDGET, reserve=RESERVE, extra="segment_turns: 10", budget_line=""
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(spec), task_queue)
        result = await run_outcome(handle)
        events = await handle.query("events", 0)
        child = client.get_workflow_handle(f"{handle.id}.reader.a1.loop1")
        child_progress = await child.query("progress")  # a closed child answers from replay
    assert result is not None and result.state == "completed", result and result.reason
    # The needle read on turn 3 came back through recall on turn 71, from the message store:
    # the child's last execution held turn 3 only through an archive.
    assert NEEDLE in result.outputs["reader"]["content"]
    requests = by_turn(agent.requests)
    assert sorted(requests) == list(range(1, TURNS + 3))
    # The run took turns 1-10; one child took the rest, in executions of <= 10 turns.
    calls, children, _ = await history_counts(handle)
    assert (calls, children) == (10, 1)
    calls, _, first = await history_counts(child)
    assert first["segment"] == 7 and first["state"]["turn"] == TURNS
    assert calls == 2  # turn 71 (the recall) and the answer
    keeper = first["state"]["keeper"]
    carried = [t["number"] for t in keeper["turns"]]
    assert 3 not in carried and len(carried) <= STUB_LINES + 10  # archived; stubs, window
    assert keeper["archives"][0]["first"] == 1 and len(keeper["archives"][0]["ref"]) == 64
    spans = [(a["first"], a["last"]) for a in keeper["archives"]]
    assert all(b[0] > a[1] for a, b in itertools.pairwise(spans))
    # One chain for the run: the child's records sit between the run's, and it verifies.
    store = TraceStore(database_url())
    records = store.records(handle.id)
    assert [r.seq for r in records] == list(range(len(records)))
    checked, findings = store.verify([handle.id])
    assert checked == 1 and not findings, findings
    tools = [r for r in records if r.kind == "tool"]
    assert [r.data["tool"] for r in tools] == ["file_read"] * TURNS + ["recall"]
    assert tools[-1].output["handle"] == "t3.1" and tools[-1].status == "completed"
    # The attempt counts every turn, wherever it ran (the fake reports 10 + 5 a call).
    (attempt,) = [r for r in records if r.kind == "attempt"]
    assert (attempt.prompt_tokens, attempt.completion_tokens) == (
        10 * (TURNS + 2),
        5 * (TURNS + 2),
    )
    assert attempt.data["loop"]["turn"] == TURNS + 1
    # The run's events: each of its own turns, the hand-over (naming the child), the child's
    # report at the end of each execution (a loop_progress signal), then the last turn.
    progress = [e["data"] for e in events if e["type"] == "stage_progress"]
    assert [p["turn"] for p in progress] == [*range(1, 11), 10, 20, 30, 40, 50, 60, 70, 71]
    assert all(p["child"] == child.id for p in progress[10:-1])
    assert child_progress == result.stages["reader"].loop
    assert max(len(json.dumps(r)) for r in requests.values()) < (BUDGET + RESERVE) * 5
    await assert_replays(client, handle.id, child.id)


SPEC_GATED = (
    SPEC
    + """\
safety_rules:
  - tool: file_read
    condition: {{field: path, op: equals, value: needle.txt}}
    action: require_approval
    message: the needle is secret
"""
)


async def run_gated(
    client: Client, task_queue: str, base: str, decision: str
) -> tuple[WorkflowHandle[Any, RunResult], RunResult]:
    spec = SPEC_GATED.format(
        base=base, budget=BUDGET, reserve=RESERVE, extra="segment_turns: 2", budget_line=""
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(spec), task_queue)
        status = await wait_for_gate(handle, "reader#1", timeout_s=60)
        (gate,) = status.pending_gates
        assert "the needle is secret" in gate.message and gate.tool_call is not None
        assert gate.tool_call.args["path"] == "needle.txt"
        # A progress report forged while no child runs the loop (it handed it back) is refused.
        await handle.signal("loop_progress", {"stage": "reader", "progress": {"turn": 9999}})
        status = await handle.query("status", result_type=RunStatus)
        (refused,) = status.refused_signals
        assert refused.signal == "loop_progress" and "no tool loop running in a child" in (
            refused.reason
        )
        assert status.stages["reader"].loop["turn"] == 2
        await decide_gate(client, handle.id, "reader#1", decision, by="ops", comment="checked")
        result = await asyncio.wait_for(run_outcome(handle), timeout=120)
    assert result is not None
    return handle, result


async def test_a_tool_call_in_the_child_waits_at_the_runs_gate_and_runs_once_approved(
    client: Client, task_queue: str, fake_agent_endpoint: tuple[str, FakeAgent], workspace: Path
) -> None:
    base, agent = fake_agent_endpoint
    # Two turns a segment: the needle's read (turn 3) is the child's first call.
    handle, result = await run_gated(client, task_queue, base, "approve")
    assert result.state == "completed", result.reason
    assert NEEDLE in result.outputs["reader"]["content"]
    records = TraceStore(database_url()).records(handle.id)
    needle = [r for r in records if r.kind == "tool" and r.data["policy_action"] != "allow"]
    assert [(r.data["policy_action"], r.data["approved"]) for r in needle] == [
        ("require_approval", False),
        ("require_approval", True),
    ]
    (gate,) = [r for r in records if r.kind == "gate"]
    assert gate.stage_id == "reader#1" and gate.status == "approve"
    # The gate's record sits between the child's two records of the call.
    assert needle[0].seq < gate.seq < needle[1].seq
    assert sorted(by_turn(agent.requests)) == list(range(1, 33))
    await assert_replays(client, handle.id)


async def test_a_tool_call_rejected_at_the_runs_gate_is_an_error_the_model_reads(
    client: Client, task_queue: str, fake_agent_endpoint: tuple[str, FakeAgent], workspace: Path
) -> None:
    base, agent = fake_agent_endpoint
    handle, result = await run_gated(client, task_queue, base, "reject")
    assert result.state == "completed", result.reason
    told = json.loads(by_turn(agent.requests)[4]["messages"][-1]["content"])
    assert told["error_type"] == "policy_blocked"
    assert "rejected by ops: checked" in told["error"]
    assert NEEDLE not in result.outputs["reader"]["content"]
    (gate,) = [r for r in TraceStore(database_url()).records(handle.id) if r.kind == "gate"]
    assert gate.stage_id == "reader#1" and gate.status == "reject"


@dataclass
class HeldAgent(FakeAgent):
    """The fake agent, holding its answer to one turn's request until the test releases it."""

    hold_at: int = 15
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        if turn_of(request["messages"]) == self.hold_at and not self.release.is_set():
            self.reached.set()
            self.release.wait(timeout=60)
        return super().reply(request)


async def test_runs_show_reads_a_running_loops_progress_from_its_child(
    client: Client, task_queue: str, workspace: Path
) -> None:
    agent = HeldAgent(tool_turns=20)
    with fake_agent_serving(agent) as base:
        spec = SPEC.format(
            base=base, budget=BUDGET, reserve=RESERVE, extra="segment_turns: 10", budget_line=""
        )
        async with build_worker(client, task_queue):
            handle = await start(client, plan_from(spec), task_queue)
            try:
                assert await asyncio.to_thread(agent.reached.wait, 60), "turn 15 never asked"
                status = await handle.query("status", result_type=RunStatus)
                view = await show_run(client, handle.id)
            finally:
                agent.release.set()
            result = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert result is not None and result.state == "completed", result and result.reason
    child = f"{handle.id}.reader.a1.loop1"
    # The run heard of the hand-over only; the child, asked, is at turn 14 (turn 15 is asking).
    assert status.stages["reader"].loop == {**status.stages["reader"].loop, "turn": 10}
    loop = view.stages["reader"].loop
    assert loop is not None and loop["turn"] == 14 and loop["child"] == child
    assert loop_line(loop).startswith("turn 14/40") and loop_line(loop).endswith(f"in {child}")
