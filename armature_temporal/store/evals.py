"""``armature eval``'s results in the store: saved once each, listed per spec, and the latest
per spec version for the dashboard."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import EvalRow

__all__ = ["EvalStore"]

_LISTED = [
    "id",
    "spec_name",
    "spec_version",
    "spec_hash",
    "cases_file",
    "created_at",
    "repeat",
    "cases",
    "passed",
    "failed",
    "errors",
    "pass_rate",
]


class EvalStore(StoreBase):
    """The TraceStore's eval results."""

    def save_eval(self, summary: dict[str, Any]) -> None:
        """Keep one eval (:meth:`EvalResult.summary`'s data); an id already kept is left as
        it is."""
        counts = summary["counts"]
        row = {
            "id": summary["id"],
            "spec_name": summary["spec_name"],
            "spec_version": summary["spec_version"],
            "spec_hash": summary["spec_hash"],
            "cases_file": summary["cases_file"],
            "created_at": summary["created_at"],
            "repeat": summary["repeat"],
            "cases": len(summary["cases"]),
            "passed": counts["pass"],
            "failed": counts["fail"],
            "errors": counts["error"],
            "pass_rate": summary["pass_rate"],
            "results": summary,
        }
        table = table_of(EvalRow)
        statement = self._insert(table).values(**row).on_conflict_do_nothing(index_elements=["id"])
        with self.engine.begin() as conn:
            conn.execute(statement)

    def evals(self, spec: str | None = None, *, limit: int = 200) -> list[dict[str, Any]]:
        """Kept evals (without their per-case results), newest first; ``spec``: only its."""
        table = table_of(EvalRow)
        query = select(*[table.c[c] for c in _LISTED])
        if spec is not None:
            query = query.where(table.c.spec_name == spec)
        query = query.order_by(table.c.created_at.desc(), table.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def eval_results(self, eval_id: str) -> dict[str, Any] | None:
        """One kept eval's whole results (None: no such eval)."""
        table = table_of(EvalRow)
        with self.engine.connect() as conn:
            found = conn.execute(select(table.c.results).where(table.c.id == eval_id)).first()
        return None if found is None else dict(found[0])

    def latest_evals(self, spec: str | None = None) -> list[dict[str, Any]]:
        """The newest eval of each spec version (``spec``: of that spec's), newest first."""
        seen: set[tuple[str, str]] = set()
        latest = []
        for row in self.evals(spec, limit=1000):
            key = (row["spec_name"], row["spec_hash"])
            if key not in seen:
                seen.add(key)
                latest.append(row)
        return latest
