"""Cross-run memory in the store: a spec's captured stage outputs, kept per memory name in a
rolling window per ``stage.key``, each value with the run, stage and time it came from."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cached_property

from sqlalchemy import Executable, delete, select, text

from armature_temporal.runtime.models import MemoryEntry
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import MemoryEntryRow

__all__ = ["MemoryStore"]


class MemoryStore(StoreBase):
    """The TraceStore's cross-run memory (``memory_entries``)."""

    @cached_property
    def _insert_memory(self) -> Executable:
        table = table_of(MemoryEntryRow)
        statement: Executable = (
            self._insert(table)
            .on_conflict_do_nothing(index_elements=["run_id", "stage_id", "capture_key"])
            .returning(table.c.id)
        )
        return statement

    def remember(
        self, memory_name: str, entries: Sequence[MemoryEntry], limits: Mapping[str, int]
    ) -> int:
        """Keep ``entries`` under ``memory_name``, then trim each of their ``stage.key`` to its
        newest ``limits[stage.key]`` values (no limit: all are kept). Returns the number of
        new values.

        Idempotent: a value is stored once per run, stage and key (a retried activity, or a
        replayed run, re-sends the same ones), and trimming twice trims nothing more. One
        transaction, no read-modify-write; concurrent captures of one window take turns.
        """
        if not entries:
            return 0
        table = table_of(MemoryEntryRow)
        rows = [
            {
                "memory_name": memory_name,
                "stage_id": e.stage,
                "capture_key": e.key,
                "value": e.value,
                "run_id": e.run_id,
                "recorded_at": e.recorded_at,
            }
            for e in entries
        ]
        windows = sorted({(e.stage, e.key) for e in entries})
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Captures of one window take turns (SQLite's writers already do): two trims
                # deleting the same rows in different orders would deadlock. Sorted, so
                # captures of several windows cannot wait on each other in a cycle.
                for stage, key in windows:
                    conn.execute(
                        text("SELECT pg_advisory_xact_lock(hashtext(:window))"),
                        {"window": f"armature-memory:{memory_name}/{stage}/{key}"},
                    )
            new = len(conn.execute(self._insert_memory, rows).all())
            for stage, key in windows:
                limit = limits.get(f"{stage}.{key}")
                if limit is None:
                    continue
                evicted = (
                    select(table.c.id)
                    .where(
                        table.c.memory_name == memory_name,
                        table.c.stage_id == stage,
                        table.c.capture_key == key,
                    )
                    .order_by(table.c.recorded_at.desc(), table.c.id.desc())
                    .offset(limit)
                )
                conn.execute(delete(table).where(table.c.id.in_(evicted)))
        return new

    def memory(
        self, memory_name: str, limits: Mapping[str, int] | None = None
    ) -> list[MemoryEntry]:
        """The values kept under ``memory_name``, oldest first; of each ``stage.key`` in
        ``limits`` only its newest ``limits[stage.key]``."""
        table = table_of(MemoryEntryRow)
        query = (
            select(
                table.c.stage_id,
                table.c.capture_key,
                table.c.value,
                table.c.run_id,
                table.c.recorded_at,
            )
            .where(table.c.memory_name == memory_name)
            .order_by(table.c.recorded_at, table.c.id)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        total = Counter(f"{stage}.{key}" for stage, key, *_ in rows)
        skip = {name: max(0, n - (limits or {}).get(name, n)) for name, n in total.items()}
        kept: list[MemoryEntry] = []
        for stage, key, value, run_id, recorded_at in rows:
            name = f"{stage}.{key}"
            if skip[name] > 0:  # older than the window
                skip[name] -= 1
                continue
            kept.append(
                MemoryEntry(
                    stage=stage, key=key, value=value, run_id=run_id, recorded_at=recorded_at
                )
            )
        return kept
