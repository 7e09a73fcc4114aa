"""The experience memory in the store: heuristics, their status changes and their rewards.

Every write is one transaction. Adding a heuristic twice merges its provenance (idempotent);
a status change is checked against the life cycle
(:func:`~armature_temporal.experience.models.allowed_transitions`) and logged as an event (so is
a re-verification, which changes no status: :meth:`HeuristicStore.record_heuristic_event`); a
reward counts once per heuristic and key, so a retried activity rewards once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, or_, select, update

from armature_temporal.experience.models import (
    HEURISTIC_STATUSES,
    Heuristic,
    HeuristicError,
    HeuristicEvent,
    allowed_transitions,
)
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import HeuristicEventRow, HeuristicRewardRow, HeuristicRow

__all__ = ["HeuristicStore"]

_FIELDS = list(Heuristic.model_fields)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _to_heuristic(row: Any) -> Heuristic:
    return Heuristic.model_validate({f: row[f] for f in _FIELDS})


def _merged(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """``old`` then what ``new`` adds, in order, each once."""
    return list(dict.fromkeys([*old, *new]))


class HeuristicStore(StoreBase):
    """The TraceStore's heuristics (``heuristics``, ``heuristic_events``,
    ``heuristic_rewards``)."""

    def _locked(self, conn: Connection, heuristic_id: str) -> Any:
        """The heuristic's row, locked for this transaction (SQLite: writers take turns)."""
        table = table_of(HeuristicRow)
        query = select(table).where(table.c.id == heuristic_id)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()
        return conn.execute(query).mappings().first()

    def _log(self, conn: Connection, event: HeuristicEvent) -> None:
        values = event.model_dump(mode="json")
        values["actor"] = values.pop("by")
        conn.execute(table_of(HeuristicEventRow).insert().values(**values))

    def add_heuristic(self, h: Heuristic, *, by: str, reason: str) -> Heuristic:
        """Insert ``h`` and log its arrival (``by``, ``reason``); returns the stored one.

        Idempotent: if its id is stored already, only its provenance is merged in (status,
        text and posterior stay as they are) and the stored heuristic is returned.
        """
        table = table_of(HeuristicRow)
        insert = (
            self._insert(table)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(table.c.id)
            .values(**h.model_dump(mode="json"))
        )
        with self.engine.begin() as conn:
            if conn.execute(insert).first() is not None:
                self._log(
                    conn,
                    HeuristicEvent(
                        heuristic_id=h.id,
                        at=h.created_at,
                        from_status=None,
                        to_status=h.status,
                        by=by,
                        reason=reason,
                    ),
                )
                return h
            row = self._locked(conn, h.id)
            return self._merge(conn, table, row, h.provenance)

    def _merge(
        self, conn: Connection, table: Table, row: Any, provenance: Sequence[str]
    ) -> Heuristic:
        merged = _merged(row["provenance"] or [], provenance)
        if merged == list(row["provenance"] or []):
            return _to_heuristic(row)
        changed = (
            update(table)
            .where(table.c.id == row["id"])
            .values(provenance=merged, updated_at=_now())
            .returning(*(table.c[f] for f in _FIELDS))
        )
        return _to_heuristic(conn.execute(changed).mappings().one())

    def merge_heuristic(self, into_id: str, provenance: Sequence[str]) -> Heuristic:
        """Add ``provenance`` (run ids) to heuristic ``into_id``'s, each once; returns it."""
        table = table_of(HeuristicRow)
        with self.engine.begin() as conn:
            row = self._locked(conn, into_id)
            if row is None:
                raise self._unknown(into_id)
            return self._merge(conn, table, row, provenance)

    def heuristic(self, heuristic_id: str) -> Heuristic | None:
        table = table_of(HeuristicRow)
        with self.engine.connect() as conn:
            row = conn.execute(select(table).where(table.c.id == heuristic_id)).mappings().first()
        return None if row is None else _to_heuristic(row)

    def heuristics(
        self, spec_name: str, *, stage_id: str | None = None, status: str | None = None
    ) -> list[Heuristic]:
        """The heuristics of ``spec_name``, oldest first; with ``stage_id``, those for that
        stage and the spec-wide ones (stage None); with ``status``, only those in it."""
        table = table_of(HeuristicRow)
        query = (
            select(table)
            .where(table.c.spec_name == spec_name)
            .order_by(table.c.created_at, table.c.id)
        )
        if stage_id is not None:
            query = query.where(or_(table.c.stage_id == stage_id, table.c.stage_id.is_(None)))
        if status is not None:
            query = query.where(table.c.status == status)
        with self.engine.connect() as conn:
            return [_to_heuristic(row) for row in conn.execute(query).mappings()]

    def heuristic_events(self, heuristic_id: str) -> list[HeuristicEvent]:
        """Heuristic ``heuristic_id``'s events (status changes, re-verifications), oldest
        first (its arrival first)."""
        table = table_of(HeuristicEventRow)
        query = select(table).where(table.c.heuristic_id == heuristic_id).order_by(table.c.id)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            HeuristicEvent(
                heuristic_id=r["heuristic_id"],
                at=r["at"],
                from_status=r["from_status"],
                to_status=r["to_status"],
                by=r["actor"],
                reason=r["reason"],
                figures=r["figures"] or {},
            )
            for r in rows
        ]

    def set_heuristic_status(
        self,
        heuristic_id: str,
        to: str,
        *,
        by: str,
        reason: str,
        figures: dict[str, Any] | None = None,
    ) -> Heuristic:
        """Move a heuristic to status ``to`` and log it (who, why, the figures); returns it.

        Raises :class:`HeuristicError` for an unknown id, an unknown status, or a move the
        life cycle does not allow from the status it has now (nothing is changed then).
        """
        if to not in HEURISTIC_STATUSES:
            raise HeuristicError(
                f"unknown heuristic status {to!r}; use one of {', '.join(HEURISTIC_STATUSES)}"
            )
        table = table_of(HeuristicRow)
        with self.engine.begin() as conn:
            row = self._locked(conn, heuristic_id)
            if row is None:
                raise self._unknown(heuristic_id)
            current = row["status"]
            allowed = allowed_transitions(current, by)
            if to not in allowed:
                raise HeuristicError(_illegal(heuristic_id, current, to, by, allowed))
            now = _now()
            changed = (
                update(table)
                .where(table.c.id == heuristic_id)
                .values(status=to, updated_at=now)
                .returning(*(table.c[f] for f in _FIELDS))
            )
            stored = _to_heuristic(conn.execute(changed).mappings().one())
            self._log(
                conn,
                HeuristicEvent(
                    heuristic_id=heuristic_id,
                    at=now,
                    from_status=current,
                    to_status=to,
                    by=by,
                    reason=reason,
                    figures=figures or {},
                ),
            )
        return stored

    def record_heuristic_event(
        self,
        heuristic_id: str,
        *,
        by: str,
        reason: str,
        figures: dict[str, Any] | None = None,
    ) -> HeuristicEvent:
        """Log an event that leaves the heuristic's status as it is (``from_status`` and
        ``to_status`` both its current one), e.g. memory CI re-verifying a promoted one;
        returns the event. Raises :class:`HeuristicError` for an unknown id."""
        with self.engine.begin() as conn:
            row = self._locked(conn, heuristic_id)
            if row is None:
                raise self._unknown(heuristic_id)
            event = HeuristicEvent(
                heuristic_id=heuristic_id,
                at=_now(),
                from_status=row["status"],
                to_status=row["status"],
                by=by,
                reason=reason,
                figures=figures or {},
            )
            self._log(conn, event)
        return event

    def reward_heuristics(self, ids: Sequence[str], reward: float, *, key: str, at: str) -> int:
        """Reward each heuristic in ``ids`` with ``reward`` in [0, 1]: alpha += reward,
        beta += 1 - reward, uses += 1, last_used_at = ``at``. Once per heuristic and ``key``
        (a retried activity re-sends the same key); unknown ids are skipped. Returns how many
        rewards were new."""
        if not 0.0 <= reward <= 1.0:
            raise ValueError(f"reward {reward!r} is outside [0, 1]; rescale it before rewarding")
        heuristics, rewards = table_of(HeuristicRow), table_of(HeuristicRewardRow)
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        new = 0
        with self.engine.begin() as conn:
            known = set(
                conn.execute(select(heuristics.c.id).where(heuristics.c.id.in_(wanted))).scalars()
            )
            for heuristic_id in (i for i in wanted if i in known):
                first = conn.execute(
                    self._insert(rewards)
                    .values(heuristic_id=heuristic_id, reward_key=key, reward=reward, at=at)
                    .on_conflict_do_nothing(index_elements=["heuristic_id", "reward_key"])
                    .returning(rewards.c.heuristic_id)
                ).first()
                if first is None:
                    continue
                conn.execute(
                    update(heuristics)
                    .where(heuristics.c.id == heuristic_id)
                    .values(
                        alpha=heuristics.c.alpha + reward,
                        beta=heuristics.c.beta + (1.0 - reward),
                        uses=heuristics.c.uses + 1,
                        last_used_at=at,
                    )
                )
                new += 1
        return new

    @staticmethod
    def _unknown(heuristic_id: str) -> HeuristicError:
        return HeuristicError(
            f"no heuristic {heuristic_id!r} in the store; list them with "
            "`armature memory list SPEC`"
        )


def _illegal(heuristic_id: str, current: str, to: str, by: str, allowed: frozenset[str]) -> str:
    if current == to:
        return f"heuristic {heuristic_id} is already {current}; nothing changed"
    options = ", ".join(sorted(allowed)) if allowed else "nothing (it is final)"
    person = "" if by.startswith("person:") else "; a person may do more with `armature memory`"
    return (
        f"heuristic {heuristic_id} cannot go from {current} to {to} (by {by}): from {current} "
        f"it can go to {options}{person}"
    )
