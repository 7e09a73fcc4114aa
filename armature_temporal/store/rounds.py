"""The improvement loop's history in the store: every round (with its verification, drift
score and effort report) and every proposal applied to a spec file."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from armature_temporal.improve.models import (
    AppliedChange,
    ImproveRound,
    RoundEffort,
    Verification,
)
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import AppliedChangeRow, ImproveRoundRow, RunRow, TraceRow

__all__ = ["RoundStore"]

_ROUND_FIELDS = list(ImproveRound.model_fields)
#: The record kinds that are model calls a run paid for (as a run's token totals count them).
CALL_KINDS = ("attempt", "evaluation", "critique", "context")
_APPLIED_FIELDS = list(AppliedChange.model_fields)


class RoundStore(StoreBase):
    """The TraceStore's improvement rounds and applied changes."""

    def save_round(self, round_: ImproveRound) -> None:
        """Insert a round, or replace the one with its id (a retried activity, or the round's
        later phase updating its status)."""
        table = table_of(ImproveRoundRow)
        row = round_.model_dump(mode="json")
        statement = self._insert(table).values(**row)
        statement = statement.on_conflict_do_update(
            index_elements=["id"], set_={k: statement.excluded[k] for k in row if k != "id"}
        )
        with self.engine.begin() as conn:
            conn.execute(statement)

    def set_round_status(self, round_id: str, status: str) -> None:
        """Change a stored round's status (nothing happens if there is no such round)."""
        table = table_of(ImproveRoundRow)
        with self.engine.begin() as conn:
            conn.execute(table.update().where(table.c.id == round_id).values(status=status))

    def set_round_effort(self, round_id: str, effort: RoundEffort) -> None:
        """Keep a stored round's effort report (nothing happens if there is no such round)."""
        table = table_of(ImproveRoundRow)
        with self.engine.begin() as conn:
            conn.execute(
                table.update()
                .where(table.c.id == round_id)
                .values(effort=effort.model_dump(mode="json"))
            )

    def round_spend(self, round_id: str) -> tuple[int, int]:
        """The runs a round started and their model calls' tokens (prompt + completion), from
        the store: every run whose id lies under ``<round_id>/`` (its verification runs, as
        workflows/paired.py names them, and their fan-out children)."""
        runs = table_of(RunRow)
        records = table_of(TraceRow)
        prefix = f"{round_id}/"
        count = select(func.count()).where(runs.c.run_id.startswith(prefix, autoescape=True))
        tokens = select(
            func.coalesce(func.sum(records.c.prompt_tokens + records.c.completion_tokens), 0)
        ).where(
            records.c.run_id.startswith(prefix, autoescape=True),
            records.c.kind.in_(CALL_KINDS),
        )
        with self.engine.connect() as conn:
            return int(conn.execute(count).scalar_one()), int(conn.execute(tokens).scalar_one())

    def rounds(self, spec: str, *, limit: int = 200) -> list[ImproveRound]:
        """A spec's rounds, oldest first."""
        table = table_of(ImproveRoundRow)
        query = (
            select(*[table.c[f] for f in _ROUND_FIELDS])
            .where(table.c.spec_name == spec)
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = [_to_round(r) for r in conn.execute(query).mappings()]
        return rows[::-1]

    def ever_fixed(self, spec: str) -> set[str]:
        """Every failure code any round verified fixed for ``spec``."""
        table = table_of(ImproveRoundRow)
        query = select(table.c.verification).where(table.c.spec_name == spec)
        fixed: set[str] = set()
        with self.engine.connect() as conn:
            for (value,) in conn.execute(query):
                if value:
                    fixed.update(value.get("verified_fixes") or [])
        return fixed

    def record_applied(self, change: AppliedChange) -> None:
        """Keep that a proposal was written to a spec file (once per proposal)."""
        table = table_of(AppliedChangeRow)
        statement = (
            self._insert(table)
            .values(**change.model_dump(mode="json"))
            .on_conflict_do_nothing(index_elements=["proposal_id"])
        )
        with self.engine.begin() as conn:
            conn.execute(statement)

    def applied_changes(self, spec: str) -> list[AppliedChange]:
        """The proposals applied to ``spec``, oldest first."""
        table = table_of(AppliedChangeRow)
        query = (
            select(*[table.c[f] for f in _APPLIED_FIELDS])
            .where(table.c.spec_name == spec)
            .order_by(table.c.applied_at, table.c.proposal_id)
        )
        with self.engine.connect() as conn:
            return [AppliedChange.model_validate(dict(r)) for r in conn.execute(query).mappings()]

    def last_applied(self, spec: str) -> AppliedChange | None:
        """The change applied to ``spec`` most recently, if any."""
        found = self.applied_changes(spec)
        return found[-1] if found else None


def _to_round(values: Any) -> ImproveRound:
    data = {f: values[f] for f in _ROUND_FIELDS}
    if data["verification"] is not None:
        data["verification"] = Verification.model_validate(data["verification"])
    if data["effort"] is not None:
        data["effort"] = RoundEffort.model_validate(data["effort"])
    return ImproveRound.model_validate(data)
