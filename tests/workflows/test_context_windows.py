"""A long tool loop under a context policy, end to end: the real ``llm_call`` activity (litellm
against ``fake_agent_endpoint``, an OpenAI-compatible server on loopback), real ``file_read``
tool calls, and the interpreter's window on a Temporal dev server.

The fake agent reads ``notes.txt`` (3 KB) turn after turn, reads ``needle.txt`` on turn 3,
writes a ``[pin]`` line on turn 5, and once it has made its tool turns asks ``recall`` for the
needle's result (handle ``t3.1``), then answers with what recall returned. Every request is
kept, so the test can check the window's size against the budget with litellm's counter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from armature_temporal.runtime.llm import import_litellm
from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import run_outcome
from armature_temporal.store.engine import database_url
from armature_temporal.store.trace_store import TraceStore
from tests.fake_agent import fake_agent_serving, text_reply, tool_call_reply, turn_of
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

NEEDLE = "The vault code is 7-1-9-3."
BUDGET = 3000
RESERVE = 512


@dataclass
class FakeAgent:
    tool_turns: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    summaries: int = 0
    #: Ask recall for a handle that does not exist first, then for t3.1.
    bad_recall_first: bool = False

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        system = str(messages[0].get("content", ""))
        if "Summarize these turns" in system or "Summarize these turns" in str(messages):
            self.summaries += 1
            told = NEEDLE if NEEDLE in json.dumps(messages) else "notes, nothing else"
            return text_reply(f"SUMMARY {self.summaries}: the agent read notes; {told}")
        self.requests.append(request)
        turn = turn_of(messages)
        tools = [t["function"]["name"] for t in request.get("tools", [])]
        if not tools:  # the loop's budget is spent: answer with what the last message said
            return text_reply(f"stopped after turn {turn - 1}: {messages[-1].get('content')}")
        if turn <= self.tool_turns:
            path = "needle.txt" if turn == 3 else "notes.txt"
            said = "[pin] remember: the build is red" if turn == 5 else None
            return tool_call_reply(turn, "file_read", {"path": path}, said)
        recall_turn = self.tool_turns + 1 + int(self.bad_recall_first)
        if self.bad_recall_first and turn == self.tool_turns + 1 and "recall" in tools:
            return tool_call_reply(turn, "recall", {"handle": "t99.9"})
        if turn == recall_turn and "recall" in tools:
            return tool_call_reply(turn, "recall", {"handle": "t3.1"})
        last = messages[-1]
        return text_reply(f"answer: {last.get('content')}")


@pytest.fixture
def fake_agent_endpoint() -> Iterator[tuple[str, FakeAgent]]:
    agent = FakeAgent(tool_turns=30)
    with fake_agent_serving(agent) as base:
        yield base, agent


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "notes.txt").write_text(
        " ".join(f"note{i} says the weather was mild." for i in range(90)), encoding="utf-8"
    )
    (root / "needle.txt").write_text(NEEDLE, encoding="utf-8")
    monkeypatch.setenv("ARMATURE_WORKSPACE", str(root))
    monkeypatch.setenv("FAKE_AGENT_KEY", "fake-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return root


SPEC = """\
name: long-reader
model_tiers:
  small:
    provider: openai
    model: gpt-4o-mini
    api_base: "{base}"
    api_key_env: FAKE_AGENT_KEY
  notes: {{provider: openai, model: gpt-4o-mini, api_base: "{base}", api_key_env: FAKE_AGENT_KEY}}
  sim: {{provider: simulate}}
context:
  token_budget: {budget}
  reply_reserve: {reserve}
  keep_recent: 2
  pin: [{{contains: "[pin]"}}]
  {extra}
stages:
  - id: reader
    role:
      description: Read notes.txt until you are done, then say what the needle file held.
      tools: [file_read]
      max_turns: 40
      {budget_line}
"""


async def run_reader(
    client: Client, task_queue: str, base: str, *, extra: str = "", budget_line: str = ""
) -> tuple[Any, RunResult, list[dict[str, Any]]]:
    """Run SPEC against the fake agent at ``base``; the handle, the (completed) result and the
    run's events."""
    spec = SPEC.format(
        base=base, budget=BUDGET, reserve=RESERVE, extra=extra, budget_line=budget_line
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(spec), task_queue)
        result = await run_outcome(handle)
        events = await handle.query("events", 0)
    assert result is not None and result.state == "completed", result and result.reason
    return handle, result, events


def compaction_notes(request: dict[str, Any]) -> list[str]:
    """The messages of a request that stand for the turns out of its window."""
    return [
        str(m.get("content"))
        for m in request["messages"]
        if "[Context compacted:" in str(m.get("content"))
    ]


def by_turn(requests: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each turn's request (the last, where an llm_call was retried and asked again)."""
    return {turn_of(r["messages"]): r for r in requests}


def window_tokens(request: dict[str, Any]) -> int:
    litellm = import_litellm()
    return int(litellm.token_counter(model="gpt-4o-mini", messages=request["messages"]))


async def test_a_long_loop_keeps_its_window_within_budget_and_recalls_a_dropped_result(
    client: Client, task_queue: str, fake_agent_endpoint: tuple[str, FakeAgent], workspace: Path
) -> None:
    base, agent = fake_agent_endpoint
    handle, result, _ = await run_reader(client, task_queue, base)
    # The needle from turn 3 came back through recall on turn 31, exactly.
    assert NEEDLE in result.outputs["reader"]["content"]
    requests = by_turn(agent.requests)
    assert sorted(requests) == list(range(1, 33))
    sizes = {turn: window_tokens(r) for turn, r in requests.items()}
    assert max(sizes.values()) <= BUDGET + RESERVE, sizes
    # Without a policy the 30 notes (about 800 tokens each) would be sent whole by the end.
    assert sizes[30] < 30 * 700 / 4, sizes
    first_tools = [t["function"]["name"] for t in requests[1]["tools"]]
    assert first_tools == ["file_read"]  # recall comes once something left the window
    last = requests[32]
    texts = [str(m.get("content")) for m in last["messages"]]
    assert any("[pin] remember: the build is red" in t for t in texts)  # pinned survives
    assert any("[Context compacted:" in t and "t3.1" in t for t in texts)

    store = TraceStore(database_url())
    records = store.records(handle.id)
    compactions = [r for r in records if r.kind == "context"]
    assert compactions and all(r.data["mode"] == "stubs" for r in compactions)
    assert all(r.data["window_tokens"] <= BUDGET for r in compactions)
    recalls = [r for r in records if r.kind == "tool" and r.data["tool"] == "recall"]
    assert len(recalls) == 1 and recalls[0].output["handle"] == "t3.1"
    # The attempt counts every turn's tokens (the fake reports 10 + 5 a call), not the last's.
    (attempt,) = [r for r in records if r.kind == "attempt"]
    assert (attempt.prompt_tokens, attempt.completion_tokens) == (320, 160)
    assert attempt.data["loop"]["turn"] == 31 and attempt.data["loop"]["compactions"] >= 5
    # The stored results travel by reference: the late turns' llm_call inputs stay small.
    inputs = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "llm_call":
                inputs.append(attrs.input.payloads[0].data)
    assert len(inputs) == 32 and b'"content_ref":"' in inputs[-3]
    assert max(len(i) for i in inputs) < 12_000, [len(i) for i in inputs]


async def test_a_summarize_tier_folds_the_turns_out_of_the_window_into_one_summary(
    client: Client, task_queue: str, fake_agent_endpoint: tuple[str, FakeAgent], workspace: Path
) -> None:
    base, agent = fake_agent_endpoint
    handle, _, _ = await run_reader(client, task_queue, base, extra="summarize: notes")
    assert agent.summaries >= 2
    sizes = [window_tokens(r) for r in agent.requests]
    assert max(sizes) <= BUDGET + RESERVE, sizes
    notes = compaction_notes(agent.requests[-1])
    # The latest summary folds in the earlier ones: the needle read on turn 3 is still in it.
    assert len(notes) == 1 and f"SUMMARY {agent.summaries}:" in notes[0] and NEEDLE in notes[0]
    records = TraceStore(database_url()).records(handle.id)
    summaries = [r for r in records if r.kind == "context" and r.tier == "notes"]
    assert len(summaries) == agent.summaries
    assert all(r.prompt_tokens == 10 and r.data["mode"] == "summary" for r in summaries)


@pytest.mark.parametrize(
    ("budget_line", "reason", "turns"),
    [
        # The fake reports 15 tokens a call: the 10th call spends 150.
        ("max_tokens_total: 150", "max_tokens_total 150 spent (150 tokens)", 10),
        ("deadline: 1ms", "deadline 0.001s passed", 1),
    ],
)
async def test_a_spent_budget_stops_the_loop_with_one_last_call_without_tools(
    client: Client,
    task_queue: str,
    fake_agent_endpoint: tuple[str, FakeAgent],
    workspace: Path,
    budget_line: str,
    reason: str,
    turns: int,
) -> None:
    base, agent = fake_agent_endpoint
    handle, result, events = await run_reader(client, task_queue, base, budget_line=budget_line)
    answer = result.outputs["reader"]["content"]
    assert answer.startswith(f"stopped after turn {turns}: [The tool loop's budget is spent: ")
    assert reason in answer
    assert "tools" not in agent.requests[-1]  # the last call offered none
    loop = result.stages["reader"].loop
    assert loop is not None and loop["turn"] == turns and reason in loop["stopped"]
    records = TraceStore(database_url()).records(handle.id)
    stops = [r for r in records if r.kind == "context" and r.data["event"] == "budget_stop"]
    assert len(stops) == 1 and reason in stops[0].data["reason"]
    progress = [e for e in events if e["type"] == "stage_progress"]
    # One per tool turn, then the stop (the last call's turn, with the reason).
    assert [e["data"]["turn"] for e in progress] == [*range(1, turns + 1), turns]
    assert "stopped" in progress[-1]["data"] and "stopped" not in progress[-2]["data"]


async def test_the_simulator_answers_a_summarize_tier(
    client: Client, task_queue: str, fake_agent_endpoint: tuple[str, FakeAgent], workspace: Path
) -> None:
    base, agent = fake_agent_endpoint
    handle, _, _ = await run_reader(client, task_queue, base, extra="summarize: sim")
    assert agent.summaries == 0  # the fake endpoint saw no summary request
    (note,) = compaction_notes(agent.requests[-1])
    assert "Summary of those turns: [simulated]" in note
    records = TraceStore(database_url()).records(handle.id)
    summaries = [r for r in records if r.kind == "context" and r.data["event"] == "compacted"]
    assert summaries and all(r.tier == "sim" and r.model == "simulate" for r in summaries)
    assert max(window_tokens(r) for r in agent.requests) <= BUDGET + RESERVE


async def test_recall_of_an_unknown_handle_is_an_error_the_model_reads_and_the_loop_goes_on(
    client: Client, task_queue: str, fake_agent_endpoint: tuple[str, FakeAgent], workspace: Path
) -> None:
    base, agent = fake_agent_endpoint
    agent.bad_recall_first = True
    handle, result, _ = await run_reader(client, task_queue, base)
    assert NEEDLE in result.outputs["reader"]["content"]  # the second recall found it
    # The request after the bad recall carries its error as the tool's answer.
    told = json.loads(by_turn(agent.requests)[32]["messages"][-1]["content"])
    assert told["error_type"] == "unknown_handle"
    assert "no tool result with handle 't99.9'" in told["error"] and "t30.1" in told["error"]
    records = TraceStore(database_url()).records(handle.id)
    recalls = [r for r in records if r.kind == "tool" and r.data["tool"] == "recall"]
    assert [r.status for r in recalls] == ["failed", "completed"]
    assert recalls[0].error_type == "tool_error" and "t99.9" in (recalls[0].error or "")
