"""A run's own event log (the ``events`` query) and its followers: ``follow_events`` and the
``EventHub``, against a real dev server. The log is proved deterministic twice over: the run's
history replays from the start in the strict sandbox, and a worker with no cache answers the
closed run's query from a replay with the same events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunEvent
from armature_temporal.service.client import RunNotFound, decide_gate, run_outcome
from armature_temporal.service.events import EventHub, follow_events
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, assert_replays, plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _collect(events: Any, until: str | None = None) -> list[RunEvent]:
    got: list[RunEvent] = []
    async for event in events:
        got.append(event)
        if event.type == until:
            break
    return got


async def _until_gate(client: Client, run_id: str) -> list[RunEvent]:
    """The run's events up to its first gate_waiting (a reader that then leaves)."""
    return await asyncio.wait_for(_collect(follow_events(client, run_id), until="gate_waiting"), 30)


def _dump(events: list[RunEvent]) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json") for e in events]


async def test_a_gated_run_is_followed_in_order_and_a_reconnect_gets_exactly_the_rest(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        follower = asyncio.create_task(_collect(follow_events(client, handle.id)))
        before_gate = await _until_gate(client, handle.id)
        assert before_gate[-1].stage == "approve_reply"
        assert (
            before_gate[-1].data["message"]
            and "Send this reply?" in before_gate[-1].data["message"]
        )
        await decide_gate(client, handle.id, "approve_reply", "approve", comment="ok", by="ann")
        live = await asyncio.wait_for(follower, 60)
        assert (await handle.result()).state == "completed"

        assert [e.seq for e in live] == list(range(1, len(live) + 1))  # gapless, from 1
        assert _dump(live[: len(before_gate)]) == _dump(before_gate)
        kinds = [(e.type, e.stage) for e in live]
        assert kinds[0] == ("stage_start", "analyze")
        assert kinds[-1] == ("run_complete", None)
        waiting = kinds.index(("gate_waiting", "approve_reply"))
        decided = kinds.index(("gate_decided", "approve_reply"))
        assert waiting < decided < kinds.index(("stage_complete", "approve_reply"))
        assert live[decided].data == {"decision": "approve", "by": "ann", "comment": "ok"}
        for sid in [s.id for s in plan.stages]:
            assert kinds.index(("stage_start", sid)) < kinds.index(("stage_complete", sid))
        analyze = next(e for e in live if e.type == "stage_complete" and e.stage == "analyze")
        assert analyze.data["status"] == "completed" and isinstance(analyze.data["output"], dict)
        assert live[-1].data["outputs"]["refine"] == (await handle.result()).outputs["refine"]

        # A reader that saw k events and comes back (even to the closed run) gets the rest.
        for k in (0, 1, len(before_gate), len(live) - 1):
            rest = await asyncio.wait_for(_collect(follow_events(client, handle.id, after=k)), 30)
            assert _dump(rest) == _dump(live[k:])
        assert await _collect(follow_events(client, handle.id, after=len(live))) == []
    await assert_replays(client, handle.id)


async def test_the_log_of_a_closed_run_is_the_same_on_a_worker_that_replays_it(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        first = asyncio.create_task(_collect(follow_events(client, handle.id)))
        await _until_gate(client, handle.id)
        await decide_gate(client, handle.id, "approve_reply", "approve")
        live = await asyncio.wait_for(first, 60)
    # A new worker with no cache answers the closed run's query from a replay of its history.
    async with build_worker(client, task_queue, max_cached_workflows=0):
        replayed = await asyncio.wait_for(_collect(follow_events(client, handle.id)), 30)
    assert _dump(replayed) == _dump(live)
    assert not any("derived" in e.data for e in replayed)


async def test_a_new_hub_after_a_server_restart_resumes_by_seq(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        old_hub = EventHub(client)  # the first server process
        seen = await asyncio.wait_for(
            _collect(old_hub.subscribe(handle.id), until="gate_waiting"), 30
        )
        assert old_hub.followers() == 0  # its only reader left: the follower stopped
        # The gate is decided while no server is up; a new one resumes after the last seq.
        await decide_gate(client, handle.id, "approve_reply", "approve")
        new_hub = EventHub(client)
        rest = await asyncio.wait_for(
            _collect(new_hub.subscribe(handle.id, after=seen[-1].seq)), 30
        )
        everything = await _collect(follow_events(client, handle.id))
    assert _dump(seen + rest) == _dump(everything)
    assert rest[0].seq == seen[-1].seq + 1 and rest[-1].type == "run_complete"


async def test_many_readers_of_one_run_share_one_follower(client: Client, task_queue: str) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        hub = EventHub(client)
        readers = [asyncio.create_task(_collect(hub.subscribe(handle.id))) for _ in range(50)]
        late = asyncio.create_task(_collect(hub.subscribe(handle.id, after=2)))
        await _until_gate(client, handle.id)
        await decide_gate(client, handle.id, "approve_reply", "approve")
        got = await asyncio.wait_for(asyncio.gather(*readers), 60)
        tail = await asyncio.wait_for(late, 30)
    assert hub.followers_started == 1 and hub.followers() == 0
    assert all(_dump(g) == _dump(got[0]) for g in got)
    assert got[0][-1].type == "run_complete"
    assert _dump(tail) == _dump(got[0][2:])


async def test_a_rejected_run_ends_with_run_failed(client: Client, task_queue: str) -> None:
    plan = plan_from("""\
name: events-reject
model_tiers: {small: {provider: simulate}}
stages:
  - {id: ok, gate: {type: human, message: proceed?}}
  - {id: after, depends_on: [ok], role: {name: A, description: x}}
""")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await _until_gate(client, handle.id)
        await decide_gate(client, handle.id, "ok", "reject", comment="no", by="bo")
        events = await asyncio.wait_for(_collect(follow_events(client, handle.id)), 30)
    assert [(e.type, e.stage) for e in events] == [
        ("stage_start", "ok"),
        ("gate_waiting", "ok"),
        ("gate_decided", "ok"),
        ("stage_complete", "ok"),
        ("run_failed", None),
    ]
    assert events[3].data["status"] == "rejected"
    assert events[-1].data["status"] == "rejected" and "no" in events[-1].data["reason"]


async def test_a_terminated_run_ends_with_a_run_failed_after_its_last_event(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        seen = await _until_gate(client, handle.id)
        await handle.terminate("test")
        events = await asyncio.wait_for(_collect(follow_events(client, handle.id)), 30)
    assert _dump(events[:-1]) == _dump(seen)
    assert events[-1].seq == seen[-1].seq + 1
    assert events[-1].type == "run_failed" and events[-1].data["status"] == "terminated"


async def test_a_closed_run_no_worker_answers_for_gets_events_derived_from_its_result(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import armature_temporal.service.events as events_module

    monkeypatch.setattr(events_module, "QUERY_TIMEOUT_S", 1.0)
    plan = load_plan(SPECS / "quickstart.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"topic": "events"})
        await handle.result()
    events = await asyncio.wait_for(_collect(follow_events(client, handle.id)), 60)
    result = await run_outcome(handle)
    assert result is not None
    assert all(e.data.get("derived") is True for e in events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "run_complete" and events[-1].data["outputs"] == result.outputs
    assert {e.stage for e in events if e.type == "stage_complete"} == set(result.stages)


async def test_following_an_unknown_run_says_so(client: Client) -> None:
    with pytest.raises(RunNotFound, match="no run 'nope-123'"):
        await _collect(follow_events(client, "nope-123"))
