"""A round's effort report in the store (migration 22), on SQLite and PostgreSQL (``db_url`` is
parametrised in conftest.py): kept on the round's row, and the runs and tokens under a round's
id counted from the runs and their model-call records — only that round's, even when another
round's id differs from it by a character that SQL LIKE would read as a wildcard."""

from __future__ import annotations

from armature_temporal.improve.models import ImproveRound, RoundEffort
from armature_temporal.store import MIGRATIONS, TraceStore
from armature_temporal.store.rounds import CALL_KINDS
from tests.store.chains import make_run


def test_migration_22_is_the_round_effort_column() -> None:
    assert (22, "round_effort") in [(v, n) for v, n, _ in MIGRATIONS]


def test_a_rounds_effort_round_trips_and_an_older_round_has_none(store: TraceStore) -> None:
    base = ImproveRound(
        id="improve-triage-1",
        spec_name="triage",
        spec_hash="a" * 64,
        created_at="2025-03-01T12:00:00+00:00",
        status="verifying",
    )
    store.save_round(base)
    assert store.rounds("triage") == [base]  # effort None: not reported
    effort = RoundEffort(
        proposals_tried=3, runs=24, tokens=9000, stop="budget", same_tier=True, judge_note="x"
    )
    store.set_round_effort(base.id, effort)
    assert store.rounds("triage") == [base.model_copy(update={"effort": effort})]
    store.save_round(base.model_copy(update={"effort": effort, "status": "proposed"}))
    (kept,) = store.rounds("triage")
    assert kept.effort == effort and kept.status == "proposed"


def test_round_spend_counts_the_runs_and_call_tokens_under_the_rounds_id(
    store: TraceStore,
) -> None:
    mine = [make_run(f"improve_r1/baseline/{i}") for i in range(2)]
    others = [make_run("improveXr1/baseline/0"), make_run("improve_r10/baseline/0")]
    for records in [*mine, *others]:
        store.write(records)
    expected = sum(
        r.prompt_tokens + r.completion_tokens
        for records in mine
        for r in records
        if r.kind in CALL_KINDS
    )
    assert expected > 0
    assert store.round_spend("improve_r1") == (2, expected)
    assert store.round_spend("improve_r2") == (0, 0)
