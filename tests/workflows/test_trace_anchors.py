"""Each run's chain head is anchored in Temporal (issue #14, item 4): after every flush the
workflow writes the stored records' count and head to its memo, where someone who can write
the trace database cannot reach. ``armature traces verify`` reads it back.

The attack that only the anchor can show: a run waits at a gate; someone deletes the records
of its latest flush and puts back the summary (head, count and a valid MAC) they copied after
the flush before. Every check inside the database then holds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text
from temporalio.client import Client

from armature_temporal.runtime.traces import CHAIN_MEMO
from armature_temporal.service.client import decide_gate
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import free_port, plan_from, run_armature, start, wait_for_gate
from tests.workflows.test_ledger_anchor import anchored
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: anchored
model_tiers:
  small: {provider: simulate}
stages:
  - id: draft
    role: {name: Writer, model_tier: small, description: "Write a line."}
  - id: first
    depends_on: [draft]
    gate: {type: human}
  - id: polish
    depends_on: [first]
    role: {name: Editor, model_tier: small, description: "Polish it."}
  - id: second
    depends_on: [polish]
    gate: {type: human}
"""


async def _anchor(handle: Any) -> dict[str, Any]:
    memo = await (await handle.describe()).memo()
    value = memo[CHAIN_MEMO]
    assert isinstance(value, dict)
    return value


def _address(client: Client) -> str:
    return str(client.service_client.config.target_host)


async def _verify(client: Client, *args: str) -> Any:
    result = await run_armature(
        "traces",
        "verify",
        *args,
        "--address",
        _address(client),
        "--json",
        env={"ARMATURE_DB_URL": ""},
    )
    return result.returncode, json.loads(result.stdout)


async def test_a_waiting_run_rolled_back_to_an_earlier_flush_fails_only_the_temporal_anchor(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(SPEC)
    store = TraceStore(database_url())
    try:
        async with build_worker(client, task_queue):
            handle = await start(client, plan, task_queue)
            await wait_for_gate(handle, "first")
            early = await _anchor(handle)
            records = store.records(handle.id)
            assert (early["length"], early["head"]) == (len(records), records[-1].hash)
            assert early["store"] == store.store_id() and early["final"] is False
            with store.engine.begin() as conn:
                saved = conn.execute(
                    text(
                        "SELECT chain_head, chain_length, summary_mac FROM runs WHERE run_id = :r"
                    ),
                    {"r": handle.id},
                ).one()

            await decide_gate(client, handle.id, "first", "approve")
            await wait_for_gate(handle, "second")
            late = await _anchor(handle)
            assert late["length"] > early["length"]
            assert late["length"] == len(store.records(handle.id))
            await anchored(client, store)
            code, clean = await _verify(client, handle.id)
            assert code == 0 and clean["ok"], clean
            assert clean["runs"][0]["checks"]["temporal_anchor"] == "ok"

            with store.engine.begin() as conn:  # the rollback
                conn.execute(
                    text("DELETE FROM trace_records WHERE run_id = :r AND seq >= :n"),
                    {"r": handle.id, "n": early["length"]},
                )
                conn.execute(
                    text(
                        "UPDATE runs SET chain_head = :h, chain_length = :n, summary_mac = :m "
                        "WHERE run_id = :r"
                    ),
                    {"h": saved[0], "n": saved[1], "m": saved[2], "r": handle.id},
                )
            offline = store.audit([handle.id])
            assert offline.ok, "inside the database the rollback is invisible"

            code, found = await _verify(client, handle.id)
            await handle.terminate("test done")
    finally:
        store.close()
    assert code == 1 and not found["ok"]
    [run] = found["runs"]
    assert run["checks"] == {
        "chain": "ok",
        "mac": "ok",
        "summary_mac": "ok",
        "ledger": "ok",
        "temporal_anchor": "failed",
    }
    [finding] = run["findings"]
    assert (finding["check"], finding["problem"], finding["seq"]) == (
        "temporal_anchor",
        "deleted",
        early["length"],
    )
    assert f"recorded {late['length']} records stored" in finding["detail"]


async def test_a_finished_run_is_anchored_with_its_final_head_and_verify_says_when_temporal_is_gone(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(
        SPEC.replace("gate: {type: human}", "gate: {type: human, timeout: 1s, on_timeout: approve}")
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await handle.result()
    anchor = await _anchor(handle)
    store = TraceStore(database_url())
    try:
        records = store.records(handle.id)
    finally:
        store.close()
    assert anchor["final"] is True
    assert (anchor["length"], anchor["head"]) == (len(records), records[-1].hash)

    store = TraceStore(database_url())
    try:
        await anchored(client, store)  # the ledger's head, sent in the background
    finally:
        store.close()
    code, found = await _verify(client)
    assert code == 0 and found["ok"] and found["temporal_anchor_skipped"] is None
    assert [r["checks"]["temporal_anchor"] for r in found["runs"]] == ["ok"]
    assert found["ledger_anchor"]["status"] == "ok"

    gone = await run_armature(
        "traces", "verify", "--address", f"127.0.0.1:{free_port()}", env={"ARMATURE_DB_URL": ""}
    )
    assert gone.returncode == 3  # nothing failed, nothing proven: unanchored, never intact
    assert "1 run(s) unanchored" in gone.stdout
    assert "not compared with Temporal: cannot reach the Temporal server" in gone.stdout
    assert "every check holds" not in gone.stdout + gone.stderr

    # The run deleted whole, its ledger entries too (they are the ledger's last: removing
    # them leaves a ledger that holds): only Temporal still knows it went to this store.
    store = TraceStore(database_url())
    try:
        with store.engine.begin() as conn:
            for table in ("trace_records", "gate_decisions", "runs", "trace_ledger"):
                conn.execute(text(f"DELETE FROM {table} WHERE run_id = :r"), {"r": handle.id})
        assert store.audit().ok, "inside the database the deletion is invisible"
    finally:
        store.close()
    code, found = await _verify(client)
    assert code == 1
    [run] = found["runs"]
    assert run["run_id"] == handle.id and run["checks"]["temporal_anchor"] == "failed"
    # and the ledger's anchor in Temporal held the entries deleted with it
    assert [(b["check"], b["problem"]) for b in found["breaks"] if b["run_id"] is None] == [
        ("ledger_anchor", "deleted")
    ]
