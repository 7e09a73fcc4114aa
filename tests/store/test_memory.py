"""Cross-run memory in the trace store, on SQLite and PostgreSQL alike (``db_url`` is
parametrised in conftest.py): values round-trip with their provenance, each ``stage.key`` keeps
a rolling window (oldest evicted), a retried capture writes nothing twice, memory names never
mix, concurrent captures keep the window, and the migration adds the table to an old store."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import inspect, text

from armature_temporal.runtime.models import MemoryEntry
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def entry(n: int, key: str = "choice", stage: str = "pick", value: Any = None) -> MemoryEntry:
    return MemoryEntry(
        stage=stage,
        key=key,
        value=value if value is not None else {"n": n, "text": f"run {n} — ünïcode"},
        run_id=f"triage-{n}",
        recorded_at=(T0 + timedelta(minutes=n)).isoformat(),
    )


LIMITS = {"pick.choice": 3}


def test_values_round_trip_with_their_provenance(store: TraceStore) -> None:
    kept = [entry(1), entry(1, key="score", value=0.75), entry(1, key="tags", value=["a", "b"])]
    assert store.remember("triage", kept, LIMITS) == 3
    assert store.memory("triage") == kept
    assert store.memory("nobody") == []


def test_each_key_keeps_its_newest_max_entries_and_the_oldest_go_first(
    store: TraceStore,
) -> None:
    for n in range(1, 7):
        store.remember("triage", [entry(n), entry(n, key="score", value=n)], LIMITS)
    choices = [e.value["n"] for e in store.memory("triage") if e.key == "choice"]
    assert choices == [4, 5, 6]  # max_entries 3
    scores = [e.value for e in store.memory("triage") if e.key == "score"]
    assert scores == [1, 2, 3, 4, 5, 6]  # no limit given: all kept
    # Reading with a smaller window (the spec lowered max_entries) shows only the newest.
    assert [e.value for e in store.memory("triage", {"pick.score": 2})] == [
        {"n": 4, "text": "run 4 — ünïcode"},
        {"n": 5, "text": "run 5 — ünïcode"},
        5,
        {"n": 6, "text": "run 6 — ünïcode"},
        6,
    ]
    rows = sql(store, "SELECT count(*) FROM memory_entries WHERE capture_key = 'choice'")
    assert rows == [(3,)]  # evicted from the table, not only hidden


def test_a_retried_capture_writes_nothing_twice(store: TraceStore) -> None:
    assert store.remember("triage", [entry(1), entry(2)], LIMITS) == 2
    assert store.remember("triage", [entry(1), entry(2)], LIMITS) == 0
    # Even with another value: the first capture of a run's stage and key is what it captured.
    assert store.remember("triage", [entry(2, value="changed")], LIMITS) == 0
    assert [e.value["n"] for e in store.memory("triage")] == [1, 2]


def test_memory_names_never_mix(store: TraceStore) -> None:
    store.remember("triage", [entry(1)], LIMITS)
    store.remember("billing", [entry(2, value="billing's")], LIMITS)
    for n in range(3, 8):  # billing's window fills; triage's is untouched
        store.remember("billing", [entry(n, value=f"b{n}")], LIMITS)
    assert [e.run_id for e in store.memory("triage")] == ["triage-1"]
    assert [e.value for e in store.memory("billing")] == ["b5", "b6", "b7"]


def test_concurrent_captures_of_one_spec_keep_the_window(store: TraceStore) -> None:
    """Many runs capturing the same two windows at once: none fails (on PostgreSQL, trims
    deleting the same rows in different orders would deadlock), each window is kept."""
    limits = {"pick.choice": 3, "pick.score": 2}

    def capture(n: int) -> int:
        return store.remember("triage", [entry(n), entry(n, key="score", value=n)], limits)

    with ThreadPoolExecutor(max_workers=16) as pool:
        added = list(pool.map(capture, range(96)))
    assert sum(added) == 192
    kept = store.memory("triage")
    assert [e.value["n"] for e in kept if e.key == "choice"] == [93, 94, 95]
    assert [e.value for e in kept if e.key == "score"] == [94, 95]


def test_a_v6_database_gains_the_memory_table(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=6) == [1, 2, 3, 4, 5, 6]
    assert not inspect(engine).has_table("memory_entries")
    release_engine(engine)
    store = TraceStore(db_url)
    try:
        applied = sql(store, "SELECT version, name FROM schema_migrations WHERE version = 7")
        assert applied == [(7, "memory_entries")]
        indexes = {ix["name"] for ix in inspect(store.engine).get_indexes("memory_entries")}
        assert "ix_memory_name_key" in indexes
        assert store.remember("triage", [entry(1)], LIMITS) == 1
        assert store.memory("triage") == [entry(1)]
    finally:
        store.close()


def sql(store: TraceStore, statement: str) -> list[Any]:
    with store.engine.begin() as conn:
        return list(conn.execute(text(statement)).all())
