"""What the TraceStore's parts share: the engine, the dialect's INSERT and guarded updates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine, Executable, Table, select, update
from sqlalchemy.dialects import postgresql, sqlite

from armature_temporal.store.schema import Base

__all__ = ["StoreBase", "table_of"]


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


_Item = TypeVar("_Item", bound=_Identified)


def table_of(model: type[Base]) -> Table:
    """The Core table of an ORM model."""
    table = model.__table__
    assert isinstance(table, Table)
    return table


class StoreBase:
    """The engine and the statements every part of the store builds on."""

    engine: Engine

    def _insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        """``INSERT`` in the engine's dialect (SQLite or PostgreSQL: both have ON CONFLICT)."""
        insert = postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert
        return insert(table)

    def _insert_new(self, table: Table) -> Executable:
        """``INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id``: what is new comes back."""
        statement: Executable = (
            self._insert(table).on_conflict_do_nothing(index_elements=["id"]).returning(table.c.id)
        )
        return statement

    def _save_new(
        self,
        statement: Executable,
        items: Sequence[_Item],
        row: Callable[[_Item], dict[str, Any]],
    ) -> int:
        """Insert ``items`` (the first of each id) with ``statement`` from :meth:`_insert_new`,
        leaving any whose id is already stored as it is. Returns the number of new rows."""
        unique: dict[str, _Item] = {}
        for item in items:
            unique.setdefault(item.id, item)
        if not unique:
            return 0
        rows = [row(item) for item in unique.values()]
        with self.engine.begin() as conn:
            return len(conn.execute(statement, rows).all())

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
