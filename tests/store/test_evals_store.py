"""`armature eval`'s results in the store (migration 21), on SQLite and PostgreSQL (``db_url``
is parametrised in conftest.py): kept once each, listed newest first, the latest per version."""

from __future__ import annotations

from typing import Any

from armature_temporal.store import MIGRATIONS, TraceStore


def summary(eval_id: str, spec_hash: str, created: str, passed: int) -> dict[str, Any]:
    return {
        "id": eval_id,
        "spec_name": "quickstart",
        "spec_version": "1",
        "spec_hash": spec_hash,
        "cases_file": "specs/evals/quickstart.cases.yaml",
        "repeat": 2,
        "created_at": created,
        "counts": {"pass": passed, "fail": 3 - passed, "error": 0},
        "pass_rate": passed / 3,
        "flaky": [],
        "cases": [{"index": i, "status": "pass" if i < passed else "fail"} for i in range(3)],
    }


def test_migration_21_is_the_evals_table() -> None:
    assert (21, "evals") in [(v, n) for v, n, _ in MIGRATIONS]


def test_evals_round_trip_and_the_latest_per_version(store: TraceStore) -> None:
    store.save_eval(summary("e1", "a" * 64, "2025-01-01T00:00:00+00:00", 1))
    store.save_eval(summary("e2", "a" * 64, "2025-01-02T00:00:00+00:00", 2))
    store.save_eval(summary("e3", "b" * 64, "2025-01-03T00:00:00+00:00", 3))
    store.save_eval(summary("e3", "b" * 64, "2025-01-03T00:00:00+00:00", 0))  # kept once
    assert [e["id"] for e in store.evals("quickstart")] == ["e3", "e2", "e1"]
    latest = store.latest_evals()
    assert [(e["id"], e["passed"], e["failed"]) for e in latest] == [("e3", 3, 0), ("e2", 2, 1)]
    assert store.eval_results("e2") == summary("e2", "a" * 64, "2025-01-02T00:00:00+00:00", 2)
    assert store.eval_results("nope") is None and store.evals("other") == []
