"""The answer cache in the store: entries (pending, servable, withheld), their settlement at a
run's end, lookups, eviction, hits and stats.

Writes are idempotent: an entry's id is derived from its run, stage, attempt and key, so a
retried ``cache_keep`` writes it once, and a hit is recorded once per run, stage and attempt.
Only ``servable`` entries whose ``expires_at`` is still ahead are ever returned by a lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update

from armature_temporal.cache.models import CacheEntry
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import CacheEntryRow, CacheHitRow

__all__ = ["CacheStore"]

_FIELDS = list(CacheEntry.model_fields)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _entry(row: Any) -> CacheEntry:
    return CacheEntry.model_validate({f: row[f] for f in _FIELDS})


class CacheStore(StoreBase):
    """The TraceStore's answer cache (``cache_entries``, ``cache_hits``)."""

    def put_cache_entry(self, entry: CacheEntry, *, max_entries: int | None = None) -> bool:
        """Store ``entry`` (pending) unless its id is stored already; then keep at most
        ``max_entries`` of its spec and stage, evicting the oldest. Returns whether it was new."""
        table = table_of(CacheEntryRow)
        values = {**entry.model_dump(mode="json"), "settled_at": None}
        insert = (
            self._insert(table)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(table.c.id)
            .values(**values)
        )
        with self.engine.begin() as conn:
            new = conn.execute(insert).first() is not None
            if new and max_entries is not None:
                keep = (
                    select(table.c.id)
                    .where(table.c.spec_name == entry.spec_name, table.c.stage_id == entry.stage_id)
                    .order_by(table.c.created_at.desc(), table.c.id.desc())
                    .limit(max_entries)
                )
                conn.execute(
                    delete(table).where(
                        table.c.spec_name == entry.spec_name,
                        table.c.stage_id == entry.stage_id,
                        table.c.id.not_in(keep.scalar_subquery()),
                    )
                )
        return new

    def cache_entry(self, entry_id: str) -> CacheEntry | None:
        table = table_of(CacheEntryRow)
        with self.engine.connect() as conn:
            row = conn.execute(select(table).where(table.c.id == entry_id)).mappings().first()
        return None if row is None else _entry(row)

    def cache_exact(
        self, exact_key: str, *, spec_name: str | None = None, now: str | None = None
    ) -> CacheEntry | None:
        """The newest servable, unexpired entry with this exact key (of ``spec_name``: a spec
        is only served its own entries), or None."""
        table = table_of(CacheEntryRow)
        query = (
            select(table)
            .where(
                table.c.exact_key == exact_key,
                *([table.c.spec_name == spec_name] if spec_name is not None else []),
                table.c.status == "servable",
                table.c.expires_at > (now or _now()),
            )
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _entry(row)

    def cache_version(self, partition: str) -> tuple[int, str | None]:
        """A token that changes when the partition's servable entries do: (how many, newest
        settlement); the worker's semantic index is rebuilt when it changes."""
        table = table_of(CacheEntryRow)
        query = select(func.count(), func.max(table.c.settled_at)).where(
            table.c.partition == partition, table.c.status == "servable"
        )
        with self.engine.connect() as conn:
            count, newest = conn.execute(query).one()
        return int(count), newest

    def cache_vectors(
        self, partition: str, embedding_model: str, *, now: str | None = None
    ) -> list[tuple[str, list[float], str]]:
        """``(id, embedding, expires_at)`` of the partition's servable, unexpired entries
        embedded with ``embedding_model``."""
        table = table_of(CacheEntryRow)
        query = select(table.c.id, table.c.embedding, table.c.expires_at).where(
            table.c.partition == partition,
            table.c.status == "servable",
            table.c.embedding_model == embedding_model,
            table.c.expires_at > (now or _now()),
        )
        with self.engine.connect() as conn:
            return [(r[0], list(r[1]), r[2]) for r in conn.execute(query) if r[1]]

    def settle_cache(
        self, run_id: str, *, reason: str | None, withheld: dict[str, str] | None = None
    ) -> dict[str, int]:
        """Settle the run's pending entries: withheld with ``reason`` (all of them) or with
        ``withheld[stage]`` (that stage's), servable otherwise. Returns the counts."""
        table = table_of(CacheEntryRow)
        withheld = withheld or {}
        now = _now()
        counts = {"servable": 0, "withheld": 0}
        pending = [table.c.run_id == run_id, table.c.status == "pending"]
        with self.engine.begin() as conn:
            if reason is not None:
                done = conn.execute(
                    update(table)
                    .where(*pending)
                    .values(status="withheld", reason=reason, settled_at=now)
                )
                counts["withheld"] = done.rowcount
                return counts
            for stage_id, why in withheld.items():
                done = conn.execute(
                    update(table)
                    .where(*pending, table.c.stage_id == stage_id)
                    .values(status="withheld", reason=why, settled_at=now)
                )
                counts["withheld"] += done.rowcount
            done = conn.execute(
                update(table).where(*pending).values(status="servable", settled_at=now)
            )
            counts["servable"] = done.rowcount
        return counts

    def record_cache_hit(
        self,
        *,
        entry: CacheEntry,
        run_id: str,
        stage_id: str,
        attempt_key: str,
        kind: str,
        similarity: float,
        task: str,
        at: str | None = None,
    ) -> bool:
        """Record a served answer (once per run, stage and attempt) and count it on the entry."""
        hits, entries = table_of(CacheHitRow), table_of(CacheEntryRow)
        row = {
            "run_id": run_id,
            "stage_id": stage_id,
            "attempt_key": attempt_key,
            "entry_id": entry.id,
            "spec_name": entry.spec_name,
            "kind": kind,
            "similarity": similarity,
            "task": task,
            "saved_cost_usd": entry.cost_usd,
            "at": at or _now(),
        }
        insert = (
            self._insert(hits)
            .on_conflict_do_nothing(index_elements=["run_id", "stage_id", "attempt_key"])
            .returning(hits.c.entry_id)
            .values(**row)
        )
        with self.engine.begin() as conn:
            if conn.execute(insert).first() is None:
                return False
            conn.execute(
                update(entries).where(entries.c.id == entry.id).values(hits=entries.c.hits + 1)
            )
        return True

    def cache_entries(
        self, spec_name: str, *, stage_id: str | None = None, limit: int | None = None
    ) -> list[CacheEntry]:
        """The spec's entries (of ``stage_id``), newest first."""
        table = table_of(CacheEntryRow)
        query = select(table).where(table.c.spec_name == spec_name)
        if stage_id is not None:
            query = query.where(table.c.stage_id == stage_id)
        query = query.order_by(table.c.created_at.desc(), table.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [_entry(r) for r in conn.execute(query).mappings()]

    def cache_hits(self, spec_name: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The spec's recorded hits, newest first, each with its entry's task and source run."""
        hits, entries = table_of(CacheHitRow), table_of(CacheEntryRow)
        query = (
            select(hits, entries.c.task.label("source_task"), entries.c.run_id.label("source_run"))
            .join(entries, entries.c.id == hits.c.entry_id, isouter=True)
            .where(hits.c.spec_name == spec_name)
            .order_by(hits.c.at.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def clear_cache(self, spec_name: str, *, stage_ids: Sequence[str] | None = None) -> int:
        """Delete the spec's entries (of ``stage_ids``); their recorded hits stay. Returns how
        many entries went."""
        table = table_of(CacheEntryRow)
        query = delete(table).where(table.c.spec_name == spec_name)
        if stage_ids is not None:
            query = query.where(table.c.stage_id.in_(list(stage_ids)))
        with self.engine.begin() as conn:
            return conn.execute(query).rowcount
