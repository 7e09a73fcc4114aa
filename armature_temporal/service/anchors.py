"""The trace record's anchors in Temporal, from the client side: workers send the ledger's new
heads to its ``LedgerAnchor`` workflow, and ``armature traces verify`` reads the anchors back
(each run's memo, and the ledger's heads from the anchor workflow's history).

Sending never holds a run up: :meth:`LedgerAnchorSender.note` keeps the newest head and returns
at once; one background task per anchor sends it (``signal-with-start``: the first head starts
the workflow, pinning the store id and genesis) after :data:`LINGER`, so heads that arrive
meanwhile, or while one is in flight, collapse into one (:meth:`~LedgerAnchorSender.drain`
sends at once: a stopping worker). A head that cannot be sent (Temporal unreachable) waits for
the next note; a lost head can only leave the anchor behind, which verify reports, never a
false "intact".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from armature_temporal.runtime.ledger_anchor import (
    HEAD_SIGNAL,
    LEDGER_ANCHOR_QUEUE,
    LEDGER_ANCHOR_WORKFLOW,
    LedgerAnchorState,
    LedgerHead,
    advance,
    ledger_anchor_id,
)
from armature_temporal.runtime.traces import CHAIN_MEMO
from armature_temporal.service.client import WORKFLOW_NAME
from armature_temporal.store.tamper import Anchor, LedgerAnchorReading

__all__ = [
    "LedgerAnchorSender",
    "read_ledger_anchor",
    "read_run_anchors",
]

_log = logging.getLogger(__name__)
#: How long one send may wait for the server.
SEND_TIMEOUT = timedelta(seconds=10)
#: How long a noted head waits for newer ones before it is sent (one signal for many appends).
LINGER = timedelta(seconds=1)

_Pending = tuple[LedgerAnchorState, LedgerHead, Callable[[int], int] | None]


class LedgerAnchorSender:
    """Sends ledger heads to their anchor workflows through ``client``, in the background."""

    def __init__(self, client: Client, task_queue: str = LEDGER_ANCHOR_QUEUE) -> None:
        self.client = client
        self.task_queue = task_queue
        self._pending: dict[str, _Pending] = {}
        self._sent: dict[str, tuple[str, int]] = {}  # anchor id -> (store id, seq) sent
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._hurry = asyncio.Event()  # set by drain(): send without lingering

    def note(
        self,
        start: LedgerAnchorState,
        head: LedgerHead,
        runs: Callable[[int], int] | None = None,
    ) -> None:
        """Send ``head`` to the anchor of ``start.database`` (started with ``start`` if it is
        not running) unless a newer head of the same store was sent or is waiting.
        ``runs(seq)`` counts the runs started up to ``seq`` (called in a thread before
        sending). Returns at once; call from the event loop."""
        wid = ledger_anchor_id(start.database)
        for seen in (self._sent.get(wid), _key(self._pending.get(wid))):
            if seen is not None and seen[0] == head.store_id and seen[1] >= head.seq:
                return
        self._pending[wid] = (start, head, runs)
        task = self._tasks.get(wid)
        if task is None or task.done():
            self._tasks[wid] = asyncio.get_running_loop().create_task(self._drain(wid))

    async def drain(self) -> None:
        """Send every head noted so far now, and wait until each was sent (or failed to be)."""
        self._hurry.set()
        try:
            while busy := [t for t in self._tasks.values() if not t.done()]:
                await asyncio.gather(*busy)
        finally:
            self._hurry.clear()

    async def _drain(self, wid: str) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._hurry.wait(), LINGER.total_seconds())
        while (item := self._pending.pop(wid, None)) is not None:
            start, head, runs = item
            if runs is not None:
                head = head.model_copy(update={"runs": await asyncio.to_thread(runs, head.seq)})
            try:
                await self.client.start_workflow(
                    LEDGER_ANCHOR_WORKFLOW,
                    start,
                    id=wid,
                    task_queue=self.task_queue,
                    start_signal=HEAD_SIGNAL,
                    start_signal_args=[head],
                    rpc_timeout=SEND_TIMEOUT,
                )
            except RPCError as exc:
                _log.warning(
                    "could not send ledger head %d of store %s to its Temporal anchor %s (%s: "
                    "%s); the next append sends it again",
                    head.seq,
                    head.store_id,
                    wid,
                    exc.status.name,
                    exc.message,
                )
                self._pending.setdefault(wid, item)
                return
            sent = self._sent.get(wid)
            if sent is None or sent[0] != head.store_id or sent[1] < head.seq:
                self._sent[wid] = (head.store_id, head.seq)


def _key(item: _Pending | None) -> tuple[str, int] | None:
    return None if item is None else (item[1].store_id, item[1].seq)


async def read_ledger_anchor(client: Client, database: str) -> LedgerAnchorReading:
    """The heads Temporal received for the ledger of ``database`` (its identity), folded from
    the anchor workflow's history as the workflow folds them (no worker needs to run).

    Raises:
        RPCError: The server did not answer (other than "no such workflow").
    """
    wid = ledger_anchor_id(database)
    handle = client.get_workflow_handle(wid)
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return LedgerAnchorReading(
            workflow_id=wid,
            absent="no such workflow: the ledger began before Armature anchored ledgers, no "
            "worker has sent it a head yet (or none could reach Temporal), or the workers "
            "reach this database under another URL than this command (ARMATURE_DB_URL)",
        )
    if described.status not in (None, WorkflowExecutionStatus.RUNNING):
        status = described.status.name.lower()
        return LedgerAnchorReading(
            workflow_id=wid,
            absent=f"its latest run is {status} (someone ended it), so it anchors nothing; the "
            "next run's worker starts a new one",
        )
    state: LedgerAnchorState | None = None
    history = await handle.fetch_history()
    convert = client.data_converter
    for event in history.events:
        if event.HasField("workflow_execution_started_event_attributes"):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [state] = await convert.decode(list(payloads), [LedgerAnchorState])
        elif event.HasField("workflow_execution_signaled_event_attributes"):
            signal = event.workflow_execution_signaled_event_attributes
            if signal.signal_name != HEAD_SIGNAL or state is None:
                continue
            try:
                [head] = await convert.decode(list(signal.input.payloads), [LedgerHead])
            except (ValueError, TypeError):
                continue  # not a head: the workflow drops it too
            at = event.event_time.ToDatetime(tzinfo=UTC).isoformat()
            state = advance(state, head, at)
    return LedgerAnchorReading(
        workflow_id=wid, state=state, absent=None if state else "its history holds no state"
    )


async def read_run_anchors(client: Client, run_id: str | None = None) -> dict[str, Anchor]:
    """The chain anchors in the RunSpec workflows' memos (all, or ``run_id``'s).

    Raises:
        RPCError: The server did not answer.
    """

    def anchor(memo: Any) -> Anchor | None:
        value = memo.get(CHAIN_MEMO) if isinstance(memo, dict) else None
        return Anchor.model_validate(value) if isinstance(value, dict) else None

    anchors: dict[str, Anchor] = {}
    if run_id is not None:
        try:
            described = await client.get_workflow_handle(run_id).describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
        else:
            if (found := anchor(dict(await described.memo()))) is not None:
                anchors[run_id] = found
        return anchors
    async for execution in client.list_workflows(f"WorkflowType = '{WORKFLOW_NAME}'"):
        found = anchor(dict(await execution.memo()))
        if found is not None:
            anchors.setdefault(execution.id, found)
    return anchors
