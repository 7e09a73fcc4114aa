"""The ``evals`` part of ``armature dashboard``: the latest eval of each spec version, with
its pass rate (kept apart from the dashboard's views, which another module renders)."""

from __future__ import annotations

from typing import Any

__all__ = ["evals_table", "with_evals"]


def evals_table(rows: list[dict[str, Any]]) -> Any:
    """A rich table of kept evals (``TraceStore.latest_evals`` rows)."""
    from rich.table import Table

    table = Table(title="evals (latest per spec version)", show_edge=False, pad_edge=False)
    for column in ("spec", "version", "when", "cases", "repeat", "pass", "fail", "error"):
        table.add_column(column, no_wrap=True)
    table.add_column("pass rate", no_wrap=True)
    table.add_column("cases file", overflow="fold")
    for r in rows:
        rate = "—" if r["pass_rate"] is None else f"{r['pass_rate']:.0%}"
        table.add_row(
            r["spec_name"],
            f"v{r['spec_version']} {r['spec_hash'][:8]}",
            r["created_at"][:19],
            str(r["cases"]),
            str(r["repeat"]),
            str(r["passed"]),
            str(r["failed"]),
            str(r["errors"]),
            rate,
            r["cases_file"],
        )
    return table


def with_evals(store: Any, spec: str | None, data: Any, shown: Any) -> tuple[Any, Any]:
    """The dashboard's ``(data, shown)`` with the kept evals added (of ``spec``, else of every
    spec): ``data["evals"]`` when the data is a mapping (one spec's dashboard), and a table
    under what is shown. Unchanged when no eval was kept."""
    rows = store.latest_evals(spec)
    if not rows:
        return data, shown
    from rich.console import Group

    if isinstance(data, dict):
        data = {**data, "evals": rows}
    return data, Group(shown, evals_table(rows))
