"""The TraceStore's facts: what runs learnt, reconciled and kept with their history.

:meth:`FactStore.add_facts` reconciles candidates with the kept facts of their slots
(:func:`armature_temporal.knowledge.facts.reconcile`: the admission scan, then duplicate,
update, supersede or contradict) and writes the result in one transaction: new rows, the
status and link of each fact retired, each sighting (``fact_provenance``, only added to) and an
event per decision (``fact_events``). Writers of one namespace take turns (SQLite's
``BEGIN IMMEDIATE``; PostgreSQL: an advisory lock per namespace), so two runs finishing at once
cannot both think a slot empty. A fact's own row is never rewritten except to retire it, and
only from ``current``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, select, text, update

from armature_temporal.knowledge.facts_model import Fact, FactError, Provenance, entity_key
from armature_temporal.knowledge.facts_reconcile import (
    Reconciliation,
    merge_candidates,
    reconcile,
)
from armature_temporal.scanner import Finding
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import FactEventRow, FactProvenanceRow, FactRow

__all__ = ["FactStore"]

_FACT_COLUMNS = [
    "id",
    "namespace",
    "subject",
    "subject_name",
    "predicate",
    "value",
    "object_entity",
    "object_name",
    "text",
    "kind",
    "confidence",
    "cardinality",
    "supersedes",
    "status",
    "superseded_by",
    "previous",
    "recorded_at",
]


def _fact_row(fact: Fact) -> dict[str, Any]:
    row = {name: getattr(fact, name) for name in _FACT_COLUMNS}
    row["findings"] = [f.model_dump(mode="json") for f in fact.findings] or None
    return row


def _sighting_row(fact_id: str, p: Provenance) -> dict[str, Any]:
    return {"fact_id": fact_id, **p.model_dump()}


class FactStore(StoreBase):
    """Facts in the trace store (``facts``, ``fact_provenance``, ``fact_events``)."""

    def add_facts(self, candidates: Sequence[Fact], *, enabled: bool = True) -> Reconciliation:
        """Reconcile ``candidates`` with the facts kept and store the outcome; returns it.
        Idempotent: the same candidates again (a retried activity) change nothing."""
        if not candidates:
            return Reconciliation()
        facts, provenance = table_of(FactRow), table_of(FactProvenanceRow)
        events = table_of(FactEventRow)
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                for namespace in sorted({c.namespace for c in candidates}):
                    conn.execute(
                        text("SELECT pg_advisory_xact_lock(hashtext(:ns))"),
                        {"ns": f"armature-facts:{namespace}"},
                    )
            kept = self._slot_facts(conn, candidates)
            done = reconcile(kept, candidates, enabled=enabled)
            if done.added:
                conn.execute(
                    self._insert(facts).on_conflict_do_nothing(index_elements=["id"]),
                    [_fact_row(f) for f in done.added],
                )
            sightings = [_sighting_row(f.id, p) for f in done.added for p in f.provenance]
            sightings += [_sighting_row(fid, p) for fid, p in done.sightings]
            if sightings:
                conn.execute(
                    self._insert(provenance).on_conflict_do_nothing(
                        index_elements=["fact_id", "namespace", "run_id", "stage", "field"]
                    ),
                    sightings,
                )
            log: list[dict[str, Any]] = []
            added = {f.id: f for f in done.added}
            for fact in done.changed:
                conn.execute(
                    update(facts)
                    .where(facts.c.id == fact.id, facts.c.status == "current")
                    .values(status=fact.status, superseded_by=fact.superseded_by)
                )
                by = added.get(fact.superseded_by or "")
                at = by.recorded_at if by is not None else fact.recorded_at
                log.append(self._event(fact.id, at, fact.status, fact.superseded_by, None))
            for o in done.outcomes:
                if o.decision == "duplicate":
                    joined = [
                        p.model_dump()
                        for fid, p in done.sightings
                        if fid == o.target and p in o.fact.provenance
                    ]
                    if joined:  # a retried candidate joins nothing and says nothing
                        detail = {"provenance": joined}
                        log.append(
                            self._event(
                                o.target or "", o.fact.recorded_at, "duplicate", o.fact.id, detail
                            )
                        )
                    continue
                if o.fact.id not in added:
                    continue  # known already (a retried candidate that was rejected)
                detail = {"provenance": [p.model_dump() for p in o.fact.provenance]}
                if o.findings:
                    detail["findings"] = [f.model_dump(mode="json") for f in o.findings]
                log.append(self._event(o.fact.id, o.fact.recorded_at, o.decision, o.target, detail))
            if log:
                conn.execute(events.insert(), log)
        return done

    @staticmethod
    def _event(
        fact_id: str, at: str, event: str, other: str | None, detail: dict[str, Any] | None
    ) -> dict[str, Any]:
        return {"fact_id": fact_id, "at": at, "event": event, "other": other, "detail": detail}

    def _slot_facts(self, conn: Connection, candidates: Sequence[Fact]) -> list[Fact]:
        facts = table_of(FactRow)
        wanted: dict[str, set[str]] = defaultdict(set)
        for c in candidates:
            wanted[c.namespace].add(c.subject)
        slots = {c.slot for c in candidates}
        rows: list[Any] = []
        for namespace, subjects in wanted.items():
            rows += conn.execute(
                select(facts).where(
                    facts.c.namespace == namespace, facts.c.subject.in_(sorted(subjects))
                )
            ).all()
        return self._facts_of(
            conn, [r for r in rows if (r.namespace, r.subject, r.predicate) in slots]
        )

    def _facts_of(self, conn: Connection, rows: Iterable[Any]) -> list[Fact]:
        rows = list(rows)
        table = table_of(FactProvenanceRow)
        seen: dict[str, list[Provenance]] = defaultdict(list)
        ids = [r.id for r in rows]
        for start in range(0, len(ids), 500):
            found = conn.execute(
                select(table)
                .where(table.c.fact_id.in_(ids[start : start + 500]))
                .order_by(table.c.id)
            )
            for p in found:
                seen[p.fact_id].append(
                    Provenance.model_validate({k: getattr(p, k) for k in Provenance.model_fields})
                )
        return [
            Fact(
                **{name: getattr(r, name) for name in _FACT_COLUMNS},
                provenance=seen[r.id],
                findings=[Finding.model_validate(f) for f in r.findings or []],
            )
            for r in rows
        ]

    def facts(
        self,
        namespace: str | None = None,
        *,
        history: bool = False,
        entity: str | None = None,
    ) -> list[Fact]:
        """The current facts (``history``: every version, rejected ones too) of ``namespace``
        (else all), oldest first; ``entity``: only those about it or pointing at it."""
        table = table_of(FactRow)
        query = select(table).order_by(table.c.recorded_at, table.c.id)
        if namespace is not None:
            query = query.where(table.c.namespace == namespace)
        if not history:
            query = query.where(table.c.status == "current")
        if entity is not None:
            key = entity_key(entity)
            query = query.where((table.c.subject == key) | (table.c.object_entity == key))
        with self.engine.connect() as conn:
            return self._facts_of(conn, conn.execute(query).all())

    def fact(self, fact_id: str) -> Fact:
        """The fact ``fact_id``, any status.

        Raises:
            FactError: there is none (the message says how to list them).
        """
        table = table_of(FactRow)
        with self.engine.connect() as conn:
            found = self._facts_of(conn, conn.execute(select(table).where(table.c.id == fact_id)))
        if not found:
            raise FactError(
                f"no fact {fact_id!r} in this store; list the ids with "
                "`armature knowledge facts list --all`"
            )
        return found[0]

    def fact_slot(self, fact_id: str) -> list[Fact]:
        """Every version kept of ``fact_id``'s slot (namespace, subject, predicate), oldest
        first. Raises :class:`FactError` if there is no such fact."""
        fact = self.fact(fact_id)
        table = table_of(FactRow)
        query = (
            select(table)
            .where(
                table.c.namespace == fact.namespace,
                table.c.subject == fact.subject,
                table.c.predicate == fact.predicate,
            )
            .order_by(table.c.recorded_at, table.c.id)
        )
        with self.engine.connect() as conn:
            return self._facts_of(conn, conn.execute(query).all())

    def fact_events(self, fact_ids: Sequence[str]) -> list[dict[str, Any]]:
        """What happened to the facts named, in order."""
        table = table_of(FactEventRow)
        query = select(table).where(table.c.fact_id.in_(list(fact_ids))).order_by(table.c.id)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def fact_namespaces(self) -> dict[str, dict[str, int]]:
        """Each namespace with facts, and how many it has of each status."""
        table = table_of(FactRow)
        query = select(table.c.namespace, table.c.status, text("count(*)")).group_by(
            table.c.namespace, table.c.status
        )
        counts: dict[str, dict[str, int]] = defaultdict(dict)
        with self.engine.connect() as conn:
            for namespace, status, n in conn.execute(query):
                counts[namespace][status] = int(n)
        return dict(sorted(counts.items()))

    def merge_facts(self, theirs: Sequence[Fact], namespace: str) -> Reconciliation:
        """Bring ``theirs`` current facts (another store's or namespace's) into ``namespace``
        by the reconciliation rules, their provenance kept."""
        return self.add_facts(merge_candidates(theirs, namespace))
