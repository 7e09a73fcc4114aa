"""Tamper evidence the store adds to the hash chain: a run's records against its recorded head."""

from __future__ import annotations

from collections.abc import Sequence

from armature_temporal.runtime.traces import ChainBreak, TraceRecord, verify_chain

__all__ = ["check_run"]


def check_run(run_id: str, records: Sequence[TraceRecord], head: str | None) -> ChainBreak | None:
    """The first break in one run's stored records (in ``seq`` order), given the chain head
    its summary recorded when the run ended (``None`` while it runs).

    Refines :func:`~armature_temporal.runtime.traces.verify_chain` with what only the store knows:

    - the recorded head is an earlier record: records were appended after the run ended
      (``inserted``); it is no record at all: records at the end were removed (``deleted``);
    - a record renumbered one place on that follows the same record as the one now before it:
      that one was spliced in (``inserted``), the rest renumbered to make room.
    """
    if not records:
        return ChainBreak(
            run_id=run_id,
            seq=None,
            problem="deleted",
            detail="no trace records for this run: all were removed, its summary remains",
        )
    found = verify_chain(run_id, records)
    if found is not None:
        if found.problem == "reordered" and found.seq:
            moved, before = records[found.seq], records[found.seq - 1]
            if moved.prev_hash == before.prev_hash:
                return ChainBreak(
                    run_id=run_id,
                    seq=before.seq,
                    problem="inserted",
                    detail=f"record {before.seq} ({before.kind}) was inserted: the records "
                    f"from {moved.seq} on are the originals renumbered to make room",
                )
        return found
    if head is None or head == records[-1].hash:
        return None
    end = next((r for r in records if r.hash == head), None)
    if end is not None:
        return ChainBreak(
            run_id=run_id,
            seq=end.seq + 1,
            problem="inserted",
            detail=f"record {end.seq + 1} follows the run's last record ({end.seq}, its "
            "recorded chain head): records were appended after the run ended",
        )
    return ChainBreak(
        run_id=run_id,
        seq=records[-1].seq + 1,
        problem="deleted",
        detail="the run's recorded chain head is not among its records: records at the end "
        "were removed",
    )
