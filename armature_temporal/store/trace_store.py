"""The TraceStore: runs, their hash-chained trace records and gate decisions, on SQLAlchemy.

Writes are idempotent — a retried activity re-sends records with the same ``(run_id, seq)`` and
they are ignored — and safe under many concurrent workers (each run's chain is computed by its
workflow, so writers never read-modify-write a shared row). Proposals, adapters, cross-run
memory, the experience memory's heuristics and the answer cache are mixed in from
:mod:`~armature_temporal.store.proposals`, :mod:`~armature_temporal.store.adapters`,
:mod:`~armature_temporal.store.memory`, :mod:`~armature_temporal.store.heuristics`,
:mod:`~armature_temporal.store.cache`, :mod:`~armature_temporal.store.tokens` (the run
API's tokens), :mod:`~armature_temporal.store.knowledge` and
:mod:`~armature_temporal.store.facts` (facts that outlive a run).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Connection, Engine, Executable, bindparam, func, select, text, update
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Session

from armature_temporal.runtime.hqs import median, run_hqs
from armature_temporal.runtime.ledger_anchor import LedgerHead
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.store import ledger
from armature_temporal.store._base import table_of
from armature_temporal.store.adapters import AdapterError, AdapterStore
from armature_temporal.store.cache import CacheStore
from armature_temporal.store.engine import (
    StoreError,
    database_url,
    make_engine,
    release_engine,
)
from armature_temporal.store.evals import EvalStore
from armature_temporal.store.facts import FactStore
from armature_temporal.store.heuristics import HeuristicStore
from armature_temporal.store.keys import TraceKey, key_path, load_key
from armature_temporal.store.knowledge import KnowledgeStore
from armature_temporal.store.ledger import LedgerEvent
from armature_temporal.store.memory import MemoryStore
from armature_temporal.store.migrations import migrate
from armature_temporal.store.proposals import ProposalError, ProposalStore
from armature_temporal.store.rounds import RoundStore
from armature_temporal.store.schema import GateDecisionRow, RunRow, TraceRow
from armature_temporal.store.signed_rows import GateRecord, gate_record, gate_row_mac
from armature_temporal.store.tamper import (
    LEDGER_SUMMARY_FIELDS,
    Anchor,
    Audit,
    Finding,
    LedgerAnchorReading,
    audit_store,
    check_run,
    run_summary,
)
from armature_temporal.store.tokens import TokenStore

__all__ = ["LATENCY_WINDOW", "AdapterError", "ProposalError", "TraceStore", "check_run"]

#: Runs of the same spec version that make up the rolling latency baseline.
LATENCY_WINDOW = 50
_RECORD_FIELDS = [name for name in TraceRecord.model_fields]


class TraceStore(
    ProposalStore,
    AdapterStore,
    MemoryStore,
    HeuristicStore,
    CacheStore,
    RoundStore,
    TokenStore,
    KnowledgeStore,
    FactStore,
    EvalStore,
):
    """Open (and migrate) the store at ``url`` (default: ``$ARMATURE_DB_URL`` or SQLite)."""

    def __init__(self, url: str | None = None, *, key: Path | None = None) -> None:
        self.url = database_url(url)
        self._key_path = key
        self._keys: dict[Path, TraceKey] = {}
        self._store_id = ""
        self._head: LedgerHead | None = None
        self._head_lock = threading.Lock()
        self.engine: Engine = make_engine(self.url)
        self._database = ledger.database_identity(self.url)
        try:
            migrate(self.engine)
        except (DatabaseError, OperationalError) as exc:
            release_engine(self.engine)
            raise StoreError(self._cannot_open(exc)) from None
        traces, runs, gates = table_of(TraceRow), table_of(RunRow), table_of(GateDecisionRow)
        self._insert_traces: Executable = (
            _recordset_insert(self.engine)
            if self.engine.dialect.name == "postgresql"
            else self._insert(traces)
            .on_conflict_do_nothing(index_elements=["run_id", "seq"])
            .returning(traces.c.run_id, traces.c.seq)
        )
        self._insert_runs = self._insert(runs).on_conflict_do_nothing(index_elements=["run_id"])
        self._insert_gates = self._insert(gates).on_conflict_do_nothing(
            index_elements=["run_id", "stage_id"]
        )
        self._latency_window = (
            select(runs.c.latency_ms)
            .where(runs.c.spec_hash == bindparam("b_spec_hash"), runs.c.latency_ms.is_not(None))
            .order_by(runs.c.started_at.desc())
            .limit(LATENCY_WINDOW)
        )
        self._update_run = update(runs).where(runs.c.run_id == bindparam("b_run_id"))

    def _safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def _cannot_open(self, exc: DatabaseError) -> str:
        reason = str(exc.orig or exc).strip()
        if self.engine.dialect.name == "sqlite":
            path = self.engine.url.database
            return (
                f"cannot open the trace store {path}: {reason}. If the file is corrupt, move it "
                f"aside (mv {path} {path}.corrupt): a new, empty store is created on the next "
                "start; or set ARMATURE_DB_URL to use another database"
            )
        return (
            f"cannot open the trace store at {self._safe_url()}; check that the server runs and "
            f"the URL (ARMATURE_DB_URL) is right. The driver said: {reason}"
        )

    def close(self) -> None:
        release_engine(self.engine)

    # --- writing ---------------------------------------------------------------------------

    def write(self, records: Sequence[TraceRecord]) -> int:
        """Insert records, ignoring ones already stored (:meth:`write_new`). Returns the number
        of new records."""
        return len(self.write_new(records))

    def write_new(self, records: Sequence[TraceRecord]) -> list[TraceRecord]:
        """Insert records, ignoring ones already stored; update run summaries. Returns the
        records that were new, in the order given (the worker's metrics count only those, so
        a retried batch counts nothing twice).

        One transaction and a few statements per batch, whatever its size: the records go in
        one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (SQLite: multi-row ``VALUES``;
        PostgreSQL: one JSON array the server expands); a run's summary is computed when its
        ``run_end`` record is new, so a retried batch leaves it as it was.

        Each record is stored with its MAC (the trace key, created on first use); each run the
        batch adds to gets its chain head, record count and summary MAC advanced, and a run's
        start and end are appended to the ledger.
        """
        if not records:
            return []
        key = self.trace_key(create=True)
        assert key is not None
        macs = [key.record_mac(r.run_id, r.seq, r.hash) for r in records]
        rows: Any = (
            {
                "rows": "["
                + ",".join(
                    f'{r.model_dump_json()[:-1]},"mac":"{mac}"}}'
                    for r, mac in zip(records, macs, strict=True)
                )
                + "]"
            }
            if self.engine.dialect.name == "postgresql"
            else [
                {**r.model_dump(mode="json"), "mac": mac}
                for r, mac in zip(records, macs, strict=True)
            ]
        )
        starts = [_run_start_row(r) for r in records if r.kind == "run_start"]
        gates = [_gate_row(r, key) for r in records if r.kind == "gate"]
        ends = [r for r in records if r.kind == "run_end"]
        with self.engine.begin() as conn:
            new = {(run_id, seq) for run_id, seq in conn.execute(self._insert_traces, rows)}
            if starts:
                conn.execute(self._insert_runs, starts)
            if gates:
                conn.execute(self._insert_gates, gates)
            for end in ends:
                if (end.run_id, end.seq) in new:
                    self._finish_run(conn, end, records)
            newest: dict[str, TraceRecord] = {}
            for r in records:
                if (r.run_id, r.seq) in new and r.seq >= newest.get(r.run_id, r).seq:
                    newest[r.run_id] = r
            sealed = {
                run_id: summary
                for run_id, last in newest.items()
                if (summary := self._seal_summary(conn, key, last)) is not None
            }
            begun = {
                r.run_id for r in records if r.kind == "run_start" and (r.run_id, r.seq) in new
            }
            events = [LedgerEvent(event="run_start", run_id=run_id) for run_id in sorted(begun)]
            events += [
                LedgerEvent(
                    event="run_end",
                    run_id=end.run_id,
                    data={f: sealed[end.run_id][f] for f in LEDGER_SUMMARY_FIELDS},
                )
                for end in ends
                if (end.run_id, end.seq) in new and end.run_id in sealed
            ]
            head = ledger.append(conn, key, events, new_runs=begun) if events else None
        if head is not None:
            self._store_id = head.store_id
            with self._head_lock:
                held = self._head
                if held is None or held.store_id != head.store_id or held.seq < head.seq:
                    self._head = head
        return [r for r in records if (r.run_id, r.seq) in new]

    def ledger_head(self) -> LedgerHead | None:
        """The newest ledger head this store object appended (None: it appended none). The
        workers send it to the ledger's anchor in Temporal."""
        with self._head_lock:
            return self._head

    def runs_started(self, upto: int) -> int:
        """How many runs the ledger records starting, up to entry ``upto``."""
        with self.engine.connect() as conn:
            return ledger.runs_started(conn, upto)

    def trace_key(self, *, create: bool = False) -> TraceKey | None:
        """The trace key (``$ARMATURE_HOME/trace.key``, or the path the store was opened with);
        with ``create``, made on first use."""
        path = self._key_path or key_path()
        cached = self._keys.get(path)
        if cached is None:
            cached = load_key(path, create=create)
            if cached is not None:
                self._keys[path] = cached
        return cached

    def database_identity(self) -> str:
        """Where this store's database is (:func:`~.ledger.database_identity`): the key of its
        ledger's anchor in Temporal."""
        return self._database

    def store_id(self) -> str:
        """This store's id, from its ledger's genesis entry ("" before the first keyed run)."""
        if not self._store_id:
            with self.engine.connect() as conn:
                self._store_id = ledger.store_id_of(conn)
        return self._store_id

    def _seal_summary(
        self, conn: Connection, key: TraceKey, last: TraceRecord
    ) -> dict[str, Any] | None:
        """Advance a run's summary to its newest stored record ``last`` and MAC it. Returns the
        summary (None: no such run row, or it is already further on)."""
        runs = table_of(RunRow)
        row = conn.execute(select(runs).where(runs.c.run_id == last.run_id)).mappings().first()
        if row is None or (row["chain_length"] or 0) > last.seq + 1:
            return None
        summary = run_summary({**row, "chain_head": last.hash, "chain_length": last.seq + 1})
        conn.execute(
            self._update_run,
            {
                "b_run_id": last.run_id,
                "chain_head": last.hash,
                "chain_length": last.seq + 1,
                "summary_mac": key.summary_mac(summary),
            },
        )
        return summary

    def _finish_run(self, conn: Connection, end: TraceRecord, batch: Sequence[TraceRecord]) -> None:
        """Summarise a run from its records: status, totals, HQS and the chain head.

        The records come from the batch when it holds the whole chain (a run flushed once),
        else from the database.
        """
        chain = sorted((r for r in batch if r.run_id == end.run_id), key=lambda r: r.seq)
        if [r.seq for r in chain] != list(range(end.seq + 1)):
            table = TraceRow.__table__
            rows = conn.execute(
                select(table).where(table.c.run_id == end.run_id).order_by(table.c.seq)
            ).all()
            chain = [_to_record(row._mapping) for row in rows]
        p50 = median(conn.execute(self._latency_window, {"b_spec_hash": end.spec_hash}).scalars())
        try:  # with the weights the run recorded (its plan's), else the defaults
            hqs: float | None = run_hqs(chain, p50).hqs
        except ValueError:  # recorded weights no valid plan has: the run stays unscored
            hqs = None
        # Every model call the run paid for: its stages' attempts, evaluations, critiques and
        # context summaries.
        calls = [r for r in chain if r.kind in ("attempt", "evaluation", "critique", "context")]
        conn.execute(
            self._update_run,
            {
                "b_run_id": end.run_id,
                "status": end.status or "completed",
                "reason": end.error,
                "outputs": end.output,
                "finished_at": end.recorded_at,
                "latency_ms": end.latency_ms,
                "hqs": hqs,
                "prompt_tokens": sum(r.prompt_tokens for r in calls),
                "completion_tokens": sum(r.completion_tokens for r in calls),
                "cost_usd": sum(r.cost_usd for r in calls),
                "chain_head": end.hash,
            },
        )

    # --- reading ---------------------------------------------------------------------------

    def records(self, run_id: str) -> list[TraceRecord]:
        with Session(self.engine) as session:
            rows = (
                session.execute(
                    select(TraceRow).where(TraceRow.run_id == run_id).order_by(TraceRow.seq)
                )
                .scalars()
                .all()
            )
            return [_to_record({f: getattr(row, f) for f in _RECORD_FIELDS}) for row in rows]

    def run(self, run_id: str) -> RunRow | None:
        with Session(self.engine) as session:
            row = session.get(RunRow, run_id)
            if row is not None:
                session.expunge(row)
            return row

    def runs(
        self,
        *,
        spec: str | None = None,
        limit: int = 20,
        verification: bool | None = None,
        children: bool = True,
    ) -> list[RunRow]:
        """The newest ``limit`` runs (of ``spec``, if given), newest first.

        ``verification``: None for every run, False to leave out improvement rounds'
        verification runs, True for those alone; ``children=False`` leaves out fan-out
        children (runs with a parent). Both filter before the limit applies.
        """
        with Session(self.engine) as session:
            query = select(RunRow).order_by(RunRow.started_at.desc()).limit(limit)
            if spec:
                query = query.where(RunRow.spec_name == spec)
            if verification is not None:
                query = query.where(RunRow.verification.is_(verification))
            if not children:
                query = query.where(RunRow.parent_run_id.is_(None))
            rows = list(session.execute(query).scalars().all())
            for row in rows:
                session.expunge(row)
            return rows

    def gate_decisions(self, run_id: str) -> list[GateRecord]:
        """A run's gate decisions, oldest first, each checked against its MAC."""
        table = table_of(GateDecisionRow)
        return self._gate_records(
            select(table).where(table.c.run_id == run_id).order_by(table.c.id)
        )

    def recent_gate_decisions(self, limit: int = 20) -> list[GateRecord]:
        """The newest gate decisions of every run (the approval inbox's "recent decisions"),
        each checked against its MAC."""
        table = table_of(GateDecisionRow)
        return self._gate_records(select(table).order_by(table.c.id.desc()).limit(limit))

    def _gate_records(self, query: Any) -> list[GateRecord]:
        key = self.trace_key()
        with self.engine.connect() as conn:
            return [gate_record(key, row) for row in conn.execute(query).mappings()]

    def run_ids(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(
                conn.execute(select(TraceRow.run_id).distinct().order_by(TraceRow.run_id)).scalars()
            )

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(TraceRow)).scalar_one())

    # --- tamper evidence ---------------------------------------------------------------------

    def records_with_macs(self, run_id: str) -> list[tuple[TraceRecord, str | None]]:
        """A run's records in ``seq`` order, each with the MAC stored beside it."""
        table = table_of(TraceRow)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table).where(table.c.run_id == run_id).order_by(table.c.seq)
            ).mappings()
            return [(_to_record(row), row["mac"]) for row in rows]

    def audit(
        self,
        run_ids: Iterable[str] | None = None,
        *,
        anchors: Mapping[str, Anchor] | None = None,
        anchors_skipped: str | None = "Temporal was not asked",
        ledger_anchor: LedgerAnchorReading | None = None,
        now: datetime | None = None,
    ) -> Audit:
        """Check every run (or the given runs): chain, record MACs, summary MAC, ledger and
        (given ``anchors``, the runs' Temporal memos, and ``ledger_anchor``, the ledger's
        anchor workflow) the Temporal anchors. Without ``anchors`` every keyed run is
        ``unanchored``: nothing failed, nothing is proven either.

        Every run the store, its ledger or ``anchors`` (for this store) knows is checked, so a
        run deleted whole — summary and records — is reported too.
        """
        runs = table_of(RunRow)
        key = self.trace_key()
        with self.engine.connect() as conn:
            summaries = {row["run_id"]: dict(row) for row in conn.execute(select(runs)).mappings()}
            state = ledger.read_ledger(conn, key)
        if not self._store_id:
            self._store_id = state.store_id
        whole = run_ids is None
        if run_ids is None:
            known = set(self.run_ids()) | set(summaries) | set(state.started)
            if anchors is not None:
                known |= {
                    run_id
                    for run_id, anchor in anchors.items()
                    if state.store_id and anchor.store == state.store_id
                }
            ids = sorted(known)
        else:
            ids = list(run_ids)
        return audit_store(
            ids,
            stored={run_id: self.records_with_macs(run_id) for run_id in ids},
            summaries={run_id: summaries[run_id] for run_id in ids if run_id in summaries},
            state=state,
            key=key,
            key_file=self._key_path or key_path(),
            anchors=anchors,
            anchors_skipped=anchors_skipped,
            whole_store=whole,
            ledger_anchor=ledger_anchor,
            now=now,
        )

    def verify(self, run_ids: Iterable[str] | None = None) -> tuple[int, list[Finding]]:
        """:meth:`audit` without Temporal: (runs checked, every failed check). What only
        Temporal's copy could prove is not proven here (the runs are unanchored)."""
        found = self.audit(run_ids)
        return found.checked, found.findings


def _recordset_insert(engine: Engine) -> Executable:
    """PostgreSQL: the batch as one JSON array parameter, expanded by the server.

    A multi-row ``VALUES`` statement has 32 parameters a record, too long for psycopg to cache
    its parsing, which then costs more than the insert; this statement is short and constant.
    JSON ``null`` is stored as JSON ``null``, as SQLAlchemy's JSON type stores ``None``.
    """
    quote = engine.dialect.identifier_preparer.quote
    table = table_of(TraceRow)
    columns = [c for c in table.columns if c.name != "id"]
    names = ", ".join(quote(c.name) for c in columns)
    values = ", ".join(
        f"COALESCE(r.{quote(c.name)}, 'null'::json)"
        if isinstance(c.type, JSON)
        else f"r.{quote(c.name)}"
        for c in columns
    )
    return text(
        f"INSERT INTO {quote(table.name)} ({names}) SELECT {values} "
        f"FROM json_populate_recordset(NULL::{quote(table.name)}, CAST(:rows AS json)) AS r "
        "ON CONFLICT (run_id, seq) DO NOTHING RETURNING run_id, seq"
    )


def _run_start_row(record: TraceRecord) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "spec_name": record.spec_name,
        "spec_hash": record.spec_hash,
        "spec_version": record.data.get("spec_version"),
        "policy_version": record.policy_version,
        "parent_run_id": record.data.get("parent_run_id"),
        "verification": bool(record.data.get("verification", False)),
        "status": "running",
        "inputs": record.data.get("inputs"),
        "started_at": record.recorded_at,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
    }


def _gate_row(record: TraceRecord, key: TraceKey) -> dict[str, Any]:
    row = {
        "run_id": record.run_id,
        "stage_id": record.stage_id or "",
        "decision": record.data.get("decision", ""),
        "decided_by": record.data.get("by"),
        "comment": record.data.get("comment"),
        "decided_at": record.recorded_at,
        "claimed_by": record.data.get("claimed_by"),
        "unverified": record.data.get("unverified"),
    }
    return {**row, "mac": gate_row_mac(key, row)}


def _to_record(values: Any) -> TraceRecord:
    data = {f: values[f] for f in _RECORD_FIELDS}
    if data.get("inputs_provenance") is None:
        data["inputs_provenance"] = {}
    if data.get("data") is None:
        data["data"] = {}
    return TraceRecord.model_validate(data)
