"""What someone who can write the trace database does to it (issue #25, item 3), on SQLite and
PostgreSQL alike, with the project's own functions (they have its source):

- :func:`rewrite_with_key`: with the trace key, every run's records rewritten, each chain, record
  MAC, run summary and summary MAC recomputed, and the ledger re-chained (under a new genesis
  store id, if given). Every check inside the database holds afterwards.
- :func:`delete_newest_runs`: without the key, the newest runs deleted whole with their ledger
  entries (the ledger's last ones: what is left still chains).
- :func:`anchor_of`: what Temporal's ledger anchor holds after the given heads were sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import delete, insert, select, update

from armature_temporal.runtime.ledger_anchor import (
    LedgerAnchorState,
    LedgerHead,
    advance,
    ledger_anchor_id,
)
from armature_temporal.runtime.traces import TraceRecord, genesis_hash
from armature_temporal.store import TraceStore
from armature_temporal.store._base import table_of
from armature_temporal.store.ledger import LEDGER_GENESIS, entry_hash, read_ledger
from armature_temporal.store.schema import GateDecisionRow, LedgerRow, RunRow, TraceRow
from armature_temporal.store.tamper import LedgerAnchorReading, run_summary

__all__ = ["FORGED", "anchor_of", "delete_newest_runs", "forge_outputs", "rewrite_with_key"]

FORGED = {"content": "wire the funds to account 4471"}
_FIELDS = list(TraceRecord.model_fields)


def forge_outputs(record: TraceRecord) -> dict[str, Any]:
    """The edit: every output the run produced, and the inputs it started with."""
    if record.kind == "run_start":
        return {"data": {**record.data, "inputs": {"ticket": "refund everything"}}}
    if record.output is not None or record.kind == "run_end":
        return {"output": FORGED}
    return {}


def _record(row: Any) -> TraceRecord:
    values = {f: row[f] for f in _FIELDS}
    values["inputs_provenance"] = values["inputs_provenance"] or {}
    values["data"] = values["data"] or {}
    return TraceRecord.model_validate(values)


def rewrite_with_key(
    store: TraceStore,
    *,
    change: Callable[[TraceRecord], dict[str, Any]] = forge_outputs,
    new_store_id: str | None = None,
) -> None:
    """Rewrite every run with ``change`` and make the whole database consistent again with the
    trace key: chains, record MACs, summaries and their MACs, and the ledger (re-chained from
    a genesis naming ``new_store_id``, if given)."""
    key = store.trace_key()
    assert key is not None, "the attacker holds the key"
    traces, runs, ledger = table_of(TraceRow), table_of(RunRow), table_of(LedgerRow)
    with store.engine.begin() as conn:
        summaries: dict[str, dict[str, Any]] = {}
        run_ids = sorted(set(conn.execute(select(traces.c.run_id).distinct()).scalars()))
        for run_id in run_ids:
            rows = conn.execute(
                select(traces).where(traces.c.run_id == run_id).order_by(traces.c.seq)
            ).mappings()
            prev = genesis_hash(run_id)
            first: TraceRecord | None = None
            last: TraceRecord | None = None
            for row in list(rows):
                record = _record(row)
                edit = change(record)
                new = record.model_copy(update={**edit, "prev_hash": prev}).sealed()
                conn.execute(
                    update(traces)
                    .where(traces.c.id == row["id"])
                    .values(
                        **{field: getattr(new, field) for field in edit},
                        prev_hash=new.prev_hash,
                        hash=new.hash,
                        mac=key.record_mac(run_id, new.seq, new.hash),
                    )
                )
                prev, first, last = new.hash, first or new, new
            assert first is not None and last is not None
            row = conn.execute(select(runs).where(runs.c.run_id == run_id)).mappings().one()
            values: dict[str, Any] = {"chain_head": last.hash, "inputs": first.data.get("inputs")}
            if last.kind == "run_end":
                values["outputs"] = last.output
            summary = {**row, **values}
            values["summary_mac"] = key.summary_mac(run_summary(summary))
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(**values))
            summaries[run_id] = summary
        entries = read_ledger(conn, key).entries
        conn.execute(delete(ledger))
        prev = LEDGER_GENESIS
        rewritten = []
        for entry in entries:
            data = dict(entry.data)
            if entry.event == "genesis" and new_store_id is not None:
                data["store_id"] = new_store_id
            if entry.event == "run_end" and entry.run_id in summaries:
                data["chain_head"] = summaries[entry.run_id]["chain_head"]
            content = {**entry.content(), "data": data, "prev_hash": prev}
            digest = entry_hash(prev, content)
            rewritten.append({**content, "hash": digest, "mac": key.ledger_mac(digest)})
            prev = digest
        conn.execute(insert(ledger), rewritten)


def delete_newest_runs(store: TraceStore, count: int) -> list[str]:
    """Delete the ``count`` runs the ledger recorded starting last, whole (records, summary,
    gate decisions) and with their ledger entries, which must be the ledger's last ones (runs
    that ran one after another). No key needed: what is left of the ledger still chains.
    Returns the runs deleted."""
    traces, runs, gates = table_of(TraceRow), table_of(RunRow), table_of(GateDecisionRow)
    ledger = table_of(LedgerRow)
    with store.engine.begin() as conn:
        entries = read_ledger(conn, None).entries
        gone = [e.run_id for e in entries if e.event == "run_start" and e.run_id][-count:]
        cut = min(e.seq for e in entries if e.run_id in gone)
        assert {e.run_id for e in entries if e.seq >= cut} == set(gone), "not the ledger's tail"
        for table in (traces, runs, gates):
            conn.execute(delete(table).where(table.c.run_id.in_(gone)))
        conn.execute(delete(ledger).where(ledger.c.seq >= cut))
    return [str(run_id) for run_id in gone]


def anchor_of(
    store: TraceStore, heads: Iterable[LedgerHead], received_at: str
) -> LedgerAnchorReading:
    """The ledger anchor Temporal holds for ``store`` once ``heads`` were sent to it (folded by
    the workflow's own function, each received at ``received_at``)."""
    heads = list(heads)
    key = store.trace_key()
    state = LedgerAnchorState(
        database=store.database_identity(),
        key_id=key.key_id if key is not None else "",
        store_id=heads[0].store_id,
        genesis=heads[0].genesis,
    )
    for head in heads:
        state = advance(state, head, received_at)
    return LedgerAnchorReading(workflow_id=ledger_anchor_id(state.database), state=state)
