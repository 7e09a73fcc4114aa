"""Improvement proposals in the store: saved idempotently, listed, applied or dismissed once.

Every row carries a MAC over the proposal and its status (:mod:`~.signed_rows`); the readers
say whether it checks (:class:`StoredProposal`), and a status change re-MACs only a row that
checked, so dismissing or force-applying a forged row never makes it trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Executable, select, update

from armature_temporal.improve.models import Proposal
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.engine import StoreError
from armature_temporal.store.schema import ProposalRow
from armature_temporal.store.signed_rows import proposal_problem, proposal_row_mac

if TYPE_CHECKING:
    from armature_temporal.store.keys import TraceKey

__all__ = ["ProposalError", "ProposalStore", "StoredProposal"]

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


@dataclass(frozen=True)
class StoredProposal:
    """A proposal as the store has it. ``record_problem`` is None when its row's MAC checks,
    else why it cannot be trusted (edited in the store, no MAC, no key here)."""

    proposal: Proposal
    status_changed_at: str | None
    record_problem: str | None

    @property
    def trusted(self) -> bool:
        return self.record_problem is None


class ProposalStore(StoreBase):
    """The TraceStore's improvement proposals."""

    if TYPE_CHECKING:

        def trace_key(self, *, create: bool = False) -> TraceKey | None: ...

    @cached_property
    def _insert_proposals(self) -> Executable:
        return self._insert_new(table_of(ProposalRow))

    def save_proposals(self, proposals: Sequence[Proposal]) -> int:
        """Insert proposals, each with its MAC, leaving any whose id is already stored as it
        is (a retried activity re-sends the same ids; an applied or dismissed one keeps its
        status). Returns the number of new proposals."""
        key = self.trace_key(create=True)
        assert key is not None
        return self._save_new(
            self._insert_proposals,
            proposals,
            lambda p: {**p.model_dump(mode="json"), "mac": proposal_row_mac(key, p, None)},
        )

    def stored_proposals(
        self, *, spec: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[StoredProposal]:
        """Proposals, newest first, each checked against its MAC; of one spec and/or in one
        status if given."""
        table = table_of(ProposalRow)
        query = self._select_proposals().order_by(table.c.created_at.desc(), table.c.id.desc())
        if spec is not None:
            query = query.where(table.c.spec_name == spec)
        if status is not None:
            query = query.where(table.c.status == status)
        key = self.trace_key()
        with self.engine.connect() as conn:
            rows = conn.execute(query.limit(limit)).mappings().all()
        return [_stored(key, row) for row in rows]

    def stored_proposal(self, proposal_id: str) -> StoredProposal | None:
        """One proposal, checked against its MAC."""
        query = self._select_proposals().where(table_of(ProposalRow).c.id == proposal_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _stored(self.trace_key(), row)

    def proposals(
        self, *, spec: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[Proposal]:
        """Proposals, newest first; of one spec and/or in one status if given (unchecked:
        :meth:`stored_proposals` says which rows check)."""
        return [s.proposal for s in self.stored_proposals(spec=spec, status=status, limit=limit)]

    def trusted_proposals(self, *, spec: str | None = None, limit: int = 50) -> list[Proposal]:
        """Proposals whose record checks, newest first: what a round may learn from (its
        history, the refiner's prompt); a forged or edited row is left out."""
        return [s.proposal for s in self.stored_proposals(spec=spec, limit=limit) if s.trusted]

    def proposal(self, proposal_id: str) -> Proposal | None:
        stored = self.stored_proposal(proposal_id)
        return None if stored is None else stored.proposal

    @staticmethod
    def _select_proposals() -> Any:
        table = table_of(ProposalRow)
        return select(
            *[table.c[f] for f in _PROPOSAL_FIELDS], table.c.status_changed_at, table.c.mac
        )

    def set_proposal_status(
        self,
        proposal_id: str,
        status: Literal["applied", "dismissed"],
        *,
        expected: str = "proposed",
    ) -> Proposal:
        """Move a proposal from ``expected`` to ``status`` and record when; returns it updated.

        A conditional ``UPDATE``, so of two concurrent callers exactly one succeeds. The row's
        MAC is renewed for its new status only if it checked before: a row that did not check
        stays unverified. Raises :class:`ProposalError` if there is no such proposal or its
        status is not ``expected`` (nothing is changed then).
        """
        table = table_of(ProposalRow)
        key = self.trace_key(create=True)
        assert key is not None
        with self.engine.begin() as conn:
            row = (
                conn.execute(self._select_proposals().where(table.c.id == proposal_id))
                .mappings()
                .first()
            )
            changed = None
            if row is not None and row["status"] == expected:
                before = _stored(key, row)
                now = datetime.now(UTC).isoformat()
                after = before.proposal.model_copy(update={"status": status})
                mac = proposal_row_mac(key, after, now) if before.trusted else row["mac"]
                changed = conn.execute(
                    update(table)
                    .where(table.c.id == proposal_id, table.c.status == expected)
                    .values(status=status, status_changed_at=now, mac=mac)
                    .returning(table.c.id)
                ).first()
            if changed is not None:
                return after
            found = conn.execute(
                select(table.c.status, table.c.status_changed_at).where(table.c.id == proposal_id)
            ).first()
        if found is None:
            raise ProposalError(
                f"no proposal {proposal_id!r}; list them with `armature proposals`",
                proposal_id=proposal_id,
            )
        current, since = found
        if current != "proposed":
            when = f" (since {since})" if since else ""
            message = f"proposal {proposal_id} is already {current}{when}; nothing changed"
        else:
            message = f"proposal {proposal_id} is {current}, not {expected}; nothing changed"
        raise ProposalError(message, proposal_id=proposal_id, status=current, changed_at=since)


_LISTS = ("predicted_fixes", "predicted_regressions", "base_failures")


def _stored(key: TraceKey | None, row: Any) -> StoredProposal:
    proposal = _to_proposal(row)
    since = row["status_changed_at"]
    return StoredProposal(proposal, since, proposal_problem(key, proposal, since, row["mac"]))


def _to_proposal(values: Any) -> Proposal:
    data = {f: values[f] for f in _PROPOSAL_FIELDS}
    for f in _LISTS:  # rows from before migration 11 have none
        if data[f] is None:
            data[f] = []
    data["lane_reasons"] = data["lane_reasons"] or []  # rows from before migration 12
    return Proposal.model_validate(data)
