"""The TraceStore: runs, their hash-chained trace records and gate decisions, on SQLAlchemy.

Writes are idempotent — a retried activity re-sends records with the same ``(run_id, seq)`` and
they are ignored — and safe under many concurrent workers (each run's chain is computed by its
workflow, so writers never read-modify-write a shared row).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Session

from armature_temporal.hqs import median, run_hqs
from armature_temporal.store.engine import StoreError, database_url, make_engine
from armature_temporal.store.migrations import migrate
from armature_temporal.store.schema import GateDecisionRow, RunRow, TraceRow
from armature_temporal.traces import ChainBreak, TraceRecord, verify_chain

__all__ = ["LATENCY_WINDOW", "TraceStore"]

#: Runs of the same spec version that make up the rolling latency baseline.
LATENCY_WINDOW = 50
_RECORD_FIELDS = [name for name in TraceRecord.model_fields]


class TraceStore:
    """Open (and migrate) the store at ``url`` (default: ``$ARMATURE_DB_URL`` or SQLite)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = database_url(url)
        self.engine: Engine = make_engine(self.url)
        try:
            migrate(self.engine)
        except (DatabaseError, OperationalError) as exc:
            raise StoreError(
                f"cannot open the trace store at {self._safe_url()}: {exc.orig or exc}. If it "
                "is a corrupt SQLite file, move it aside (a new one is created); for PostgreSQL "
                "check that the server runs and the URL is right"
            ) from None

    def _safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    # --- writing ---------------------------------------------------------------------------

    def write(self, records: Sequence[TraceRecord]) -> int:
        """Insert records, ignoring ones already stored; update run summaries. Returns the
        number of new records."""
        if not records:
            return 0
        rows = [r.model_dump(mode="json", exclude={"hash"}) | {"hash": r.hash} for r in records]
        insert = postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert
        with self.engine.begin() as conn:
            result = conn.execute(
                insert(TraceRow)
                .values(rows)
                .on_conflict_do_nothing(index_elements=["run_id", "seq"])
                .returning(TraceRow.seq)
            )
            inserted = len(result.fetchall())
            for record in records:
                if record.kind == "run_start":
                    self._upsert_run_start(conn, record, insert)
                elif record.kind == "gate":
                    conn.execute(
                        insert(GateDecisionRow)
                        .values(
                            run_id=record.run_id,
                            stage_id=record.stage_id or "",
                            decision=record.data.get("decision", ""),
                            decided_by=record.data.get("by"),
                            comment=record.data.get("comment"),
                            decided_at=record.recorded_at,
                        )
                        .on_conflict_do_nothing(index_elements=["run_id", "stage_id"])
                    )
            for record in records:
                if record.kind == "run_end":
                    self._finish_run(conn, record)
        return inserted

    @staticmethod
    def _upsert_run_start(conn: Any, record: TraceRecord, insert: Any) -> None:
        conn.execute(
            insert(RunRow)
            .values(
                run_id=record.run_id,
                spec_name=record.spec_name,
                spec_hash=record.spec_hash,
                spec_version=record.data.get("spec_version"),
                policy_version=record.policy_version,
                parent_run_id=record.data.get("parent_run_id"),
                status="running",
                inputs=record.data.get("inputs"),
                started_at=record.recorded_at,
                prompt_tokens=0,
                completion_tokens=0,
                cost_usd=0.0,
            )
            .on_conflict_do_nothing(index_elements=["run_id"])
        )

    def _finish_run(self, conn: Any, end: TraceRecord) -> None:
        table = TraceRow.__table__
        rows = conn.execute(
            select(table).where(table.c.run_id == end.run_id).order_by(table.c.seq)
        ).all()
        records = [_to_record(row._mapping) for row in rows]
        p50 = median(
            conn.execute(
                select(RunRow.latency_ms)
                .where(RunRow.spec_hash == end.spec_hash, RunRow.latency_ms.is_not(None))
                .order_by(RunRow.started_at.desc())
                .limit(LATENCY_WINDOW)
            ).scalars()
        )
        score = run_hqs(records, p50 or end.latency_ms or None)
        attempts = [r for r in records if r.kind == "attempt"]
        conn.execute(
            update(RunRow)
            .where(RunRow.run_id == end.run_id)
            .values(
                status=end.status or "completed",
                reason=end.error,
                outputs=end.output,
                finished_at=end.recorded_at,
                latency_ms=end.latency_ms,
                hqs=score.hqs,
                prompt_tokens=sum(r.prompt_tokens for r in attempts),
                completion_tokens=sum(r.completion_tokens for r in attempts),
                cost_usd=sum(r.cost_usd for r in attempts),
                chain_head=end.hash,
            )
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
        """Check every chain (or the given runs'). Returns (runs checked, breaks)."""
        ids = list(run_ids) if run_ids is not None else self.run_ids()
        breaks: list[ChainBreak] = []
        for run_id in ids:
            records = self.records(run_id)
            if not records:
                breaks.append(
                    ChainBreak(
                        run_id=run_id,
                        seq=None,
                        problem="deleted",
                        detail="no trace records for this run",
                    )
                )
                continue
            found = verify_chain(run_id, records)
            if found is None:
                summary = self.run(run_id)
                head = summary.chain_head if summary is not None else None
                if head and head != records[-1].hash:
                    found = ChainBreak(
                        run_id=run_id,
                        seq=records[-1].seq + 1,
                        problem="deleted",
                        detail="the run's recorded chain head is not its last "
                        "record: records at the end were removed",
                    )
            if found is not None:
                breaks.append(found)
        return len(ids), breaks


def _to_record(values: Any) -> TraceRecord:
    data = {f: values[f] for f in _RECORD_FIELDS}
    if data.get("inputs_provenance") is None:
        data["inputs_provenance"] = {}
    if data.get("data") is None:
        data["data"] = {}
    return TraceRecord.model_validate(data)
