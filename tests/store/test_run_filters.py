"""TraceStore.runs filters verification runs and runs started by runs before the limit, on
SQLite and PostgreSQL (issue 13: a dashboard after an improvement round saw no production run)."""

from __future__ import annotations

from armature_temporal.runtime.traces import TraceChain, TraceRecord
from armature_temporal.store import TraceStore


def _run(
    run_id: str, minute: int, *, parent: str | None = None, verification: bool = False
) -> list[TraceRecord]:
    chain = TraceChain(run_id, "triage", "a" * 64, "policy-1")
    at = f"2026-01-01T09:{minute:02d}:00+00:00"
    data = {
        "spec_version": "1",
        "inputs": {},
        "parent_run_id": parent,
        "verification": verification,
    }
    chain.add("run_start", at, data=data)
    chain.add("run_end", at, status="completed", latency_ms=1000.0)
    return chain.take()


def test_runs_leaves_out_verification_runs_before_the_limit(store: TraceStore) -> None:
    for i in range(3):
        store.write(_run(f"prod-{i}", i))
    for i in range(4):
        store.write(_run(f"improve-1/v/{i}", 10 + i, parent="improve-1", verification=True))
    assert [r.run_id for r in store.runs(limit=2, verification=False)] == ["prod-2", "prod-1"]
    assert [r.run_id for r in store.runs(limit=1, verification=True)] == ["improve-1/v/3"]
    assert len(store.runs(limit=10)) == 7


def test_runs_leaves_out_children_before_the_limit(store: TraceStore) -> None:
    store.write(_run("parent", 0))
    for i in range(4):
        store.write(_run(f"parent/research/{i}", 1 + i, parent="parent"))
    assert [r.run_id for r in store.runs(limit=1, children=False)] == ["parent"]
    assert store.runs(limit=1)[0].run_id == "parent/research/3"
