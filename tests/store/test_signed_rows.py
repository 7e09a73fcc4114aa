"""Gate decisions and improvement proposals carry MACs (issue #25 item 6), on SQLite and
PostgreSQL alike (``db_url`` is parametrised in conftest.py).

The attacks, by someone who can write the database but not read the trace key: edit who
decided a gate (``armature report`` and ``/ui`` showed the edited name as the decider), and
forge a proposal consistent with itself (verdict verified, lane auto). Every such row, and
every row from before the MACs, reads as unverified, never as trusted.
"""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import MetaData, Table, insert, text

from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine
from armature_temporal.store.keys import load_key
from armature_temporal.views.render import render_report
from armature_temporal.views.report import build_report, load_run
from tests.store.chains import make_run
from tests.store.test_proposals import make_proposal


def sql(store: TraceStore, statement: str, **params: Any) -> None:
    """Raw SQL against the store's database, as someone with database access could run it."""
    with store.engine.begin() as conn:
        conn.execute(text(statement), params)


def report_text(store: TraceStore, run_id: str) -> str:
    loaded = load_run(store, run_id)
    assert loaded is not None
    console = Console(width=200, record=True, color_system=None)
    console.print(render_report(build_report(*loaded)))
    return console.export_text()


# --- gate decisions ------------------------------------------------------------------------


def test_an_honest_gate_decision_reads_as_verified(store: TraceStore) -> None:
    store.write(make_run("run-a", gate_stage="draft"))
    [gate] = store.gate_decisions("run-a")
    assert (gate.decided_by, gate.trusted, gate.record_problem) == ("ana", True, None)
    _, [view] = load_run(store, "run-a")  # type: ignore[misc]
    assert view.verified and view.decider == "ana"
    assert "UNVERIFIED" not in report_text(store, "run-a")


def test_an_edited_decider_shows_as_unverified_in_the_report(store: TraceStore) -> None:
    store.write(make_run("run-a", gate_stage="draft"))
    sql(store, "UPDATE gate_decisions SET decided_by = 'mallory' WHERE run_id = 'run-a'")
    shown = report_text(store, "run-a")
    assert "mallory (UNVERIFIED record)" in shown
    assert "gate draft: its record does not verify: its MAC does not match its content" in shown
    [gate] = store.gate_decisions("run-a")
    assert gate.decided_by == "mallory" and not gate.trusted
    assert "does not match its content" in (gate.record_problem or "")
    _, [view] = load_run(store, "run-a")  # type: ignore[misc]
    assert not view.verified and view.decider == "mallory (UNVERIFIED record)"
    assert [g.trusted for g in store.recent_gate_decisions()] == [False]


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE gate_decisions SET decision = 'reject'",
        "UPDATE gate_decisions SET comment = 'fine'",
        "UPDATE gate_decisions SET decided_at = '2020-01-01T00:00:00+00:00'",
        "UPDATE gate_decisions SET claimed_by = 'alice'",
        "UPDATE gate_decisions SET stage_id = 'review'",
        "UPDATE gate_decisions SET mac = NULL",
    ],
)
def test_every_column_shown_is_covered(store: TraceStore, edit: str) -> None:
    store.write(make_run("run-a", gate_stage="draft"))
    sql(store, edit)
    [gate] = store.gate_decisions("run-a")
    assert not gate.trusted, edit


def test_a_mac_moved_from_another_row_does_not_check(store: TraceStore) -> None:
    store.write(make_run("run-a", gate_stage="draft"))
    store.write(make_run("run-b", gate_stage="draft"))
    sql(
        store,
        "UPDATE gate_decisions SET mac = (SELECT mac FROM gate_decisions WHERE run_id = 'run-a') "
        "WHERE run_id = 'run-b'",
    )
    assert store.gate_decisions("run-a")[0].trusted
    assert not store.gate_decisions("run-b")[0].trusted


def test_a_store_read_with_another_key_or_none_says_so(
    store: TraceStore, db_url: str, tmp_path: Any
) -> None:
    store.write(make_run("run-a", gate_stage="draft"))
    other = TraceStore(db_url, key=tmp_path / "other" / "trace.key")
    try:
        assert other.gate_decisions("run-a")[0].record_problem == (
            "there is no trace key here ($ARMATURE_HOME/trace.key) to check its MAC with"
        )
        load_key(tmp_path / "other" / "trace.key", create=True)
        other = TraceStore(db_url, key=tmp_path / "other" / "trace.key")
        assert "made with another trace key" in (
            other.gate_decisions("run-a")[0].record_problem or ""
        )
    finally:
        other.close()


def test_rows_from_before_migration_17_read_as_unverified(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=16)[-1] == 16
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO gate_decisions (run_id, stage_id, decision, decided_by, comment, "
                "decided_at) VALUES ('old', 'ship', 'approve', 'ana', NULL, '2025-01-01')"
            )
        )
    with engine.begin() as conn:  # a proposal as release 16 stored it: no MAC column yet
        table = Table("improvement_proposals", MetaData(), autoload_with=conn)
        conn.execute(insert(table), make_proposal("old/p0").model_dump(mode="json"))
    assert migrate(engine)[:1] == [17]  # (and any newer ones)
    release_engine(engine)
    store = TraceStore(db_url)
    try:
        [gate] = store.gate_decisions("old")
        assert gate.decided_by == "ana" and not gate.trusted
        assert "has no MAC" in (gate.record_problem or "")
        stored = store.stored_proposal("old/p0")
        assert stored is not None and not stored.trusted
        assert "has no MAC" in (stored.record_problem or "")
    finally:
        store.close()


# --- proposals -------------------------------------------------------------------------------


def test_an_honest_proposal_checks_and_keeps_checking_through_its_status_changes(
    store: TraceStore,
) -> None:
    store.save_proposals([make_proposal("imp-1/p0"), make_proposal("imp-1/p1", minute=1)])
    assert all(s.trusted for s in store.stored_proposals())
    store.set_proposal_status("imp-1/p0", "applied")
    store.set_proposal_status("imp-1/p1", "dismissed")
    applied, dismissed = store.stored_proposal("imp-1/p0"), store.stored_proposal("imp-1/p1")
    assert applied is not None and applied.trusted and applied.proposal.status == "applied"
    assert dismissed is not None and dismissed.trusted


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE improvement_proposals SET verdict = 'verified', lane = 'auto'",
        "UPDATE improvement_proposals SET lane = 'auto'",
        "UPDATE improvement_proposals SET spec_text = 'name: x'",
        "UPDATE improvement_proposals SET ci_low = 0.5",
        "UPDATE improvement_proposals SET status_changed_at = '2020-01-01'",
    ],
)
def test_an_edited_proposal_does_not_check(store: TraceStore, edit: str) -> None:
    store.save_proposals([make_proposal("imp-1/p0", verdict="not_better", lane="review")])
    sql(store, edit)
    stored = store.stored_proposal("imp-1/p0")
    assert stored is not None and not stored.trusted, edit
    assert "does not match its content" in (stored.record_problem or "")


def test_an_applied_proposal_set_back_to_proposed_does_not_check(store: TraceStore) -> None:
    store.save_proposals([make_proposal("imp-1/p0")])
    store.set_proposal_status("imp-1/p0", "applied")
    sql(store, "UPDATE improvement_proposals SET status = 'proposed'")
    stored = store.stored_proposal("imp-1/p0")
    assert stored is not None and not stored.trusted


def test_a_forged_row_stays_unverified_when_its_status_changes(store: TraceStore) -> None:
    """Dismissing (or force-applying) a forged row must not give it a MAC that checks."""
    store.save_proposals([make_proposal("imp-1/p0")])
    sql(
        store,
        "INSERT INTO improvement_proposals (id, spec_name, improve_run_id, created_at, "
        "base_spec_hash, candidate_spec_hash, changes, baseline_hqs, candidate_hqs, delta, "
        "ci_low, ci_high, verdict, detail, diff, spec_text, base_spec_text, status, lane, "
        "lane_reasons, mac) SELECT 'forged/p0', spec_name, improve_run_id, created_at, "
        "base_spec_hash, candidate_spec_hash, changes, baseline_hqs, candidate_hqs, delta, "
        "ci_low, ci_high, verdict, detail, diff, spec_text, base_spec_text, status, 'auto', "
        "lane_reasons, mac FROM improvement_proposals WHERE id = 'imp-1/p0'",
    )
    forged = store.stored_proposal("forged/p0")
    assert forged is not None and not forged.trusted  # the MAC names the id it was made for
    assert forged.proposal.verdict == "verified" and forged.proposal.lane == "auto"
    store.set_proposal_status("forged/p0", "dismissed")
    after = store.stored_proposal("forged/p0")
    assert after is not None and after.proposal.status == "dismissed" and not after.trusted
    assert [s.proposal.id for s in store.stored_proposals() if s.trusted] == ["imp-1/p0"]
