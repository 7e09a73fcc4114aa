"""Improvement proposals in the trace store, on SQLite and PostgreSQL alike (``db_url`` is
parametrised in conftest.py): a faithful round trip, idempotent saves, listing, the status
compare-and-set (also under a race), and the migration that adds the table to an old store."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from sqlalchemy import inspect, text

from armature_temporal.improve.models import Proposal, SpecChange
from armature_temporal.store import StoreError, TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine
from armature_temporal.store.trace_store import ProposalError

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def make_proposal(
    proposal_id: str = "imp-1/p0", *, spec: str = "triage", minute: int = 0, **overrides: Any
) -> Proposal:
    fields: dict[str, Any] = {
        "id": proposal_id,
        "spec_name": spec,
        "improve_run_id": f"improve-{spec}-{minute}",
        "created_at": (T0 + timedelta(minutes=minute)).isoformat(),
        "base_spec_hash": "a" * 64,
        "candidate_spec_hash": "b" * 64,
        "changes": [
            SpecChange(
                stage="draft",
                field="model_tier",
                old="small",
                new="large",
                why="draft escalated in 7 of 10 runs",
            ),
            SpecChange(
                stage="classify",
                field="temperature",
                old=None,
                new=0.2,
                why="classify's outputs were invalid in 30% of attempts",
            ),
            SpecChange(
                stage="review", field="max_tokens", old=512, new=1024, why="review was truncated"
            ),
        ],
        "baseline_hqs": [0.61, 0.7, 0.123456789012345],
        "candidate_hqs": [0.8, 0.75, 0.9],
        "delta": 0.1755,
        "ci_low": 0.0123,
        "ci_high": 0.33,
        "verdict": "verified",
        "detail": "better on 3 of 3 inputs; the 95% interval excludes 0",
        "diff": "--- a/triage.yaml\n+++ b/triage.yaml\n@@ -1 +1 @@\n-tier: small\n+tier: large\n",
        "spec_text": "name: triage\n# ünïcode — kept\ntier: large\n",
        "base_spec_text": "name: triage\n# ünïcode — kept\ntier: small\n",
    }
    fields.update(overrides)
    return Proposal.model_validate(fields)


def sql(store: TraceStore, statement: str, **params: Any) -> list[Any]:
    with store.engine.begin() as conn:
        result = conn.execute(text(statement), params)
        return list(result.all()) if result.returns_rows else []


# --- saving and reading -------------------------------------------------------------------------


def test_round_trip_keeps_every_field(store: TraceStore) -> None:
    saved = make_proposal()
    assert store.save_proposals([saved]) == 1
    loaded = store.proposal(saved.id)
    assert loaded == saved
    assert loaded is not None and loaded.model_dump() == saved.model_dump()
    assert [c.new for c in loaded.changes] == ["large", 0.2, 1024]
    assert loaded.changes[1].old is None
    assert store.proposals() == [saved]
    assert store.proposal("imp-1/nope") is None


def test_saving_again_is_idempotent_and_leaves_stored_proposals_alone(store: TraceStore) -> None:
    batch = [make_proposal(f"imp-1/p{i}", minute=i) for i in range(3)]
    assert store.save_proposals(batch) == 3
    store.set_proposal_status("imp-1/p0", "applied")
    # A retried activity re-sends the batch (here with a new one and a changed copy of p1).
    resent = [*batch, make_proposal("imp-1/p3", minute=3)]
    resent[1] = batch[1].model_copy(update={"detail": "rewritten"})
    assert store.save_proposals(resent) == 1
    assert store.save_proposals(resent) == 0
    assert sql(store, "SELECT count(*) FROM improvement_proposals") == [(4,)]
    assert store.proposal("imp-1/p1") == batch[1]
    p0 = store.proposal("imp-1/p0")
    assert p0 is not None and p0.status == "applied"


def test_duplicate_ids_in_one_batch_are_stored_once(store: TraceStore) -> None:
    first = make_proposal("imp-1/p0")
    assert store.save_proposals([first, first.model_copy(update={"detail": "second"})]) == 1
    assert store.proposals() == [first]
    assert store.save_proposals([]) == 0


def test_listing_is_newest_first_filtered_and_limited(store: TraceStore) -> None:
    triage = [make_proposal(f"t{i}", spec="triage", minute=i) for i in range(5)]
    refund = [make_proposal(f"r{i}", spec="refund", minute=10 + i) for i in range(2)]
    store.save_proposals([triage[3], refund[0], triage[0], triage[4], refund[1]])
    store.save_proposals([triage[2], triage[1]])
    store.set_proposal_status("t1", "dismissed")
    store.set_proposal_status("r0", "applied")

    assert [p.id for p in store.proposals()] == ["r1", "r0", "t4", "t3", "t2", "t1", "t0"]
    assert [p.id for p in store.proposals(limit=3)] == ["r1", "r0", "t4"]
    assert [p.id for p in store.proposals(spec="triage", limit=2)] == ["t4", "t3"]
    assert [p.id for p in store.proposals(spec="refund")] == ["r1", "r0"]
    assert [p.id for p in store.proposals(status="proposed")] == ["r1", "t4", "t3", "t2", "t0"]
    assert [p.id for p in store.proposals(spec="triage", status="dismissed")] == ["t1"]
    assert [p.id for p in store.proposals(spec="refund", status="applied")] == ["r0"]
    assert store.proposals(spec="nothing") == []
    # Same creation time: the order is still stable (by id, descending).
    store.save_proposals([make_proposal("t4b", minute=4), make_proposal("t4a", minute=4)])
    assert [p.id for p in store.proposals(spec="triage", limit=3)] == ["t4b", "t4a", "t4"]


def test_a_row_written_without_a_status_is_proposed(store: TraceStore) -> None:
    sql(
        store,
        "INSERT INTO improvement_proposals (id, spec_name, improve_run_id, created_at) "
        "VALUES ('raw', 'triage', 'imp', '2025-01-01T00:00:00+00:00')",
    )
    assert sql(store, "SELECT status, status_changed_at FROM improvement_proposals") == [
        ("proposed", None)
    ]


# --- status ----------------------------------------------------------------------------------


def test_status_changes_once_and_a_second_attempt_says_when_it_changed(store: TraceStore) -> None:
    store.save_proposals([make_proposal("imp-1/p0")])
    before = datetime.now(UTC)
    applied = store.set_proposal_status("imp-1/p0", "applied")
    after = datetime.now(UTC)
    assert applied == make_proposal("imp-1/p0", status="applied")
    assert store.proposal("imp-1/p0") == applied
    [(changed_at,)] = sql(
        store, "SELECT status_changed_at FROM improvement_proposals WHERE id = 'imp-1/p0'"
    )
    when = datetime.fromisoformat(changed_at)
    assert when.utcoffset() == timedelta(0) and before <= when <= after

    for status in ("applied", "dismissed"):
        with pytest.raises(ProposalError) as raised:
            store.set_proposal_status("imp-1/p0", status)  # type: ignore[arg-type]
        assert str(raised.value) == (
            f"proposal imp-1/p0 is already applied (since {changed_at}); nothing changed"
        )
        assert (raised.value.status, raised.value.changed_at) == ("applied", changed_at)
    assert isinstance(raised.value, StoreError)
    assert store.proposal("imp-1/p0") == applied
    assert sql(
        store, "SELECT status_changed_at FROM improvement_proposals WHERE id = 'imp-1/p0'"
    ) == [(changed_at,)]


def test_expected_status_is_checked(store: TraceStore) -> None:
    store.save_proposals([make_proposal("p")])
    with pytest.raises(ProposalError, match=r"^proposal p is proposed, not dismissed; nothing"):
        store.set_proposal_status("p", "applied", expected="dismissed")
    store.set_proposal_status("p", "dismissed")
    undone = store.set_proposal_status("p", "applied", expected="dismissed")
    assert undone.status == "applied"


def test_unknown_proposal_raises_saying_how_to_list_them(store: TraceStore) -> None:
    store.save_proposals([make_proposal("imp-1/p0")])
    with pytest.raises(ProposalError) as raised:
        store.set_proposal_status("imp-9/p7", "dismissed")
    assert str(raised.value) == "no proposal 'imp-9/p7'; list them with `armature proposals`"
    assert (raised.value.proposal_id, raised.value.status) == ("imp-9/p7", None)
    assert [p.status for p in store.proposals()] == ["proposed"]


def test_two_threads_racing_to_change_a_status_one_wins(db_url: str) -> None:
    stores = [TraceStore(db_url), TraceStore(db_url)]
    try:
        ids = [f"imp-1/p{i}" for i in range(8)]
        stores[0].save_proposals([make_proposal(i, minute=n) for n, i in enumerate(ids)])
        targets: tuple[Literal["applied", "dismissed"], ...] = ("applied", "dismissed")
        for proposal_id in ids:
            barrier = threading.Barrier(2)

            def change(n: int, proposal_id: str = proposal_id, barrier: Any = barrier) -> Any:
                barrier.wait()
                try:
                    return stores[n].set_proposal_status(proposal_id, targets[n])
                except ProposalError as exc:
                    return exc

            with ThreadPoolExecutor(2) as pool:
                results = list(pool.map(change, [0, 1]))
            won = [r for r in results if isinstance(r, Proposal)]
            lost = [r for r in results if isinstance(r, ProposalError)]
            assert len(won) == 1 and len(lost) == 1, results
            assert str(lost[0]).startswith(f"proposal {proposal_id} is already {won[0].status} ")
            assert stores[1].proposal(proposal_id) == won[0]
    finally:
        for opened in stores:
            opened.close()


# --- migration -----------------------------------------------------------------------------------


def test_a_v3_database_gains_the_proposals_table(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=3) == [1, 2, 3]
    assert not inspect(engine).has_table("improvement_proposals")
    release_engine(engine)

    store = TraceStore(db_url)
    try:
        applied = sql(store, "SELECT version, name FROM schema_migrations")
        assert (4, "improvement_proposals") in applied
        saved = make_proposal()
        assert store.save_proposals([saved]) == 1
        assert store.proposals(spec="triage") == [saved]
        assert store.set_proposal_status(saved.id, "dismissed").status == "dismissed"
    finally:
        store.close()
