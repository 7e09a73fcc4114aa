"""The answer cache in the store (SQLite and PostgreSQL): entries are kept pending and served
only once settled servable and while unexpired, settlement withholds with the reason (all of a
run's, or one stage's), keeping is idempotent, max_entries evicts the oldest, hits are recorded
once, clear drops a spec's (or a stage's) entries, and migration 10 upgrades an old store."""

from __future__ import annotations

from typing import Any

from sqlalchemy import inspect

from armature_temporal.cache.models import CacheEntry
from armature_temporal.cache.stats import cache_stats
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine

T0 = "2026-12-01T00:00:00+00:00"
LATER = "2026-12-09T00:00:00+00:00"  # past a 7-day TTL from T0


def entry(n: int, **changes: Any) -> CacheEntry:
    values: dict[str, Any] = {
        "id": f"e{n}",
        "spec_name": "s",
        "spec_hash": "h1",
        "stage_id": "answer",
        "tier": "small",
        "exact_key": f"k{n}",
        "partition": "p",
        "task": f"task {n}",
        "embedding": [1.0, 0.0],
        "embedding_model": "m",
        "output": {"content": f"out {n}"},
        "text": f"out {n}",
        "cost_usd": 0.01,
        "run_id": "r1",
        "created_at": f"2026-12-01T00:00:{n:02d}+00:00",
        "expires_at": "2026-12-08T00:00:00+00:00",
    }
    return CacheEntry.model_validate({**values, **changes})


def test_only_settled_servable_unexpired_entries_are_served(store: TraceStore) -> None:
    assert store.put_cache_entry(entry(1)) is True
    assert store.put_cache_entry(entry(1)) is False  # a retried keep writes once
    assert store.cache_exact("k1", now=T0) is None  # pending
    assert store.cache_vectors("p", "m", now=T0) == []
    assert store.settle_cache("r1", reason=None) == {"servable": 1, "withheld": 0}
    served = store.cache_exact("k1", now=T0)
    assert served is not None and served.output == {"content": "out 1"}
    assert [v[0] for v in store.cache_vectors("p", "m", now=T0)] == ["e1"]
    assert store.cache_vectors("p", "other-model", now=T0) == []
    assert store.cache_exact("k1", now=LATER) is None  # expired
    assert store.cache_exact("k1", spec_name="s", now=T0) is not None
    assert store.cache_exact("k1", spec_name="another", now=T0) is None
    assert store.cache_vectors("p", "m", now=LATER) == []


def test_settlement_withholds_a_run_or_a_stage_with_the_reason(store: TraceStore) -> None:
    store.put_cache_entry(entry(1))
    store.put_cache_entry(entry(2, run_id="r2"))
    store.put_cache_entry(entry(3, run_id="r2", stage_id="other"))
    assert store.settle_cache("r1", reason="the run ended failed")["withheld"] == 1
    counts = store.settle_cache("r2", reason=None, withheld={"answer": "judge g scored it 0.1"})
    assert counts == {"servable": 1, "withheld": 1}
    assert store.cache_exact("k1", now=T0) is None and store.cache_exact("k2", now=T0) is None
    assert store.cache_exact("k3", now=T0) is not None
    reasons = {e.id: (e.status, e.reason) for e in store.cache_entries("s")}
    assert reasons["e1"] == ("withheld", "the run ended failed")
    assert reasons["e2"] == ("withheld", "judge g scored it 0.1")
    # Settling again changes nothing: only pending entries settle.
    assert store.settle_cache("r1", reason=None) == {"servable": 0, "withheld": 0}


def test_max_entries_evicts_the_oldest_of_the_stage(store: TraceStore) -> None:
    for n in range(1, 6):
        store.put_cache_entry(entry(n), max_entries=3)
    store.put_cache_entry(entry(9, stage_id="other"), max_entries=3)
    kept = [e.id for e in store.cache_entries("s", stage_id="answer")]
    assert kept == ["e5", "e4", "e3"]
    assert [e.id for e in store.cache_entries("s", stage_id="other")] == ["e9"]


def test_hits_are_recorded_once_and_counted_in_stats(store: TraceStore) -> None:
    store.put_cache_entry(entry(1))
    store.put_cache_entry(entry(2, run_id="r2"))
    store.settle_cache("r1", reason=None)
    store.settle_cache("r2", reason="rejected at review")
    e1 = store.cache_entry("e1")
    assert e1 is not None
    first = {"entry": e1, "run_id": "r9", "stage_id": "answer", "attempt_key": "1/1"}
    assert store.record_cache_hit(**first, kind="semantic", similarity=0.93, task="task one")
    assert not store.record_cache_hit(**first, kind="semantic", similarity=0.93, task="task one")
    assert store.cache_entry("e1").hits == 1  # type: ignore[union-attr]
    stats = cache_stats(store, "s")
    assert stats.entries == {"servable": 1, "pending": 0, "withheld": 1, "expired": 0}
    assert stats.hits == {"exact": 0, "semantic": 1, "all": 1}
    assert stats.saved_cost_usd == 0.01
    assert stats.withheld_reasons == {"rejected at review": 1}
    (sample,) = stats.sample
    assert (sample.task, sample.source_task, sample.source_run) == ("task one", "task 1", "r1")


def test_clear_drops_the_spec_or_one_stage(store: TraceStore) -> None:
    store.put_cache_entry(entry(1))
    store.put_cache_entry(entry(2, stage_id="other"))
    store.put_cache_entry(entry(3, spec_name="t"))
    assert store.clear_cache("s", stage_ids=["other"]) == 1
    assert [e.id for e in store.cache_entries("s")] == ["e1"]
    assert store.clear_cache("s") == 1
    assert store.cache_entries("s") == [] and len(store.cache_entries("t")) == 1


def test_migration_10_adds_the_cache_tables_to_an_old_store(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=9) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert not inspect(engine).has_table("cache_entries")
    assert migrate(engine, upto=10) == [10]
    migrate(engine)
    assert {"cache_entries", "cache_hits"} <= set(inspect(engine).get_table_names())
    release_engine(engine)
    store = TraceStore(db_url)
    assert store.put_cache_entry(entry(1))
    store.close()
