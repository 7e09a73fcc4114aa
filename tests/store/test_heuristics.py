"""The experience memory's heuristics in the trace store, on SQLite and PostgreSQL alike
(``db_url`` is parametrised in conftest.py): a heuristic round-trips, adding it again merges
its provenance, status changes follow the life cycle and are logged oldest first, a reward
counts once per key, and migration 9 adds the tables to an old store."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import inspect

from armature_temporal.experience import Heuristic, HeuristicError, heuristic_id
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine

T0 = "2026-03-01T12:00:00+00:00"


def make(
    text: str = "Check the units first.", stage: str | None = "answer", **kw: Any
) -> Heuristic:
    values: dict[str, Any] = {
        "id": heuristic_id("triage", stage, text),
        "spec_name": "triage",
        "stage_id": stage,
        "kind": "procedural",
        "text": text,
        "status": "candidate",
        "source": "distilled",
        "provenance": ["run-1"],
        "embedding": [0.6, 0.8],
        "embedding_model": "lexical",
        "created_at": T0,
        "updated_at": T0,
    }
    values.update(kw)
    return Heuristic(**values)


def test_a_heuristic_round_trips_and_its_arrival_is_logged(store: TraceStore) -> None:
    h = make(text="Cite the sourcé — ünïcode.")
    assert store.add_heuristic(h, by="distiller", reason="from 1 run") == h
    assert store.heuristic(h.id) == h
    assert store.heuristic("h-000000000000") is None
    [event] = store.heuristic_events(h.id)
    assert (event.from_status, event.to_status, event.by) == (None, "candidate", "distiller")
    assert h.trust == 0.0


def test_adding_the_same_id_again_merges_provenance(store: TraceStore) -> None:
    h = make()
    store.add_heuristic(h, by="distiller", reason="first")
    again = store.add_heuristic(
        make(provenance=["run-2", "run-1"], status="quarantined"), by="distiller", reason="again"
    )
    assert again.provenance == ["run-1", "run-2"]
    assert again.status == "candidate"  # the stored one, not the one sent again
    assert len(store.heuristic_events(h.id)) == 1
    merged = store.merge_heuristic(h.id, ["run-3", "run-2"])
    assert merged.provenance == ["run-1", "run-2", "run-3"]
    assert store.heuristic(h.id) == merged
    with pytest.raises(HeuristicError, match=r"no heuristic 'h-nope'.*armature memory list"):
        store.merge_heuristic("h-nope", ["run-9"])


def test_listing_by_stage_includes_spec_wide_ones_and_filters_status(store: TraceStore) -> None:
    one = make("A.", stage="answer")
    wide = make("B.", stage=None, created_at="2026-03-01T12:00:01+00:00")
    other = make("C.", stage="plan")
    elsewhere = make("A.", stage="answer", spec_name="other", id="h-elsewhere0")
    for h in (one, wide, other, elsewhere):
        store.add_heuristic(h, by="distiller", reason="r")
    assert [h.id for h in store.heuristics("triage", stage_id="answer")] == [one.id, wide.id]
    assert {h.id for h in store.heuristics("triage")} == {one.id, wide.id, other.id}
    store.set_heuristic_status(other.id, "quarantined", by="scan", reason="clean")
    assert [h.id for h in store.heuristics("triage", status="quarantined")] == [other.id]


def test_status_changes_follow_the_life_cycle_and_are_logged(store: TraceStore) -> None:
    h = make()
    store.add_heuristic(h, by="distiller", reason="r")
    with pytest.raises(HeuristicError, match=rf"{h.id} cannot go from candidate to promoted"):
        store.set_heuristic_status(h.id, "promoted", by="memory-ci", reason="skip the queue")
    store.set_heuristic_status(h.id, "quarantined", by="scan", reason="clean")
    figures = {"delta": 0.12, "ci_low": 0.03, "ci_high": 0.2, "n": 8}
    promoted = store.set_heuristic_status(
        h.id, "promoted", by="memory-ci", reason="helps", figures=figures
    )
    assert promoted.status == "promoted" and promoted.trust == 1.0
    with pytest.raises(HeuristicError, match="already promoted"):
        store.set_heuristic_status(h.id, "promoted", by="memory-ci", reason="again")
    store.set_heuristic_status(h.id, "retired", by="utility", reason="stopped helping")
    with pytest.raises(HeuristicError, match="it can go to nothing"):
        store.set_heuristic_status(h.id, "promoted", by="memory-ci", reason="back")
    # A person may bring a retired one back.
    store.set_heuristic_status(h.id, "promoted", by="person:ana", reason="still right")
    events = store.heuristic_events(h.id)
    assert [(e.from_status, e.to_status) for e in events] == [
        (None, "candidate"),
        ("candidate", "quarantined"),
        ("quarantined", "promoted"),
        ("promoted", "retired"),
        ("retired", "promoted"),
    ]
    assert events[2].figures == figures and events[2].by == "memory-ci"
    assert events[4].by == "person:ana" and events[4].reason == "still right"
    with pytest.raises(HeuristicError, match="no heuristic 'h-nope'"):
        store.set_heuristic_status("h-nope", "rejected", by="person:ana", reason="r")
    with pytest.raises(HeuristicError, match=r"unknown heuristic status 'gone'.*candidate"):
        store.set_heuristic_status(h.id, "gone", by="person:ana", reason="r")


def test_a_person_may_promote_a_candidate_but_never_revive_a_rejected_one(
    store: TraceStore,
) -> None:
    h = make()
    store.add_heuristic(h, by="person:ana", reason="r")
    assert store.set_heuristic_status(
        h.id, "promoted", by="person:ana", reason="I know"
    ).status == ("promoted")
    store.set_heuristic_status(h.id, "rejected", by="person:bo", reason="wrong")
    with pytest.raises(HeuristicError, match="from rejected it can go to nothing"):
        store.set_heuristic_status(h.id, "promoted", by="person:ana", reason="r")


def test_rewards_count_once_per_key(store: TraceStore) -> None:
    a, b = make("A."), make("B.")
    for h in (a, b):
        store.add_heuristic(h, by="distiller", reason="r")
    at = "2026-03-02T00:00:00+00:00"
    assert store.reward_heuristics([a.id, b.id, "h-unknown"], 0.75, key="run-5/answer", at=at) == 2
    assert store.reward_heuristics([a.id, b.id], 0.75, key="run-5/answer", at=at) == 0  # retried
    assert store.reward_heuristics([a.id], 0.0, key="run-6/answer", at=at) == 1
    got = store.heuristic(a.id)
    assert got is not None
    assert (got.alpha, got.beta, got.uses, got.last_used_at) == (1.75, 2.25, 2, at)
    assert store.heuristic(b.id).uses == 1  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"reward 1\.5 is outside \[0, 1\]"):
        store.reward_heuristics([a.id], 1.5, key="k", at=at)


def test_concurrent_rewards_of_one_key_count_once(store: TraceStore) -> None:
    h = make()
    store.add_heuristic(h, by="distiller", reason="r")
    with ThreadPoolExecutor(8) as pool:
        counts = list(
            pool.map(
                lambda i: store.reward_heuristics([h.id], 1.0, key=f"k{i % 4}", at=T0), range(16)
            )
        )
    assert sum(counts) == 4
    assert store.heuristic(h.id).uses == 4  # type: ignore[union-attr]


def test_migration_9_adds_the_heuristics_tables_to_an_old_store(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=8) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert not inspect(engine).has_table("heuristics")
    assert migrate(engine, upto=9) == [9]
    names = set(inspect(engine).get_table_names())
    assert {"heuristics", "heuristic_events", "heuristic_rewards"} <= names
    release_engine(engine)
    store = TraceStore(db_url)
    store.add_heuristic(make(), by="distiller", reason="r")
    assert len(store.heuristics("triage")) == 1
    store.close()


def test_concurrent_adds_of_one_heuristic_store_it_once_with_every_run(
    store: TraceStore,
) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: store.add_heuristic(
                    make(provenance=[f"run-{i}"]), by="distiller", reason="r"
                ),
                range(8),
            )
        )
    [kept] = store.heuristics("triage")
    assert sorted(kept.provenance) == sorted(f"run-{i}" for i in range(8))
    assert len(store.heuristic_events(kept.id)) == 1


def test_of_two_concurrent_verdicts_exactly_one_wins(store: TraceStore) -> None:
    h = make()
    store.add_heuristic(h, by="distiller", reason="r")
    store.set_heuristic_status(h.id, "quarantined", by="scan", reason="clean")

    def verdict(to: str) -> str:
        try:
            return store.set_heuristic_status(h.id, to, by="memory-ci", reason=to).status
        except HeuristicError:
            return "refused"

    with ThreadPoolExecutor(2) as pool:
        outcomes = sorted(pool.map(verdict, ["promoted", "rejected"]))
    assert outcomes in (["promoted", "refused"], ["refused", "rejected"])
    assert len(store.heuristic_events(h.id)) == 3


def test_a_re_verification_is_logged_without_changing_the_heuristic(store: TraceStore) -> None:
    h = make()
    store.add_heuristic(h, by="distiller", reason="r")
    store.set_heuristic_status(h.id, "quarantined", by="scan", reason="clean")
    promoted = store.set_heuristic_status(h.id, "promoted", by="memory-ci", reason="helps")
    event = store.record_heuristic_event(
        h.id, by="memory-ci", reason="still helps", figures={"delta": 0.2}
    )
    assert (event.from_status, event.to_status, event.figures) == (
        "promoted",
        "promoted",
        {"delta": 0.2},
    )
    assert store.heuristic_events(h.id)[-1] == event
    assert store.heuristic(h.id) == promoted  # status, posterior and times as they were
    with pytest.raises(HeuristicError, match=r"h-000000000000.*armature memory list"):
        store.record_heuristic_event("h-000000000000", by="memory-ci", reason="x")
