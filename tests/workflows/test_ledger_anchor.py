"""The record against a thief of the trace key (issue #25, item 3), end to end: real runs on a
real Temporal dev server write to SQLite and PostgreSQL stores, their workers anchor the
ledger's heads in the ``LedgerAnchor`` workflow, and ``armature traces verify`` is run as a
user runs it.

- With the key, the whole history rewritten (outputs and inputs; chains, MACs and summary MACs
  recomputed; the ledger re-chained under a new genesis store id): verify used to skip every
  run's Temporal anchor as "another store" and say intact. It fails now.
- Temporal not asked or unreachable: every run is "unanchored" (exit 3), never "intact".
- The newest runs deleted with their ledger entries (no key needed) after Temporal forgot their
  workflows: verify used to say intact. The ledger's anchor catches it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from armature_temporal.runtime.ledger_anchor import (
    HEAD_SIGNAL,
    LEDGER_ANCHOR_QUEUE,
    LEDGER_ANCHOR_WORKFLOW,
    LedgerAnchorState,
    LedgerHead,
    ledger_anchor_id,
)
from armature_temporal.service.anchors import read_ledger_anchor
from armature_temporal.service.client import WORKFLOW_NAME
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.store.tamper import LedgerAnchorReading
from tests.fakes import free_port, plan_from, replayer, run_armature, start
from tests.store.conftest import fresh_database
from tests.store.forge import FORGED, delete_newest_runs, rewrite_with_key
from worker import ANCHOR_WORKFLOWS, build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: anchored-ledger
inputs: [ticket]
model_tiers:
  small: {provider: simulate}
stages:
  - id: draft
    role: {name: Writer, model_tier: small, description: "Answer {{ ticket }}."}
  - id: check
    depends_on: [draft]
    role: {name: Editor, model_tier: small, description: "Check {{ draft.content }}."}
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The store the worker writes to and verify reads: SQLite under ARMATURE_HOME, or a new
    PostgreSQL database (skipped, saying why, when PostgreSQL is unreachable)."""
    if request.param == "sqlite":
        monkeypatch.delenv("ARMATURE_DB_URL", raising=False)
        yield database_url()
        return
    with fresh_database("armature_anchor") as url:
        rendered = url.render_as_string(hide_password=False)
        monkeypatch.setenv("ARMATURE_DB_URL", rendered)
        yield rendered


def _address(client: Client) -> str:
    return str(client.service_client.config.target_host)


async def _verify(client: Client | None, store_url: str, *args: str) -> tuple[int, Any]:
    where = ["--address", _address(client)] if client is not None else []
    result = await run_armature(
        "traces", "verify", *args, *where, "--json", env={"ARMATURE_DB_URL": store_url}
    )
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


async def _finished_runs(client: Client, task_queue: str, count: int) -> list[str]:
    """``count`` runs, one after another (each one's ledger entries follow the last's)."""
    plan = plan_from(SPEC)
    ids = []
    for n in range(count):
        handle = await start(client, plan, task_queue, {"ticket": f"ticket {n}"})
        await handle.result()
        ids.append(handle.id)
    return ids


async def anchored(client: Client, store: TraceStore) -> LedgerAnchorReading:
    """Wait until Temporal's ledger anchor holds the database's last ledger entry (the workers
    send heads in the background)."""
    from armature_temporal.store.ledger import read_ledger

    with store.engine.connect() as conn:
        last = read_ledger(conn, None).entries[-1].seq
    reading = None
    for _ in range(400):
        reading = await read_ledger_anchor(client, store.database_identity())
        head = reading.state.head if reading.state is not None else None
        if head is not None and head.seq >= last:
            return reading
        await asyncio.sleep(0.05)
    raise AssertionError(f"the ledger anchor never reached entry {last}: {reading}")


async def _forget(client: Client, run_ids: list[str]) -> None:
    """Delete the runs' workflows from Temporal, as the namespace's retention does."""
    for run_id in run_ids:
        await client.workflow_service.delete_workflow_execution(
            DeleteWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=run_id),
            )
        )
    listed: list[str] = []
    known: list[str] = []
    for _ in range(600):  # deletion and its visibility update are asynchronous
        listed = [
            w.id
            async for w in client.list_workflows(f"WorkflowType = '{WORKFLOW_NAME}'")
            if w.id in run_ids
        ]
        known = []
        for run_id in run_ids:
            try:
                await client.get_workflow_handle(run_id).describe()
            except RPCError as exc:
                assert exc.status == RPCStatusCode.NOT_FOUND
            else:
                known.append(run_id)
        if not listed and not known:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"Temporal still lists {listed} and describes {known}")


async def test_history_rewritten_with_the_key_and_the_ledger_begun_anew_fails_verify(
    client: Client, task_queue: str, store_url: str
) -> None:
    async with build_worker(client, task_queue):
        run_ids = await _finished_runs(client, task_queue, 3)
    store = TraceStore(store_url)
    try:
        reading = await anchored(client, store)
        old_store = store.store_id()
        assert reading.state is not None and reading.state.store_id == old_store
        assert reading.state.head is not None and reading.state.head.runs == 3
        code, clean = await _verify(client, store_url)
        assert code == 0 and clean["ok"] and clean["proven"], clean
        assert clean["intact"] == 3 and clean["ledger_anchor"]["status"] == "ok"

        rewrite_with_key(store, new_store_id="f" * 32)
        assert store.audit().ok, "every check inside the database holds after the rewrite"
        assert store.records(run_ids[0])[-1].output == FORGED
    finally:
        store.close()

    code, found = await _verify(client, store_url)
    assert code == 1 and not found["ok"] and found["tampered"]
    assert sorted(found["broken"]) == sorted(run_ids) and found["intact"] == 0
    for run in found["runs"]:
        assert run["checks"]["temporal_anchor"] == "failed"
        problems = {f["problem"] for f in run["findings"]}
        assert problems == {"other store", "rewritten"}, run
    ledger = [b for b in found["breaks"] if b["run_id"] is None]
    assert [(b["check"], b["problem"]) for b in ledger] == [("ledger_anchor", "replaced")]
    assert f"Temporal anchored store {old_store}" in ledger[0]["detail"]

    one = await run_armature(
        "traces", "verify", run_ids[0], "--address", _address(client),
        env={"ARMATURE_DB_URL": store_url},
    )  # fmt: skip
    assert one.returncode == 1
    assert f"{run_ids[0]}: temporal_anchor: other store: the run's workflow stored its chain " in (
        one.stdout
    )
    assert "the record was tampered with" in one.stderr


async def test_offline_or_unreachable_every_run_is_unanchored_and_verify_exits_3(
    client: Client, task_queue: str, store_url: str
) -> None:
    async with build_worker(client, task_queue):
        run_ids = await _finished_runs(client, task_queue, 2)

    code, found = await _verify(None, store_url, "--offline")
    assert code == 3 and not found["ok"] and not found["proven"] and not found["tampered"]
    assert found["intact"] == 0 and sorted(found["unanchored"]) == sorted(run_ids)
    assert {r["checks"]["temporal_anchor"] for r in found["runs"]} == {"unanchored"}
    assert found["ledger_anchor"]["status"] == "unanchored"

    closed = f"127.0.0.1:{free_port()}"
    shown = await run_armature(
        "traces", "verify", "--address", closed, env={"ARMATURE_DB_URL": store_url}
    )
    assert shown.returncode == 3
    assert "2 run(s) checked: 0 intact, 2 unanchored" in shown.stderr
    assert (
        f"2 run(s) unanchored ({', '.join(sorted(run_ids))}): not compared with Temporal: "
        f"cannot reach the Temporal server at {closed}"
    ) in shown.stdout
    assert "every check holds" not in shown.stdout + shown.stderr

    allowed = await run_armature(
        "traces", "verify", "--offline", "--allow-unanchored", env={"ARMATURE_DB_URL": store_url}
    )
    assert allowed.returncode == 0
    assert "accepted (--allow-unanchored)" in allowed.stdout


async def test_the_newest_runs_deleted_after_temporal_forgot_them_are_caught_by_the_ledger_anchor(
    client: Client, task_queue: str, store_url: str
) -> None:
    async with build_worker(client, task_queue):
        run_ids = await _finished_runs(client, task_queue, 4)
    store = TraceStore(store_url)
    try:
        await anchored(client, store)
        await _forget(client, run_ids)
        code, found = await _verify(client, store_url)
        assert code == 0 and found["proven"], found
        assert {(r["verdict"], r["anchored_by"]) for r in found["runs"]} == {("intact", "ledger")}

        assert delete_newest_runs(store, 2) == run_ids[2:]
        assert store.audit().ok, "inside the database the deletion is invisible"
    finally:
        store.close()

    code, found = await _verify(client, store_url)
    assert code == 1 and found["tampered"]
    [ledger] = found["breaks"]
    assert (ledger["check"], ledger["problem"]) == ("ledger_anchor", "deleted")
    assert "4 run(s) started" in ledger["detail"]
    assert (
        "the database's ledger ends at entry 4: its newest 4 entries were deleted"
        in (ledger["detail"])
    )
    assert [r["run_id"] for r in found["runs"]] == sorted(run_ids[:2])


async def test_the_anchor_workflow_folds_heads_continues_as_new_and_replays(
    client: Client,
) -> None:
    """Heads sent straight to a LedgerAnchor workflow (as the workers send them): it keeps the
    newest, refuses one of another store, continues as new every few heads carrying its state,
    verify's history fold agrees with its own, and every run of it replays."""
    database = f"sqlite:////tmp/anchor-workflow-{uuid.uuid4().hex}.db"
    wid = ledger_anchor_id(database)
    start_state = LedgerAnchorState(
        database=database, key_id="k", store_id="s1", genesis="g0", continue_after=3
    )

    def head(seq: int, store: str = "s1") -> LedgerHead:
        return LedgerHead(
            store_id=store, genesis="g0", seq=seq, hash=f"h{seq}", recorded_at="t", runs=seq // 2
        )

    async with build_worker(client, f"tq-unused-{free_port()}"):
        for seq in [*range(1, 9), 5]:
            await client.start_workflow(
                LEDGER_ANCHOR_WORKFLOW,
                start_state,
                id=wid,
                task_queue=LEDGER_ANCHOR_QUEUE,
                start_signal=HEAD_SIGNAL,
                start_signal_args=[head(seq)],
            )
        await client.get_workflow_handle(wid).signal(HEAD_SIGNAL, head(99, store="s2"))
        handle = client.get_workflow_handle(wid)
        for _ in range(200):
            state = await handle.query("state", result_type=LedgerAnchorState)
            if state.conflicts_seen == 1 and state.head is not None and state.head.seq == 8:
                break
            await asyncio.sleep(0.05)
        reading = await read_ledger_anchor(client, database)
        await handle.terminate("test done")
    # Every run's whole history (each ends: continued as new, or terminated), newest first,
    # following each run's start back to the run it continued.
    histories: list[WorkflowHistory] = []
    run_id = (await handle.describe()).run_id
    while run_id:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        histories.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id
    assert state.head is not None and state.head.seq == 8 and state.heads_seen == 10
    assert [c.seq for c in state.checkpoints] == list(range(1, 9))
    assert state.conflicts[0].why == "other store" and state.conflicts[0].head.seq == 99
    assert reading.state is not None and reading.state.head is not None
    assert reading.state.head.seq == 8 and reading.state.head.runs == 4
    assert reading.state.conflicts_seen == 1
    assert [c.seq for c in reading.state.checkpoints] == list(range(1, 9))
    assert len(histories) >= 2, "it continued as new"
    anchors = replayer(ANCHOR_WORKFLOWS)
    for history in histories:
        await anchors.replay_workflow(history)


async def test_heads_noted_together_are_sent_as_one_signal_and_drain_sends_at_once(
    client: Client,
) -> None:
    """The worker's sender returns at once and sends the newest of the heads noted while it
    lingers: one signal for many appends (the run's path never waits for Temporal)."""
    from armature_temporal.service.anchors import LINGER, LedgerAnchorSender

    database = f"sqlite:////tmp/anchor-sender-{uuid.uuid4().hex}.db"
    start_state = LedgerAnchorState(database=database, key_id="k", store_id="s1", genesis="g0")
    sender = LedgerAnchorSender(client)
    loop = asyncio.get_running_loop()
    began = loop.time()
    for seq in range(1, 6):
        sender.note(
            start_state,
            LedgerHead(store_id="s1", genesis="g0", seq=seq, hash=f"h{seq}", recorded_at="t"),
            lambda upto: upto * 10,
        )
    noted = loop.time() - began
    await sender.drain()
    drained = loop.time() - began
    handle = client.get_workflow_handle(ledger_anchor_id(database))
    history = await handle.fetch_history()
    await handle.terminate("test done")
    signals = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert noted < 0.05 and drained < LINGER.total_seconds()
    assert len(signals) == 1
    reading = await read_ledger_anchor(client, database)
    assert reading.state is None  # terminated: it anchors nothing now
    [head] = await client.data_converter.decode(
        list(signals[0].workflow_execution_signaled_event_attributes.input.payloads),
        [LedgerHead],
    )
    assert (head.seq, head.runs) == (5, 50)
