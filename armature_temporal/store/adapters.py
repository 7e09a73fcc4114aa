"""Fine-tune adapters in the store: saved idempotently, listed, the latest found, retired."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal

from sqlalchemy import Executable, Table, select

from armature_temporal.finetune.models import Adapter
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.engine import StoreError
from armature_temporal.store.schema import AdapterRow

__all__ = ["AdapterError", "AdapterStore"]

_ADAPTER_FIELDS = [name for name in Adapter.model_fields]
#: Adapter fields stored under another column name.
_ADAPTER_COLUMNS = {"stage": "stage_id"}


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


class AdapterStore(StoreBase):
    """The TraceStore's fine-tune adapters."""

    @cached_property
    def _insert_adapters(self) -> Executable:
        return self._insert_new(table_of(AdapterRow))

    def save_adapters(self, adapters: Sequence[Adapter]) -> int:
        """Insert adapters, leaving any whose id is already stored as it is (a retried activity
        re-sends the same ids; a retired one stays retired). Returns the number of new
        adapters."""
        return self._save_new(self._insert_adapters, adapters, _adapter_row)

    def adapters(
        self,
        *,
        spec: str | None = None,
        stage: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[Adapter]:
        """Adapters, newest first; of one spec, one stage and/or in one status if given."""
        table = table_of(AdapterRow)
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
        table = table_of(AdapterRow)
        query = select(*_adapter_columns(table)).where(table.c.id == adapter_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _to_adapter(row)

    def latest_adapter(self, spec: str, stage: str) -> Adapter | None:
        """The newest verified, active adapter trained for ``stage`` of ``spec`` (what a
        ``provider: local`` tier with ``adapter: latest`` loads), or ``None``."""
        table = table_of(AdapterRow)
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
        table = table_of(AdapterRow)
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
