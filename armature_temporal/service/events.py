"""Following a run's events as they happen: :func:`follow_events` for one reader, and
:class:`EventHub` so that many readers of one run in one process share one follower.

The source is the run's own event log (the interpreter's ``events`` query, see
:class:`~armature_temporal.runtime.models.RunEvent`): its ``seq`` numbers are fixed by the
run's history, so a reader that comes back with the last ``seq`` it saw — after a dropped
connection or a restarted server — gets exactly the events it missed, none twice. Nothing is
kept in this process that a restart would lose.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError

from armature_temporal.errors import ArmatureError
from armature_temporal.runtime.events import FINAL_EVENTS, inline_output
from armature_temporal.runtime.models import RunEvent, RunResult
from armature_temporal.service.client import describe_run, run_outcome, run_status

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

__all__ = ["EventHub", "EventsUnavailable", "derived_events", "follow_events"]

#: How long one ``events`` query waits for a worker to answer.
QUERY_TIMEOUT_S = 5.0
#: The longest the follower waits for new history before asking the run again anyway.
REQUERY_S = 15.0


class EventsUnavailable(ArmatureError):
    """The run cannot answer the ``events`` query (not an Armature run, or its worker runs an
    Armature from before run events)."""


async def follow_events(
    client: Client, run_id: str, *, after: int = 0
) -> AsyncGenerator[RunEvent, None]:
    """The run's events with ``seq`` greater than ``after``, as they happen; the iterator ends
    after ``run_complete`` or ``run_failed``.

    A long poll on the run's history (``fetch_history_events(wait_new_event=True)``) wakes
    the follower as soon as the run does anything; it then asks the run for the events after
    the last one it gave. While the run waits (on a gate, or for a worker) nothing is polled
    but the one long poll.

    A closed run answers the query from a worker's replay of its history. When no worker
    answers for a closed run, its events are *derived* from its result (see
    :func:`derived_events`): each carries ``data["derived"] = True``, and their ``seq``
    numbers may differ from the live log's (the log's gate_waiting events and the order of
    stages that ran at the same time are not in the result). A run that ended without a final
    event in its log (terminated, timed out) gets a ``run_failed`` with the next ``seq``.

    Raises:
        RunNotFound: no run ``run_id``.
        EventsUnavailable: the run cannot answer the ``events`` query.
    """
    await describe_run(client, run_id)
    handle = client.get_workflow_handle(run_id, result_type=RunResult)
    woke = asyncio.Event()

    async def watch_history() -> None:
        try:
            async for _ in handle.fetch_history_events(wait_new_event=True):
                woke.set()
        finally:
            woke.set()

    waker = asyncio.create_task(watch_history(), name=f"history of {run_id}")
    last = after
    try:
        while True:
            woke.clear()
            closed = waker.done()  # before the query: a closed run's answer is its last
            if closed and not waker.cancelled() and waker.exception() is not None:
                raise waker.exception()  # type: ignore[misc]
            # From the one before the last given: a log whose final event the reader
            # already has answers with it, and the follower knows the run is over.
            events = await _events_after(handle, max(last - 1, 0), closed, last=last)
            if events is None:  # a running run nobody answers for: wait for a worker
                await _wait(woke, REQUERY_S)
                continue
            for event in events:
                if event.seq > last:
                    yield event
                    last = event.seq
                if event.type in FINAL_EVENTS:
                    return
            if closed:
                if not events and last > 0 and await _ended_by(handle, last):
                    return  # ``after`` is past the log's final event: nothing more to give
                yield await _final_event(handle, run_id, last)
                return
            await _wait(woke, REQUERY_S)
    finally:
        waker.cancel()
        with contextlib.suppress(asyncio.CancelledError, RPCError):
            await waker


async def _events_after(
    handle: WorkflowHandle[Any, Any], after: int, closed: bool, *, last: int
) -> list[RunEvent] | None:
    """The run's events after ``after``; None when no worker answered for a running run.
    Derived events (a closed run nobody replays) are those after ``last``, the reader's."""
    try:
        events: list[RunEvent] = await handle.query(
            "events",
            after,
            result_type=list[RunEvent],
            rpc_timeout=timedelta(seconds=QUERY_TIMEOUT_S),
        )
        return events
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
        raise EventsUnavailable(
            f"run {handle.id!r} did not answer its events query ({exc}); it is not an Armature "
            "run, or its worker runs an Armature from before run events: upgrade the worker "
            "(`armature worker`) and try again"
        ) from None
    except RPCError:
        if not closed:
            return None
    desc = await handle.describe()
    result = await run_outcome(handle) if desc.status != WorkflowExecutionStatus.RUNNING else None
    closed_at = desc.close_time.isoformat() if desc.close_time else ""
    derived = derived_events(handle.id, result, run_status(desc.status), closed_at)
    return _renumbered_final(derived, last)


def _renumbered_final(events: list[RunEvent], last: int) -> list[RunEvent]:
    """Derived events after ``last``; the final one always among them (its ``seq`` moved
    past ``last`` when the derived log is shorter than what the reader already saw)."""
    rest = [e for e in events if e.seq > last]
    if events and not rest:
        rest = [events[-1].model_copy(update={"seq": last + 1})]
    return rest


async def _ended_by(handle: WorkflowHandle[Any, Any], seq: int) -> bool:
    """Whether the closed run's own log has its final event at or before ``seq`` (a reader
    asking after the end gets nothing, not an invented ``run_failed``)."""
    events = await _events_after(handle, 0, True, last=0) or []
    return bool(events) and events[-1].type in FINAL_EVENTS and events[-1].seq <= seq


async def _final_event(handle: WorkflowHandle[Any, Any], run_id: str, last: int) -> RunEvent:
    """The ``run_failed`` of a closed run whose log has no final event (terminated, timed
    out, continued as new): from its description, with the next ``seq``."""
    desc = await handle.describe()
    status = run_status(desc.status)
    return RunEvent(
        seq=last + 1,
        type="run_failed",
        run_id=run_id,
        at=desc.close_time.isoformat() if desc.close_time else "",
        data={"status": status, "reason": f"the run ended {status}", "derived": True},
    )


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)


def derived_events(
    run_id: str, result: RunResult | None, status: str, closed_at: str
) -> list[RunEvent]:
    """A closed run's events rebuilt from its result, for when no worker can replay it: per
    stage that ran, stage_start, gate_decided (if it had a gate) and stage_complete, in time
    order; then run_complete or run_failed. Without a result (terminated, timed out) only the
    final event. Each has ``data["derived"] = True``."""
    rows: list[tuple[str, int, str, str | None, dict[str, Any]]] = []
    order = 0

    def add(at: str | None, type_: str, stage: str | None, data: dict[str, Any]) -> None:
        nonlocal order
        rows.append((at or closed_at, order, type_, stage, {**data, "derived": True}))
        order += 1

    if result is not None:
        for sid, stage in result.stages.items():
            if stage.started_at is None:
                continue
            add(stage.started_at, "stage_start", sid, {})
            if stage.gate is not None:
                gate = stage.gate
                add(
                    stage.finished_at,
                    "gate_decided",
                    sid,
                    {"decision": gate.decision, "by": gate.by, "comment": gate.comment},
                )
            data: dict[str, Any] = {
                "status": stage.status,
                **inline_output("output", stage.output, run_id),
            }
            if stage.error is not None:
                data.update(error=stage.error, error_type=stage.error_type)
            add(stage.finished_at, "stage_complete", sid, data)
    rows.sort(key=lambda row: (row[0], row[1]))
    state = result.state if result is not None else status
    if state == "completed" and result is not None:
        final: tuple[str, dict[str, Any]] = (
            "run_complete",
            {"status": state, **inline_output("outputs", result.outputs, run_id)},
        )
    else:
        reason = result.reason if result is not None else f"the run ended {status}"
        final = ("run_failed", {"status": state, "reason": reason})
    rows.append((closed_at, order, final[0], None, {**final[1], "derived": True}))
    return [
        RunEvent.model_validate(
            {"seq": i, "type": t, "run_id": run_id, "stage": s, "at": at, "data": d}
        )
        for i, (at, _, t, s, d) in enumerate(rows, start=1)
    ]


class EventHub:
    """Many readers of one run, one follower: the first :meth:`subscribe` for a run starts a
    :func:`follow_events` from the beginning, later ones read the same events, and the
    follower stops when its last reader leaves. So 200 streams of one run cost one history
    long poll and one query per change, not 200.

    One hub per process and event loop (the run API keeps it on its service state).
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._feeds: dict[str, _Feed] = {}
        #: How many followers this hub has started (tests and benchmarks read it).
        self.followers_started = 0

    def followers(self) -> int:
        """Runs followed right now."""
        return len(self._feeds)

    async def subscribe(self, run_id: str, *, after: int = 0) -> AsyncGenerator[RunEvent, None]:
        """The run's events after ``after``, as :func:`follow_events` gives them (and with
        the same errors)."""
        feed = self._feeds.get(run_id)
        if feed is None or (feed.done and feed.error is not None):
            feed = _Feed(self._client, run_id)
            self._feeds[run_id] = feed
            self.followers_started += 1
        feed.readers += 1
        try:
            async for event in feed.read(after):
                yield event
        finally:
            feed.readers -= 1
            if feed.readers == 0:
                feed.stop()
                if self._feeds.get(run_id) is feed:
                    del self._feeds[run_id]


class _Feed:
    """One run's follower and every event it has given so far (from seq 1)."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.events: list[RunEvent] = []
        self.readers = 0
        self.done = False
        self.error: BaseException | None = None
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._follow(client, run_id), name=f"events of {run_id}")

    async def _follow(self, client: Client, run_id: str) -> None:
        try:
            async for event in follow_events(client, run_id):
                self.events.append(event)
                self._wake()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every reader gets it
            self.error = exc
        finally:
            self.done = True
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def stop(self) -> None:
        self._task.cancel()

    async def read(self, after: int) -> AsyncGenerator[RunEvent, None]:
        pos = 0
        while True:
            while pos < len(self.events):
                event = self.events[pos]
                pos += 1
                if event.seq > after:
                    yield event
                    if event.type in FINAL_EVENTS:
                        return
            if self.done:
                if self.error is not None:
                    raise self.error
                return
            await self._changed.wait()
