"""The record against Temporal's copy: each run's chain head (its workflow's memo) and the
store-wide ledger's head (the ``LedgerAnchor`` workflow, :mod:`~armature_temporal.runtime.
ledger_anchor`).

Threat: someone holds the trace key and can write the database, but cannot rewrite Temporal's
history. Everything inside the database can then be made consistent; only Temporal's copy
shows the rewrite. So a check that could not read Temporal's copy proves nothing: the run is
``unanchored``, never ``intact``.

What the ledger's anchor proves: the database's ledger up to the newest head Temporal holds
(entry ``n``) is the one the workers wrote (the hash of entry ``n`` commits to entries
``0..n``), so no run that started or ended by then was deleted, and each run that ended by then
has the chain head and record count its ``run_end`` entry recorded. Entries past ``n`` (a head
still on its way, or lost) are proven by their runs' own workflow memos while Temporal keeps
them; a ledger that stays behind longer than :data:`ANCHOR_GRACE` is ``stale``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from armature_temporal.runtime.ledger_anchor import LedgerAnchorState
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.store._audit import (
    Anchor,
    Finding,
    LedgerAnchorCheck,
    LedgerAnchorReading,
    LedgerAnchorStatus,
    RunCheck,
)
from armature_temporal.store.ledger import LedgerEntry, LedgerState

__all__ = ["ANCHOR_GRACE", "check_ledger_anchor", "check_run_anchor"]

#: How long the database's ledger may run ahead of the head Temporal last received (heads are
#: sent after each append, off the run's path) before verify calls the anchor stale.
ANCHOR_GRACE = timedelta(minutes=10)


def _at(value: str) -> datetime:
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _finding(problem: str, detail: str, seq: int | None = None) -> Finding:
    return Finding(run_id=None, check="ledger_anchor", seq=seq, problem=problem, detail=detail)


def check_ledger_anchor(
    state: LedgerState, reading: LedgerAnchorReading | None, unread: str | None, now: datetime
) -> tuple[LedgerAnchorCheck, list[Finding]]:
    """The database's ledger ``state`` against Temporal's anchor (``reading``; None: Temporal
    was not read, ``unread`` says why), at ``now``. Returns the check and what failed."""
    entries = state.entries
    if reading is None:
        why = unread or "Temporal was not asked"
        return LedgerAnchorCheck(
            status="unanchored", detail=f"not compared with Temporal: {why}", entries=len(entries)
        ), []
    wid = reading.workflow_id
    anchor = reading.state
    if anchor is None:
        if not entries:
            return LedgerAnchorCheck(
                status="empty",
                detail=f"the ledger has not begun, and Temporal anchors none for this database "
                f"(workflow {wid})",
                workflow_id=wid,
            ), []
        return LedgerAnchorCheck(
            status="unanchored",
            detail=f"Temporal has no anchor for this database's ledger (workflow {wid}): "
            f"{reading.absent}",
            workflow_id=wid,
            entries=len(entries),
        ), []
    return _against(state, anchor, wid, now)


def _against(
    state: LedgerState, anchor: LedgerAnchorState, wid: str, now: datetime
) -> tuple[LedgerAnchorCheck, list[Finding]]:
    head = anchor.head
    base = LedgerAnchorCheck(
        status="failed",
        detail="",
        workflow_id=wid,
        entries=len(state.entries),
        anchored_seq=head.seq if head is not None else None,
        anchored_at=head.received_at if head is not None else None,
    )
    found = _tampered(state, anchor, wid)
    if found is not None:
        problem, detail, seq = found
        reset = (
            f". If you replaced or restored the database yourself, end the old anchor with "
            f"`temporal workflow terminate --workflow-id {wid}`: the next run anchors the "
            "ledger the database holds now"
        )
        return _is(base, "failed", detail), [_finding(problem, detail + reset, seq)]
    if head is None:
        detail = f"Temporal's anchor for this ledger (workflow {wid}) holds no head yet"
        return _is(base, "unanchored", detail), []
    last = state.entries[-1].seq
    behind = last - head.seq
    if behind <= 0:
        detail = (
            f"anchored in Temporal up to its last entry ({last}), received {head.received_at} "
            f"(workflow {wid})"
        )
        return _is(base, "ok", detail), []
    age = now - _at(head.received_at)
    stale = age > ANCHOR_GRACE
    detail = (
        f"anchored in Temporal up to entry {head.seq} of {last} (workflow {wid}): {behind} "
        f"entr{'y' if behind == 1 else 'ies'} past it, and Temporal received that head "
        f"{_ago(age)} ago"
        + (
            f", over {_ago(ANCHOR_GRACE)}: deleting those entries (and the runs they record, once "
            "Temporal forgets their workflows) would go unseen; check that the workers reach "
            "Temporal (each append sends the new head; the next run sends it again)"
            if stale
            else " (a head on its way: runs that ended past it are proven by their own workflows)"
        )
    )
    return _is(base, "stale" if stale else "behind", detail, behind=behind), []


def _tampered(
    state: LedgerState, anchor: LedgerAnchorState, wid: str
) -> tuple[str, str, int | None] | None:
    """(problem, detail, seq) where the database's ledger is not the one Temporal anchored."""
    entries, head = state.entries, anchor.head
    refused = ""
    if anchor.conflicts_seen:
        conflict = anchor.conflicts[-1]
        refused = (
            f"; Temporal also refused {anchor.conflicts_seen} head(s) that do not continue this "
            f"ledger (the newest: {conflict.why}, store {conflict.head.store_id} entry "
            f"{conflict.head.seq}, at {conflict.received_at})"
        )
    held = f"Temporal anchored store {anchor.store_id} for this database (workflow {wid}" + (
        f"; up to entry {head.seq}, {_runs(head.runs)}received {head.received_at})"
        if head is not None
        else ")"
    )
    if not entries:
        return (
            "deleted",
            f"the database's ledger is empty, but {held}: the ledger and its runs were "
            f"deleted{refused}",
            None,
        )
    genesis = entries[0]
    if state.store_id != anchor.store_id or genesis.hash != anchor.genesis:
        return (
            "replaced",
            f"the database's ledger begins store {state.store_id or 'none'} (entry 0 "
            f"{genesis.hash[:12]}), but {held}: the ledger was begun anew, so its runs were "
            f"deleted or re-chained{refused}",
            0,
        )
    stored = {e.seq: e for e in entries}
    last = entries[-1].seq
    for mark in reversed(anchor.checkpoints):
        entry = stored.get(mark.seq)
        if entry is None:
            return (
                "deleted",
                f"Temporal anchored this ledger up to entry {mark.seq} ({_runs(mark.runs)}"
                f"received {mark.received_at}); the database's ledger ends at entry {last}: "
                f"its newest {mark.seq - last} entries were deleted (with the runs they "
                f"record){refused}",
                last + 1,
            )
        if entry.hash != mark.hash:
            return (
                "rewritten",
                f"ledger entry {mark.seq} is not the one anchored in Temporal (anchored "
                f"{mark.hash[:12]} at {mark.received_at}, stored {entry.hash[:12]}): the ledger "
                f"was rewritten from there or before{refused}",
                mark.seq,
            )
    if anchor.conflicts_seen:
        return "conflict", f"{held}, and its anchored entries hold{refused}", None
    return None


def _is(
    base: LedgerAnchorCheck, status: LedgerAnchorStatus, detail: str, **more: int
) -> LedgerAnchorCheck:
    return base.model_copy(update={"status": status, "detail": detail, **more})


def _runs(runs: int | None) -> str:
    return "" if runs is None else f"{runs} run(s) started, "


def _ago(age: timedelta) -> str:
    seconds = max(0, int(age.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def check_run_anchor(
    check: RunCheck,
    records: Sequence[TraceRecord],
    anchor: Anchor | None,
    *,
    store_id: str,
    unread: str | None,
    ended: LedgerEntry | None,
    covered: int | None,
    ledger_note: str,
) -> None:
    """One run's ``temporal_anchor`` check: its stored ``records`` against the chain head its
    workflow anchored in Temporal (``anchor``; None: Temporal has none). ``unread``: why
    Temporal could not be read at all. Without a workflow anchor, the run is proven by the
    ledger's anchor when its ``run_end`` entry (``ended``) is at or before the newest entry
    Temporal holds (``covered``; None: the ledger is not anchored, ``ledger_note`` says why)."""
    if unread is not None:
        check.unanchored(f"not compared with Temporal: {unread}")
        return
    if anchor is None:
        if ended is not None and covered is not None and ended.seq <= covered:
            check.anchored_by = "ledger"
            return
        if ended is None:
            where = "it has not ended, so the ledger holds no chain head for it"
        elif covered is None:
            where = f"the ledger's anchor does not cover its end: {ledger_note}"
        else:
            where = (
                f"its end (ledger entry {ended.seq}) is past the newest ledger entry Temporal "
                f"holds ({covered})"
            )
        check.unanchored(
            "Temporal has no anchor for this run (its workflow is past the namespace's "
            "retention or was deleted, it started before runs anchored their chain, or it ran "
            f"on another server), and {where}"
        )
        return
    check.anchored_by = "workflow"
    if anchor.store and store_id and anchor.store != store_id:
        check.fail(
            "temporal_anchor",
            "other store",
            f"the run's workflow stored its chain in store {anchor.store} (its Temporal memo); "
            f"this database's ledger names store {store_id}: the ledger was begun anew under "
            "another store id, or the run was copied in from another store",
        )
    if anchor.length <= 0:
        return
    if len(records) < anchor.length:
        check.fail(
            "temporal_anchor",
            "deleted",
            f"the run's workflow recorded {anchor.length} records stored (head "
            f"{anchor.head[:12]}) in Temporal; the store has {len(records)}: records were "
            "deleted",
            len(records),
        )
    elif records[anchor.length - 1].hash != anchor.head:
        check.fail(
            "temporal_anchor",
            "rewritten",
            f"record {anchor.length - 1} is not the one the run's workflow anchored in "
            f"Temporal (head {anchor.head[:12]}, stored {records[anchor.length - 1].hash[:12]})"
            ": the chain was rewritten",
            anchor.length - 1,
        )
    elif anchor.final and len(records) > anchor.length:
        check.fail(
            "temporal_anchor",
            "inserted",
            f"the run's workflow ended with {anchor.length} records; the store has "
            f"{len(records)}: records were appended after it ended",
            anchor.length,
        )
