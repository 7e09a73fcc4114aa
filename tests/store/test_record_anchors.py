"""The record cannot be rewritten quietly (issue #14, item 4), on SQLite and PostgreSQL.

Each attack is one someone with write access to the database, but not to ARMATURE_HOME's
trace key, made against the store, and after which ``armature traces verify`` used to say
"intact". Each test checks that verify now names the check that fails.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, Table, insert

from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine
from armature_temporal.store.keys import key_path
from armature_temporal.store.tamper import Anchor
from tests.store.chains import make_run
from tests.store.test_trace_store import sql

RUN_KWARGS: dict[str, Any] = {"retry_stage": "draft", "judge_score": 0.8, "gate_stage": "draft"}


def _written(store: TraceStore) -> dict[str, list[TraceRecord]]:
    chains = {f"run-{n}": make_run(f"run-{n}", start=60.0 * n, **RUN_KWARGS) for n in range(3)}
    for records in chains.values():
        store.write(records)
    assert store.verify() == (3, [])
    return chains


def _failed(store: TraceStore, run_id: str = "run-1") -> dict[str, list[tuple[str, int | None]]]:
    """verify's failed checks of ``run_id``: check -> [(problem, seq)]. Fails if verify says
    intact (what it said before these checks existed), or names another run."""
    _, breaks = store.verify()
    assert breaks, "verify said every run is intact"
    assert {b.run_id for b in breaks} == {run_id}, breaks
    failed: dict[str, list[tuple[str, int | None]]] = {}
    for b in breaks:
        failed.setdefault(b.check, []).append((b.problem, b.seq))
    return failed


def _json(store: TraceStore, value: str) -> str:
    return ":v" if store.engine.dialect.name == "sqlite" else f"CAST(:{value} AS json)"


def _rewrite_from(store: TraceStore, run_id: str, records: list[TraceRecord], at: int) -> str:
    """Replace record ``at`` with an edited output and recompute every later hash, as the
    chain's own rules allow anyone to; returns the new head."""
    prev = records[at - 1].hash
    for record in records[at:]:
        change: dict[str, Any] = {"prev_hash": prev}
        if record.seq == at:
            change["output"] = {"content": "wire the funds to account 4471"}
        sealed = record.model_copy(update=change).sealed()
        sql(
            store,
            f"UPDATE trace_records SET output = {_json(store, 'v')}, prev_hash = :p, hash = :h "
            "WHERE run_id = :r AND seq = :s",
            v=sealed.model_dump_json(include={"output"})[len('{"output":') : -1],
            p=sealed.prev_hash,
            h=sealed.hash,
            r=run_id,
            s=record.seq,
        )
        prev = sealed.hash
    return prev


def test_output_edited_with_every_later_hash_recomputed_and_head_moved_fails_the_mac(
    store: TraceStore,
) -> None:
    chains = _written(store)
    head = _rewrite_from(store, "run-1", chains["run-1"], 5)
    sql(store, "UPDATE runs SET chain_head = :h WHERE run_id = 'run-1'", h=head)

    failed = _failed(store)
    assert "chain" not in failed  # the chain itself holds: that is the attack
    assert failed["mac"] == [("forged", 5)]
    assert "summary_mac" in failed  # the head it covers moved
    assert failed["ledger"][0][0] == "mismatch"  # the ledger recorded the old head


def test_last_record_deleted_and_head_moved_fails_the_summary_mac_and_ledger(
    store: TraceStore,
) -> None:
    chains = _written(store)
    records = chains["run-1"]
    sql(store, "DELETE FROM trace_records WHERE run_id = 'run-1' AND seq = 10")
    sql(
        store,
        "UPDATE runs SET chain_head = :h, chain_length = 10 WHERE run_id = 'run-1'",
        h=records[9].hash,
    )

    failed = _failed(store)
    assert "chain" not in failed and "mac" not in failed
    assert failed["summary_mac"] == [("edited", None)]
    assert failed["ledger"] == [("mismatch", None)]
    [ledger] = [b.detail for b in store.verify()[1] if b.check == "ledger"]
    assert "runs.chain_length is 10, the ledger recorded 11" in ledger


def test_a_run_deleted_whole_is_still_in_the_ledger(store: TraceStore) -> None:
    _written(store)
    sql(store, "DELETE FROM trace_records WHERE run_id = 'run-1'")
    sql(store, "DELETE FROM gate_decisions WHERE run_id = 'run-1'")
    sql(store, "DELETE FROM runs WHERE run_id = 'run-1'")

    failed = _failed(store)
    assert failed["ledger"] == [("deleted", None)]
    assert failed["chain"] == [("deleted", None)]
    checked, _ = store.verify()
    assert checked == 3


def test_the_tail_of_a_run_waiting_at_a_gate_deleted_is_noticed(store: TraceStore) -> None:
    records = make_run("run-1", **RUN_KWARGS)[:7]  # up to the gate: the run waits there
    store.write(records[:4])
    store.write(records[4:])
    assert store.verify() == (1, [])
    assert store.audit().runs[0].verdict == "unanchored"  # nothing failed; Temporal not asked

    sql(store, "DELETE FROM trace_records WHERE run_id = 'run-1' AND seq >= 5")
    assert _failed(store)["chain"] == [("deleted", 5)]  # the summary's head is gone

    sql(
        store,
        "UPDATE runs SET chain_head = :h, chain_length = 5 WHERE run_id = 'run-1'",
        h=records[4].hash,
    )
    failed = _failed(store)
    assert failed == {"summary_mac": [("edited", None)]}
    # Temporal's memo says 7 records were stored: the anchor check names the deletion even
    # if an older, validly MAC'd summary were put back.
    anchors = {"run-1": Anchor(length=7, head=records[6].hash, store=store.store_id())}
    audit = store.audit(anchors=anchors)
    [run] = audit.runs
    assert run.checks["temporal_anchor"] == "failed"
    assert [(f.check, f.problem, f.seq) for f in run.findings if f.check == "temporal_anchor"] == [
        ("temporal_anchor", "deleted", 5)
    ]


@pytest.mark.parametrize(
    ("column", "value"),
    [("status", "'failed'"), ("hqs", "0.99"), ("cost_usd", "0.0")],
)
def test_a_run_summary_edited_fails_its_mac_and_names_the_field(
    store: TraceStore, column: str, value: str
) -> None:
    _written(store)
    before = sql(store, f"SELECT {column} FROM runs WHERE run_id = 'run-1'")[0][0]
    sql(store, f"UPDATE runs SET {column} = {value} WHERE run_id = 'run-1'")

    failed = _failed(store)
    assert set(failed) == {"summary_mac", "ledger"}
    [(_, _, detail)] = [
        (f.check, f.problem, f.detail) for f in store.verify()[1] if f.check == "summary_mac"
    ]
    assert f"runs.{column} is" in detail and f"the ledger recorded {before!r}" in detail


def test_macs_stripped_to_pass_as_legacy_are_noticed(store: TraceStore) -> None:
    _written(store)
    sql(store, "UPDATE trace_records SET mac = NULL WHERE run_id = 'run-1'")
    sql(store, "UPDATE runs SET summary_mac = NULL WHERE run_id = 'run-1'")

    failed = _failed(store)
    assert failed["mac"] == [("stripped", 0)]
    assert failed["summary_mac"] == [("stripped", None)]


def test_a_run_added_without_the_key_is_not_in_the_ledger(store: TraceStore) -> None:
    _written(store)
    forged = make_run("run-9", start=600.0)
    with store.engine.begin() as conn:
        conn.execute(
            insert(Table("trace_records", MetaData(), autoload_with=conn)),
            [r.model_dump(mode="json") for r in forged],
        )
    failed = _failed(store, "run-9")
    assert failed["ledger"] == [("missing", None)]
    assert failed["mac"] == [("stripped", 0)]


def test_ledger_entries_removed_or_edited_break_the_ledger(store: TraceStore) -> None:
    _written(store)
    sql(store, "DELETE FROM trace_ledger WHERE seq = 3")
    _, breaks = store.verify()
    assert [(b.run_id, b.check, b.problem) for b in breaks][:1] == [(None, "ledger", "broken")]
    assert "ledger entry 3 is missing" in breaks[0].detail


def test_another_key_is_named_not_taken_for_forgery(store: TraceStore, tmp_path: Path) -> None:
    _written(store)
    other = TraceStore(store.url, key=tmp_path / "other.key")
    try:
        assert other.trace_key(create=True) is not None
        _, breaks = other.verify()
    finally:
        other.close()
    assert breaks[0].check == "ledger" and "was made with trace key" in breaks[0].detail
    problems = {(b.run_id, b.check, b.problem) for b in breaks if b.run_id}
    assert problems == {
        (f"run-{n}", check, "other key") for n in range(3) for check in ("mac", "summary_mac")
    }


# --- legacy stores ------------------------------------------------------------------------------


def test_a_store_written_before_macs_verifies_as_legacy_unkeyed(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=7) == [1, 2, 3, 4, 5, 6, 7]
    old = make_run("old-run")
    with engine.begin() as conn:  # written the v7 way: no MACs, no ledger
        meta = MetaData()
        conn.execute(
            insert(Table("trace_records", meta, autoload_with=conn)),
            [r.model_dump(mode="json") for r in old],
        )
        conn.execute(
            insert(Table("runs", meta, autoload_with=conn)).values(
                run_id="old-run",
                spec_name="triage",
                spec_hash=old[0].spec_hash,
                policy_version="policy-1",
                status="completed",
                started_at=old[0].recorded_at,
                prompt_tokens=300,
                completion_tokens=60,
                cost_usd=0.003,
                chain_head=old[-1].hash,
            )
        )
    release_engine(engine)

    store = TraceStore(db_url)
    try:
        audit = store.audit()
        assert audit.ok
        [run] = audit.runs
        assert run.verdict == "legacy"
        assert run.checks == {
            "chain": "ok",
            "mac": "legacy",
            "summary_mac": "legacy",
            "ledger": "legacy",
            "temporal_anchor": "legacy",
        }
        store.write(make_run("new-run", start=60.0))  # the ledger begins, listing old-run
        after = {r.run_id: r.verdict for r in store.audit().runs}
        assert after == {"old-run": "legacy", "new-run": "unanchored"}
        # a legacy run is still chain-checked
        sql(store, "DELETE FROM trace_records WHERE run_id = 'old-run' AND seq = 3")
        assert [(b.run_id, b.check, b.seq) for b in store.verify()[1]] == [("old-run", "chain", 3)]
        # and deleting it whole is noticed: the ledger's genesis listed it
        sql(store, "DELETE FROM trace_records WHERE run_id = 'old-run'")
        sql(store, "DELETE FROM runs WHERE run_id = 'old-run'")
        assert [(b.run_id, b.check, b.problem) for b in store.verify()[1]] == [
            ("old-run", "ledger", "deleted")
        ]
    finally:
        store.close()


# --- file modes ---------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_home_and_sqlite_store_are_created_owner_only(armature_home: Path) -> None:
    store = TraceStore()  # SQLite under ARMATURE_HOME
    try:
        assert not key_path().exists()  # created on first use, not on open
        store.write(make_run("run-1"))
    finally:
        store.close()
    assert _mode(armature_home) == 0o700
    assert _mode(key_path()) == 0o600
    assert _mode(armature_home / "armature.db") == 0o600
    wal = armature_home / "armature.db-wal"
    assert not wal.exists() or _mode(wal) == 0o600


def test_payload_files_are_owner_only(tmp_path: Path) -> None:
    from temporalio.api.common.v1 import Payload

    from armature_temporal.runtime.payloads import LocalFileDriver

    root = tmp_path / "payloads"
    [claim] = LocalFileDriver(root)._store_sync([Payload(data=b"a stage output" * 1000)])
    digest = claim.claim_data["sha256"]
    assert _mode(root) == 0o700 and _mode(root / digest[:2]) == 0o700
    assert _mode(root / digest[:2] / digest) == 0o600
