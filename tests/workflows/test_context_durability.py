"""A context-managed tool loop survives its workers being SIGKILLed mid-call.

Real worker processes (``tests/worker_process.py``) against the session dev server; the model is
``fake_agent_serving`` on loopback, whose agent calls the ledger tool
(``tests/tool_modules/chaos_ledger.py``: each call appends one line to a file) on every turn.
The agent holds a model request open and the test SIGKILLs the worker that sent it, then starts
a fresh one: the loop must finish, every tool call must have run exactly once (one ledger
line per turn), and the last window must be the transcript's newest turns, without a gap —
across the loop's move from the run's own history into its AgentLoop child and the child's
continue-as-new (one kill on each side of that move).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.fake_agent import fake_agent_serving, text_reply, tool_call_reply, turn_of
from tests.fakes import plan_from, start
from tests.workflows.test_durability import FINISH_S, address_of, wait_until, worker_process

pytestmark = pytest.mark.asyncio(loop_scope="session")

LEDGER_TOOL = "tests.tool_modules.chaos_ledger:chaos_append"
TURNS = 24
#: Turns whose model request is held open while the test kills the worker that sent it (each
#: kill costs the suite the llm_call's 10 s heartbeat timeout and a worker start): one in the
#: run's own segment of the loop, one in the AgentLoop child's first execution.
KILL_AT = (5, 12)
#: Turns a workflow execution takes: the run 1-8, the child 9-16, 17-24, then the answer.
SEGMENT = 8

SPEC = """\
name: durable-reader
model_tiers:
  small: {{provider: openai, model: gpt-4o-mini, api_base: "{base}", api_key_env: FAKE_AGENT_KEY}}
context: {{token_budget: 700, keep_recent: 3, segment_turns: {segment}}}
stages:
  - id: agent
    role:
      description: Append to the ledger {turns} times, then say done.
      tools: ["{tool}"]
      max_turns: 60
"""


class LedgerAgent:
    """Calls the ledger tool on turns 1..TURNS, then answers; holds the first request for each
    turn in KILL_AT until the test has killed its worker (the retry is answered at once)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.held = {turn: threading.Event() for turn in KILL_AT}
        self.released = {turn: threading.Event() for turn in KILL_AT}
        self.last: dict[str, Any] = {}

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        turn = turn_of(messages)
        if turn in self.held and not self.held[turn].is_set():
            self.held[turn].set()
            self.released[turn].wait(timeout=60)
            raise ConnectionError("the worker that asked is dead")
        self.last = request
        if turn <= TURNS:
            return tool_call_reply(turn, LEDGER_TOOL, {"run_id": self.run_id, "stage": "agent"})
        return text_reply(f"done after {turn - 1} turns")


async def test_a_compacted_loop_resumes_after_its_worker_is_killed_and_runs_each_tool_once(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("ARMATURE_CHAOS_LEDGER", str(ledger))
    monkeypatch.setenv("FAKE_AGENT_KEY", "fake-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    run_id = f"durable-reader-{int(time.time() * 1000)}"
    agent = LedgerAgent(run_id)
    address = address_of(temporal_env)
    with fake_agent_serving(agent) as base:
        plan = plan_from(SPEC.format(base=base, turns=TURNS, tool=LEDGER_TOOL, segment=SEGMENT))
        async with contextlib.AsyncExitStack() as stack:
            worker = await stack.enter_async_context(
                worker_process(address, task_queue, tmp_path / "w0")
            )
            handle = await start(client, plan, task_queue, run_id=run_id)
            for n, turn in enumerate(KILL_AT, start=1):
                await wait_until(agent.held[turn].is_set, f"turn {turn}'s request", timeout=60)
                await worker.crash()
                agent.released[turn].set()
                worker = await stack.enter_async_context(
                    worker_process(address, task_queue, tmp_path / f"w{n}")
                )
            result = await asyncio.wait_for(handle.result(), timeout=FINISH_S * len(KILL_AT))
    assert result.state == "completed", result.reason
    assert result.outputs["agent"] == {"content": f"done after {TURNS} turns"}
    lines = [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == TURNS and {line["run_id"] for line in lines} == {run_id}
    assert len({line["pid"] for line in lines}) == len(KILL_AT) + 1  # each worker took part
    # The last window: the compaction note, then the newest turns in order, none missing.
    window = agent.last["messages"]
    note = next(m["content"] for m in window if "[Context compacted:" in str(m.get("content")))
    kept = [
        int(c["id"].removeprefix("call_"))
        for m in window
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    assert kept == list(range(kept[0], TURNS + 1)) and len(kept) >= 1
    assert f"turns 1-{kept[0] - 1} ({kept[0] - 1} turns) are out of this window" in note
    assert result.stages["agent"].loop is not None
    assert result.stages["agent"].loop["turn"] == TURNS
    # The loop crossed into its child, which continued as new once per segment.
    child = client.get_workflow_handle(f"{run_id}.agent.a1.loop1")
    async for event in child.fetch_history_events():
        started = event.workflow_execution_started_event_attributes
        assert json.loads(started.input.payloads[0].data)["segment"] == 3
        break
