"""Improvement proposals in the store: saved idempotently, listed, applied or dismissed once."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal

from sqlalchemy import Executable, select

from armature_temporal.improve.models import Proposal
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.engine import StoreError
from armature_temporal.store.schema import ProposalRow

__all__ = ["ProposalError", "ProposalStore"]

_PROPOSAL_FIELDS = [name for name in Proposal.model_fields]


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


class ProposalStore(StoreBase):
    """The TraceStore's improvement proposals."""

    @cached_property
    def _insert_proposals(self) -> Executable:
        return self._insert_new(table_of(ProposalRow))

    def save_proposals(self, proposals: Sequence[Proposal]) -> int:
        """Insert proposals, leaving any whose id is already stored as it is (a retried
        activity re-sends the same ids; an applied or dismissed one keeps its status). Returns
        the number of new proposals."""
        return self._save_new(
            self._insert_proposals, proposals, lambda p: p.model_dump(mode="json")
        )

    def proposals(
        self, *, spec: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[Proposal]:
        """Proposals, newest first; of one spec and/or in one status if given."""
        table = table_of(ProposalRow)
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
        table = table_of(ProposalRow)
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
        table = table_of(ProposalRow)
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


_LISTS = ("predicted_fixes", "predicted_regressions", "base_failures")


def _to_proposal(values: Any) -> Proposal:
    data = {f: values[f] for f in _PROPOSAL_FIELDS}
    for f in _LISTS:  # rows from before migration 11 have none
        if data[f] is None:
            data[f] = []
    data["lane_reasons"] = data["lane_reasons"] or []  # rows from before migration 12
    return Proposal.model_validate(data)
