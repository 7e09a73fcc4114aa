"""The TraceStore: runs, their hash-chained trace records and gate decisions, on SQLAlchemy.

Writes are idempotent — a retried activity re-sends records with the same ``(run_id, seq)`` and
they are ignored — and safe under many concurrent workers (each run's chain is computed by its
workflow, so writers never read-modify-write a shared row).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    Connection,
    Engine,
    Executable,
    Table,
    bindparam,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Session

from armature_temporal.finetune.models import Adapter
from armature_temporal.improve.models import Proposal
from armature_temporal.runtime.hqs import median, run_hqs
from armature_temporal.runtime.traces import ChainBreak, TraceRecord, verify_chain
from armature_temporal.store.engine import StoreError, database_url, make_engine
from armature_temporal.store.migrations import migrate
from armature_temporal.store.schema import (
    AdapterRow,
    Base,
    GateDecisionRow,
    ProposalRow,
    RunRow,
    TraceRow,
)

__all__ = ["LATENCY_WINDOW", "AdapterError", "ProposalError", "TraceStore", "check_run"]

#: Runs of the same spec version that make up the rolling latency baseline.
LATENCY_WINDOW = 50
_RECORD_FIELDS = [name for name in TraceRecord.model_fields]
_PROPOSAL_FIELDS = [name for name in Proposal.model_fields]
_ADAPTER_FIELDS = [name for name in Adapter.model_fields]
#: Adapter fields stored under another column name.
_ADAPTER_COLUMNS = {"stage": "stage_id"}


class ProposalError(StoreError):
    """A proposal's status cannot be changed: there is no such proposal, or its status is not
    the one the caller expected (someone applied or dismissed it first).

    ``status`` is the proposal's status now (``None``: no such proposal), ``changed_at`` when
    it last changed.
    """

    def __init__(
        self,
        message: str,
        *,
        proposal_id: str,
        status: str | None = None,
        changed_at: str | None = None,
    ) -> None:
        super().__init__(message)
        self.proposal_id = proposal_id
        self.status = status
        self.changed_at = changed_at


class AdapterError(StoreError):
    """An adapter's status cannot be changed: there is no such adapter, or its status is not
    the one the caller expected (someone retired or reactivated it first).

    ``status`` is the adapter's status now (``None``: no such adapter), ``changed_at`` when it
    last changed.
    """

    def __init__(
        self,
        message: str,
        *,
        adapter_id: str,
        status: str | None = None,
        changed_at: str | None = None,
    ) -> None:
        super().__init__(message)
        self.adapter_id = adapter_id
        self.status = status
        self.changed_at = changed_at


class TraceStore:
    """Open (and migrate) the store at ``url`` (default: ``$ARMATURE_DB_URL`` or SQLite)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = database_url(url)
        self.engine: Engine = make_engine(self.url)
        try:
            migrate(self.engine)
        except (DatabaseError, OperationalError) as exc:
            raise StoreError(self._cannot_open(exc)) from None
        insert = postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert
        traces, runs, gates = _table(TraceRow), _table(RunRow), _table(GateDecisionRow)
        self._insert_traces: Executable = (
            _recordset_insert(self.engine)
            if self.engine.dialect.name == "postgresql"
            else insert(traces)
            .on_conflict_do_nothing(index_elements=["run_id", "seq"])
            .returning(traces.c.run_id, traces.c.seq)
        )
        self._insert_runs = insert(runs).on_conflict_do_nothing(index_elements=["run_id"])
        self._insert_gates = insert(gates).on_conflict_do_nothing(
            index_elements=["run_id", "stage_id"]
        )
        self._latency_window = (
            select(runs.c.latency_ms)
            .where(runs.c.spec_hash == bindparam("b_spec_hash"), runs.c.latency_ms.is_not(None))
            .order_by(runs.c.started_at.desc())
            .limit(LATENCY_WINDOW)
        )
        self._update_run = update(runs).where(runs.c.run_id == bindparam("b_run_id"))
        proposals = _table(ProposalRow)
        self._insert_proposals = (
            insert(proposals)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(proposals.c.id)
        )
        adapters = _table(AdapterRow)
        self._insert_adapters = (
            insert(adapters).on_conflict_do_nothing(index_elements=["id"]).returning(adapters.c.id)
        )

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
        self.engine.dispose()

    # --- writing ---------------------------------------------------------------------------

    def write(self, records: Sequence[TraceRecord]) -> int:
        """Insert records, ignoring ones already stored; update run summaries. Returns the
        number of new records.

        One transaction and a few statements per batch, whatever its size: the records go in
        one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` (SQLite: multi-row ``VALUES``;
        PostgreSQL: one JSON array the server expands); a run's summary is computed when its
        ``run_end`` record is new, so a retried batch leaves it as it was.
        """
        if not records:
            return 0
        rows: Any = (
            {"rows": "[" + ",".join(r.model_dump_json() for r in records) + "]"}
            if self.engine.dialect.name == "postgresql"
            else [r.model_dump(mode="json") for r in records]
        )
        starts = [_run_start_row(r) for r in records if r.kind == "run_start"]
        gates = [_gate_row(r) for r in records if r.kind == "gate"]
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
        return len(new)

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
        score = run_hqs(chain, p50)
        attempts = [r for r in chain if r.kind == "attempt"]
        conn.execute(
            self._update_run,
            {
                "b_run_id": end.run_id,
                "status": end.status or "completed",
                "reason": end.error,
                "outputs": end.output,
                "finished_at": end.recorded_at,
                "latency_ms": end.latency_ms,
                "hqs": score.hqs,
                "prompt_tokens": sum(r.prompt_tokens for r in attempts),
                "completion_tokens": sum(r.completion_tokens for r in attempts),
                "cost_usd": sum(r.cost_usd for r in attempts),
                "chain_head": end.hash,
            },
        )

    # --- improvement proposals -----------------------------------------------------------------

    def save_proposals(self, proposals: Sequence[Proposal]) -> int:
        """Insert proposals, leaving any whose id is already stored as it is (a retried
        activity re-sends the same ids; an applied or dismissed one keeps its status). Returns
        the number of new proposals."""
        unique: dict[str, Proposal] = {}
        for proposal in proposals:
            unique.setdefault(proposal.id, proposal)
        if not unique:
            return 0
        rows = [p.model_dump(mode="json") for p in unique.values()]
        with self.engine.begin() as conn:
            return len(conn.execute(self._insert_proposals, rows).all())

    def proposals(
        self, *, spec: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[Proposal]:
        """Proposals, newest first; of one spec and/or in one status if given."""
        table = _table(ProposalRow)
        query = (
            select(*[table.c[f] for f in _PROPOSAL_FIELDS])
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(limit)
        )
        if spec is not None:
            query = query.where(table.c.spec_name == spec)
        if status is not None:
            query = query.where(table.c.status == status)
        with self.engine.connect() as conn:
            return [_to_proposal(row) for row in conn.execute(query).mappings()]

    def proposal(self, proposal_id: str) -> Proposal | None:
        table = _table(ProposalRow)
        query = select(*[table.c[f] for f in _PROPOSAL_FIELDS]).where(table.c.id == proposal_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _to_proposal(row)

    def set_proposal_status(
        self,
        proposal_id: str,
        status: Literal["applied", "dismissed"],
        *,
        expected: str = "proposed",
    ) -> Proposal:
        """Move a proposal from ``expected`` to ``status`` and record when; returns it updated.

        One conditional ``UPDATE``, so of two concurrent callers exactly one succeeds. Raises
        :class:`ProposalError` if there is no such proposal or its status is not ``expected``
        (nothing is changed then).
        """
        table = _table(ProposalRow)
        row, now = self._change_status(
            table,
            proposal_id,
            status,
            [table.c.status == expected],
            [table.c[f] for f in _PROPOSAL_FIELDS],
        )
        if row is not None:
            return _to_proposal(row)
        if now is None:
            raise ProposalError(
                f"no proposal {proposal_id!r}; list them with `armature proposals`",
                proposal_id=proposal_id,
            )
        current, since = now
        if current != "proposed":
            when = f" (since {since})" if since else ""
            message = f"proposal {proposal_id} is already {current}{when}; nothing changed"
        else:
            message = f"proposal {proposal_id} is {current}, not {expected}; nothing changed"
        raise ProposalError(message, proposal_id=proposal_id, status=current, changed_at=since)

    def _change_status(
        self,
        table: Table,
        row_id: str,
        status: str,
        guards: list[Any],
        returning: list[Any],
    ) -> tuple[Any, Any]:
        """One conditional ``UPDATE`` of ``status`` (and when) where ``guards`` hold: of two
        concurrent callers exactly one succeeds. Returns the updated row, or ``None`` and the
        row's ``(status, status_changed_at)`` now (``None`` if there is no such row)."""
        changed = (
            update(table)
            .where(table.c.id == row_id, *guards)
            .values(status=status, status_changed_at=datetime.now(UTC).isoformat())
            .returning(*returning)
        )
        with self.engine.begin() as conn:
            row = conn.execute(changed).mappings().first()
            if row is not None:
                return row, None
            now = conn.execute(
                select(table.c.status, table.c.status_changed_at).where(table.c.id == row_id)
            ).first()
        return None, now

    # --- fine-tune adapters ------------------------------------------------------------------

    def save_adapters(self, adapters: Sequence[Adapter]) -> int:
        """Insert adapters, leaving any whose id is already stored as it is (a retried activity
        re-sends the same ids; a retired one stays retired). Returns the number of new
        adapters."""
        unique: dict[str, Adapter] = {}
        for adapter in adapters:
            unique.setdefault(adapter.id, adapter)
        if not unique:
            return 0
        rows = [_adapter_row(a) for a in unique.values()]
        with self.engine.begin() as conn:
            return len(conn.execute(self._insert_adapters, rows).all())

    def adapters(
        self,
        *,
        spec: str | None = None,
        stage: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[Adapter]:
        """Adapters, newest first; of one spec, one stage and/or in one status if given."""
        table = _table(AdapterRow)
        query = (
            select(*_adapter_columns(table))
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(limit)
        )
        if spec is not None:
            query = query.where(table.c.spec_name == spec)
        if stage is not None:
            query = query.where(table.c.stage_id == stage)
        if status is not None:
            query = query.where(table.c.status == status)
        with self.engine.connect() as conn:
            return [_to_adapter(row) for row in conn.execute(query).mappings()]

    def adapter(self, adapter_id: str) -> Adapter | None:
        table = _table(AdapterRow)
        query = select(*_adapter_columns(table)).where(table.c.id == adapter_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _to_adapter(row)

    def latest_adapter(self, spec: str, stage: str) -> Adapter | None:
        """The newest verified, active adapter trained for ``stage`` of ``spec`` (what a
        ``provider: local`` tier with ``adapter: latest`` loads), or ``None``."""
        table = _table(AdapterRow)
        query = (
            select(*_adapter_columns(table))
            .where(
                table.c.spec_name == spec,
                table.c.stage_id == stage,
                table.c.verdict == "verified",
                table.c.status == "active",
            )
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _to_adapter(row)

    def set_adapter_status(
        self,
        adapter_id: str,
        status: Literal["active", "retired"],
        *,
        expected: str,
    ) -> Adapter:
        """Move an adapter from ``expected`` to ``status`` and record when; returns it updated.

        One conditional ``UPDATE``, so of two concurrent callers exactly one succeeds. Raises
        :class:`AdapterError` if there is no such adapter, its status is not ``expected``, or
        it is already ``status`` (nothing is changed then).
        """
        table = _table(AdapterRow)
        row, now = self._change_status(
            table,
            adapter_id,
            status,
            [table.c.status == expected, table.c.status != status],
            _adapter_columns(table),
        )
        if row is not None:
            return _to_adapter(row)
        if now is None:
            raise AdapterError(
                f"no adapter {adapter_id!r}; list them with `armature adapters list`",
                adapter_id=adapter_id,
            )
        current, since = now
        if current == status:
            when = f" (since {since})" if since else ""
            message = f"adapter {adapter_id} is already {current}{when}; nothing changed"
        else:
            message = f"adapter {adapter_id} is {current}, not {expected}; nothing changed"
        raise AdapterError(message, adapter_id=adapter_id, status=current, changed_at=since)

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

    def runs(self, *, spec: str | None = None, limit: int = 20) -> list[RunRow]:
        with Session(self.engine) as session:
            query = select(RunRow).order_by(RunRow.started_at.desc()).limit(limit)
            if spec:
                query = query.where(RunRow.spec_name == spec)
            rows = list(session.execute(query).scalars().all())
            for row in rows:
                session.expunge(row)
            return rows

    def gate_decisions(self, run_id: str) -> list[GateDecisionRow]:
        with Session(self.engine) as session:
            rows = list(
                session.execute(
                    select(GateDecisionRow)
                    .where(GateDecisionRow.run_id == run_id)
                    .order_by(GateDecisionRow.id)
                )
                .scalars()
                .all()
            )
            for row in rows:
                session.expunge(row)
            return rows

    def run_ids(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(
                conn.execute(select(TraceRow.run_id).distinct().order_by(TraceRow.run_id)).scalars()
            )

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(TraceRow)).scalar_one())

    # --- tamper evidence ---------------------------------------------------------------------

    def verify(self, run_ids: Iterable[str] | None = None) -> tuple[int, list[ChainBreak]]:
        """Check every chain (or the given runs'). Returns (runs checked, breaks).

        Every run with trace records or a summary is checked (a run whose records were all
        deleted keeps its summary). Besides :func:`~armature_temporal.runtime.traces.verify_chain`'s
        checks, a finished run's last record must be the chain head its summary recorded.
        """
        with self.engine.connect() as conn:
            heads: dict[str, str | None] = {
                run_id: head
                for run_id, head in conn.execute(select(RunRow.run_id, RunRow.chain_head))
            }
        ids = list(run_ids) if run_ids is not None else sorted(set(self.run_ids()) | set(heads))
        breaks = [
            found
            for run_id in ids
            if (found := check_run(run_id, self.records(run_id), heads.get(run_id)))
        ]
        return len(ids), breaks


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


def _table(model: type[Base]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


def _recordset_insert(engine: Engine) -> Executable:
    """PostgreSQL: the batch as one JSON array parameter, expanded by the server.

    A multi-row ``VALUES`` statement has 32 parameters a record, too long for psycopg to cache
    its parsing, which then costs more than the insert; this statement is short and constant.
    JSON ``null`` is stored as JSON ``null``, as SQLAlchemy's JSON type stores ``None``.
    """
    quote = engine.dialect.identifier_preparer.quote
    table = _table(TraceRow)
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


def _gate_row(record: TraceRecord) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "stage_id": record.stage_id or "",
        "decision": record.data.get("decision", ""),
        "decided_by": record.data.get("by"),
        "comment": record.data.get("comment"),
        "decided_at": record.recorded_at,
    }


def _to_proposal(values: Any) -> Proposal:
    return Proposal.model_validate({f: values[f] for f in _PROPOSAL_FIELDS})


def _adapter_columns(table: Table) -> list[Any]:
    """The adapters table's columns as :class:`Adapter`'s fields (``stage_id AS stage``)."""
    return [
        table.c[_ADAPTER_COLUMNS[f]].label(f) if f in _ADAPTER_COLUMNS else table.c[f]
        for f in _ADAPTER_FIELDS
    ]


def _adapter_row(adapter: Adapter) -> dict[str, Any]:
    return {_ADAPTER_COLUMNS.get(f, f): v for f, v in adapter.model_dump(mode="json").items()}


def _to_adapter(values: Any) -> Adapter:
    return Adapter.model_validate({f: values[f] for f in _ADAPTER_FIELDS})


def _to_record(values: Any) -> TraceRecord:
    data = {f: values[f] for f in _RECORD_FIELDS}
    if data.get("inputs_provenance") is None:
        data["inputs_provenance"] = {}
    if data.get("data") is None:
        data["data"] = {}
    return TraceRecord.model_validate(data)
