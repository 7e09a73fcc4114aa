"""The improvement loop's history in the store, on SQLite and PostgreSQL (``db_url`` is
parametrised in conftest.py): proposals keep their predictions, rounds keep their
verification and drift, applied changes are kept once each, and migration 11 brings an old
store's proposals along."""

from __future__ import annotations

from sqlalchemy import inspect

from armature_temporal.improve.models import AppliedChange, ImproveRound, Verification
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine
from armature_temporal.store.migrations import MIGRATIONS
from tests.store.test_proposals import make_proposal


def check(**kw: object) -> Verification:
    fields: dict[str, object] = {
        "proposal_id": "p1",
        "spec_hash": "b" * 64,
        "runs": 12,
        "current_failures": ["escalated:draft"],
        "verified_fixes": ["output_invalid:draft"],
        "missed_predictions": ["escalated:draft"],
        "unexpected_regressions": [],
        "regressed": [],
        "drift": 0.0,
    }
    fields.update(kw)
    return Verification.model_validate(fields)


def test_proposal_predictions_round_trip(store: TraceStore) -> None:
    p = make_proposal(
        predicted_fixes=["output_invalid:draft"],
        predicted_regressions=["low_judge:draft"],
        base_failures=["escalated:draft", "output_invalid:draft"],
    )
    store.save_proposals([p])
    assert store.proposal(p.id) == p


def test_rounds_and_applied_changes_round_trip(store: TraceStore) -> None:
    first = ImproveRound(
        id="improve-triage-1",
        spec_name="triage",
        spec_hash="a" * 64,
        created_at="2025-03-01T12:00:00+00:00",
        status="verifying",
        mean_hqs=0.41,
        runs=20,
    )
    store.save_round(first)
    store.save_round(first)  # a retried activity
    store.set_round_status(first.id, "proposed")
    second = ImproveRound(
        id="improve-triage-2",
        spec_name="triage",
        spec_hash="b" * 64,
        created_at="2025-03-02T12:00:00+00:00",
        status="at_target",
        mean_hqs=0.93,
        runs=20,
        verification=check(),
        drift=0.0,
    )
    store.save_round(second)
    store.save_round(second.model_copy(update={"id": "other", "spec_name": "else"}))
    assert store.rounds("triage") == [first.model_copy(update={"status": "proposed"}), second]
    assert store.ever_fixed("triage") == {"output_invalid:draft"}
    assert store.ever_fixed("else") == {"output_invalid:draft"} and store.ever_fixed("x") == set()

    assert store.last_applied("triage") is None
    applied = [
        AppliedChange(
            proposal_id=f"p{i}",
            spec_name="triage",
            spec_hash="b" * 64,
            base_spec_hash="a" * 64,
            applied_at=f"2025-03-0{i}T13:00:00+00:00",
            path="/specs/triage.yaml",
        )
        for i in (1, 2)
    ]
    for a in applied:
        store.record_applied(a)
    store.record_applied(applied[0])  # once per proposal
    assert store.applied_changes("triage") == applied
    assert store.last_applied("triage") == applied[1]


def test_migration_11_adds_predictions_to_an_old_store(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=10) == list(range(1, 11))
    old = make_proposal()
    row = old.model_dump(
        mode="json",
        exclude={
            "predicted_fixes", "predicted_regressions", "base_failures", "lane", "lane_reasons",
            "test",
        },
    )  # fmt: skip
    with engine.begin() as conn:
        from armature_temporal.store.migrations import MetaData, Table

        table = Table("improvement_proposals", MetaData(), autoload_with=conn)
        conn.execute(table.insert().values(**row))
    assert not inspect(engine).has_table("improve_rounds")
    assert migrate(engine) == [v for v, _, _ in MIGRATIONS if v > 10]
    assert {"improve_rounds", "improve_applied"} <= set(inspect(engine).get_table_names())
    release_engine(engine)
    store = TraceStore(db_url)
    try:
        assert store.proposal(old.id) == old  # no predictions: empty lists
    finally:
        store.close()
