"""The record against Temporal's copy when the attacker holds the trace key (issue #25, item 3),
on SQLite and PostgreSQL.

With the key and the database, everything inside the database can be made consistent again:
the tests check that, then that Temporal's copy (each run's memo anchor, and the ledger's
heads its anchor workflow received, built here with the workflow's own fold) catches it, and
that a run whose copy could not be read is "unanchored", never "intact".
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from armature_temporal.runtime.ledger_anchor import LedgerHead
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.store import TraceStore
from armature_temporal.store.anchor_checks import ANCHOR_GRACE
from armature_temporal.store.tamper import Anchor, Audit, LedgerAnchorReading
from tests.store.chains import make_run
from tests.store.forge import FORGED, anchor_of, delete_newest_runs, rewrite_with_key
from tests.store.test_trace_store import sql

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
RECEIVED = (NOW - timedelta(seconds=5)).isoformat()


def _written(
    store: TraceStore, runs: int = 3
) -> tuple[dict[str, list[TraceRecord]], list[LedgerHead]]:
    """``runs`` finished runs, one after another; each write's ledger head, as the worker
    that wrote it would send it to Temporal."""
    chains: dict[str, list[TraceRecord]] = {}
    heads: list[LedgerHead] = []
    for n in range(runs):
        records = make_run(f"run-{n}", start=60.0 * n, gate_stage="draft")
        for part in (records[:4], records[4:]):
            store.write(part)
            head = store.ledger_head()
            assert head is not None
            heads.append(head)
        chains[f"run-{n}"] = records
    return chains, heads


def _memos(store: TraceStore, chains: dict[str, list[TraceRecord]]) -> dict[str, Anchor]:
    """Each run's memo anchor, as its workflow wrote it after its last flush."""
    return {
        run_id: Anchor(
            length=len(records), head=records[-1].hash, store=store.store_id(), final=True
        )
        for run_id, records in chains.items()
    }


def _checks(audit: Audit, check: str) -> dict[str, str]:
    return {r.run_id: r.checks[check] for r in audit.runs}


def test_without_temporal_nothing_is_intact(store: TraceStore) -> None:
    _written(store)
    audit = store.audit()
    assert audit.ok and not audit.findings  # nothing failed ...
    assert {r.verdict for r in audit.runs} == {"unanchored"}  # ... and nothing is proven
    assert not audit.proven
    assert audit.ledger_anchor.status == "unanchored"
    assert "Temporal was not asked" in audit.runs[0].skipped["temporal_anchor"]


def test_the_normal_path_is_intact_against_temporal(store: TraceStore) -> None:
    chains, heads = _written(store)
    audit = store.audit(
        anchors=_memos(store, chains), ledger_anchor=anchor_of(store, heads, RECEIVED), now=NOW
    )
    assert audit.proven, audit
    assert {(r.verdict, r.anchored_by) for r in audit.runs} == {("intact", "workflow")}
    assert audit.ledger_anchor.status == "ok"
    assert audit.ledger_anchor.anchored_seq == audit.ledger_anchor.entries - 1 == 6
    assert audit.ledger_anchor.behind == 0


def test_history_rewritten_with_the_key_and_the_ledger_begun_anew_fails_against_temporal(
    store: TraceStore,
) -> None:
    chains, heads = _written(store)
    memos = _memos(store, chains)
    reading = anchor_of(store, heads, RECEIVED)
    old_store = store.store_id()

    rewrite_with_key(store, new_store_id="f" * 32)

    inside = store.audit()
    assert inside.ok and not inside.findings, "inside the database the rewrite holds"
    assert store.records("run-1")[-1].output == FORGED
    assert store.run("run-1").inputs == {"ticket": "refund everything"}  # type: ignore[union-attr]

    audit = store.audit(anchors=memos, ledger_anchor=reading, now=NOW)
    assert not audit.ok and not audit.proven
    assert {r.verdict for r in audit.runs} == {"broken"}
    for run in audit.runs:
        problems = [(f.check, f.problem) for f in run.findings]
        assert problems == [("temporal_anchor", "other store"), ("temporal_anchor", "rewritten")]
        assert f"stored its chain in store {old_store}" in run.findings[0].detail
    [ledger] = audit.store
    assert (ledger.check, ledger.problem) == ("ledger_anchor", "replaced")
    assert f"begins store {'f' * 32}" in ledger.detail
    assert f"Temporal anchored store {old_store}" in ledger.detail
    assert "temporal workflow terminate --workflow-id armature-ledger-" in ledger.detail


def test_history_rewritten_with_the_key_fails_the_ledger_anchor_after_temporal_forgot_the_runs(
    store: TraceStore,
) -> None:
    _, heads = _written(store)
    reading = anchor_of(store, heads, RECEIVED)
    rewrite_with_key(store)  # the same store id: only the entries from the first run_end differ

    audit = store.audit(anchors={}, ledger_anchor=reading, now=NOW)
    assert not audit.ok
    [ledger] = audit.store
    assert (ledger.check, ledger.problem, ledger.seq) == ("ledger_anchor", "rewritten", 6)
    # with the ledger's anchor failed, no run is proven by it
    assert {r.verdict for r in audit.runs} == {"unanchored"}


def test_runs_written_after_a_rewrite_do_not_launder_it(store: TraceStore) -> None:
    """The workers go on appending to the rewritten ledger and send its new heads: the anchor
    takes them (same store, same genesis), but still holds the heads it took before."""
    _, heads = _written(store)
    rewrite_with_key(store)
    store.write(make_run("run-9", start=900.0))
    later = store.ledger_head()
    assert later is not None and later.seq == 8
    audit = store.audit(
        anchors={}, ledger_anchor=anchor_of(store, [*heads, later], RECEIVED), now=NOW
    )
    [ledger] = audit.store
    assert (ledger.check, ledger.problem, ledger.seq) == ("ledger_anchor", "rewritten", 6)
    assert audit.ledger_anchor.anchored_seq == 8


def test_the_newest_runs_deleted_after_temporal_forgot_them_are_caught_by_the_ledger_anchor(
    store: TraceStore,
) -> None:
    _, heads = _written(store, runs=4)
    reading = anchor_of(store, heads, RECEIVED)
    before = store.audit(anchors={}, ledger_anchor=reading, now=NOW)  # every workflow gone
    assert before.proven, before
    assert {(r.verdict, r.anchored_by) for r in before.runs} == {("intact", "ledger")}

    assert delete_newest_runs(store, 2) == ["run-2", "run-3"]
    assert store.audit().ok, "inside the database the deletion is invisible"

    audit = store.audit(anchors={}, ledger_anchor=reading, now=NOW)
    assert not audit.ok
    [ledger] = audit.store
    assert (ledger.check, ledger.problem, ledger.seq) == ("ledger_anchor", "deleted", 5)
    assert "the database's ledger ends at entry 4: its newest 4 entries were deleted" in (
        ledger.detail
    )
    assert [r.run_id for r in audit.runs] == ["run-0", "run-1"]


def test_a_store_emptied_whole_is_caught_by_the_ledger_anchor(store: TraceStore) -> None:
    _, heads = _written(store)
    reading = anchor_of(store, heads, RECEIVED)
    for table in ("trace_records", "gate_decisions", "runs", "trace_ledger"):
        sql(store, f"DELETE FROM {table}")
    assert store.audit().ok and store.audit().checked == 0

    audit = store.audit(anchors={}, ledger_anchor=reading, now=NOW)
    [ledger] = audit.store
    assert (ledger.problem, audit.ok) == ("deleted", False)
    assert "the database's ledger is empty" in ledger.detail


def test_a_run_past_the_anchored_head_is_proven_only_by_its_own_workflow(
    store: TraceStore,
) -> None:
    chains, heads = _written(store)
    reading = anchor_of(store, heads[:4], RECEIVED)  # the third run's heads were lost
    audit = store.audit(anchors={}, ledger_anchor=reading, now=NOW)
    assert audit.ok and not audit.proven
    assert {r.run_id: r.verdict for r in audit.runs} == {
        "run-0": "intact",
        "run-1": "intact",
        "run-2": "unanchored",
    }
    assert (
        "past the newest ledger entry Temporal holds (4)"
        in (audit.runs[2].skipped["temporal_anchor"])
    )
    assert (audit.ledger_anchor.status, audit.ledger_anchor.behind) == ("behind", 2)

    memos = {"run-2": _memos(store, chains)["run-2"]}
    shortly = store.audit(anchors=memos, ledger_anchor=reading, now=NOW)
    assert shortly.proven  # a head on its way: the newest run is proven by its workflow

    later = store.audit(anchors=memos, ledger_anchor=reading, now=NOW + ANCHOR_GRACE)
    assert later.ok and not later.proven
    assert later.ledger_anchor.status == "stale"
    assert "would go unseen" in later.ledger_anchor.detail


def test_a_head_of_another_ledger_for_this_database_is_a_conflict(store: TraceStore) -> None:
    _, heads = _written(store)
    forged = heads[-1].model_copy(update={"store_id": "e" * 32, "seq": 99})
    reading = anchor_of(store, [*heads, forged], RECEIVED)
    assert reading.state is not None and reading.state.head is not None
    assert reading.state.head.seq == heads[-1].seq  # the forged head was not taken

    audit = store.audit(anchors={}, ledger_anchor=reading, now=NOW)
    [ledger] = audit.store
    assert (ledger.check, ledger.problem) == ("ledger_anchor", "conflict")
    assert (
        "refused 1 head(s) that do not continue this ledger (the newest: other store, store "
        f"{'e' * 32} entry 99"
    ) in ledger.detail


def test_no_ledger_anchor_in_temporal_leaves_the_runs_without_a_workflow_unanchored(
    store: TraceStore,
) -> None:
    chains, _ = _written(store)
    reading = LedgerAnchorReading(workflow_id="armature-ledger-x", absent="no such workflow")
    audit = store.audit(anchors={}, ledger_anchor=reading, now=NOW)
    assert audit.ok and not audit.proven
    assert audit.ledger_anchor.status == "unanchored"
    assert {r.verdict for r in audit.runs} == {"unanchored"}
    proven = store.audit(anchors=_memos(store, chains), ledger_anchor=reading, now=NOW)
    assert {r.verdict for r in proven.runs} == {"intact"}
    assert not proven.proven, "the ledger itself is not anchored"
