"""Who decided a gate is set by the side that authenticated the caller, never by the payload
(issue #25 item 2).

The attack: a tool program that reached the Temporal frontend sent its own ``require_approval``
gate an update (or signal) approving it "by alice", and the run recorded alice as the
decider. Temporal authenticates nobody here, so the run records ``by`` from a proof made with
the trace key (CLI, run API, library), else ``signal``.

The runs the update and signal tests make are then replayed from their whole histories in the
strict sandbox (``assert_replays``), the verify local activity's recorded result included.
"""

from __future__ import annotations

import asyncio
import os
import pwd
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.gate_auth import sign_decision
from armature_temporal.runtime.models import GateDecision, RunEvent, RunResult
from armature_temporal.service.client import decide_gate, run_outcome
from armature_temporal.store import TraceStore
from armature_temporal.store.keys import load_key
from tests.fakes import assert_replays, plan_from, run_armature, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

TWO_GATES = """\
name: two-gates
model_tiers: {small: {provider: simulate}}
stages:
  - {id: first, gate: {type: human, message: first?}}
  - {id: second, depends_on: [first], gate: {type: human, message: second?}}
"""


def _gates(result: RunResult) -> dict[str, GateDecision]:
    decided = {sid: st.gate for sid, st in result.stages.items() if st.gate is not None}
    return decided  # type: ignore[return-value]


def _stored(run_id: str) -> dict[str, Any]:
    store = TraceStore()
    try:
        return {g.stage_id: g for g in store.gate_decisions(run_id)}
    finally:
        store.close()


async def _raw_update(handle: WorkflowHandle[Any, Any], decision: GateDecision) -> str:
    """What `temporal workflow update` (or anything that reaches the frontend) sends."""
    answer: str = await handle.execute_update("resolve_gate", decision, result_type=str)
    return answer


async def test_a_raw_update_or_signal_claiming_alice_is_recorded_as_signal(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(TWO_GATES), task_queue)
        await wait_for_gate(handle, "first")
        answer = await _raw_update(
            handle, GateDecision(stage="first", decision="approve", comment="me", by="alice")
        )
        assert answer == "first: approved"  # a raw update still decides the gate
        await wait_for_gate(handle, "second")
        await handle.signal("gate", {"stage": "second", "decision": "approve", "by": "alice"})
        result = await handle.result()
        events = await handle.query("events", 0, result_type=list[RunEvent])
    assert result.state == "completed"
    gates = _gates(result)
    for stage in ("first", "second"):
        assert gates[stage].by == "signal", gates[stage]
        assert gates[stage].claimed_by == "alice"
        assert result.outputs[stage]["by"] == "signal"
    decided = [e.data["by"] for e in events if e.type == "gate_decided"]
    assert decided == ["signal", "signal"]
    stored = _stored(handle.id)
    assert {s: (g.decided_by, g.claimed_by, g.trusted) for s, g in stored.items()} == {
        "first": ("signal", "alice", True),
        "second": ("signal", "alice", True),
    }
    await assert_replays(client, handle.id)


async def test_a_forged_proof_claiming_alice_is_recorded_as_signal_and_says_why(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(TWO_GATES), task_queue)
        await wait_for_gate(handle, "first")
        forged = {
            "stage": "first",
            "decision": "approve",
            "by": "alice",
            "proof": {"issued_at": datetime.now(UTC).isoformat(), "nonce": "0", "mac": "f" * 64},
        }
        await handle.signal("gate", forged)
        await wait_for_gate(handle, "second")
        await decide_gate(client, handle.id, "second", "approve", by="bob")  # the real thing
        result = await handle.result()
    gates = _gates(result)
    assert (gates["first"].by, gates["first"].claimed_by) == ("signal", "alice")
    assert "does not match this run" in (gates["first"].unverified or "")
    assert gates["first"].proof is None  # not kept in the record
    assert (gates["second"].by, gates["second"].claimed_by) == ("bob", None)
    stored = _stored(handle.id)
    assert "does not match" in (stored["first"].unverified or "")
    assert stored["second"].decided_by == "bob" and stored["second"].unverified is None


async def test_a_captured_proof_replayed_to_another_run_gate_or_wait_is_not_authenticated(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        run_a = await start(client, plan_from(TWO_GATES), task_queue)
        run_b = await start(client, plan_from(TWO_GATES), task_queue)
        await wait_for_gate(run_a, "first")
        await wait_for_gate(run_b, "first")
        key = load_key(create=False)  # the worker made it when the runs' traces were stored
        assert key is not None
        # A decision the CLI would send for run A's first gate, captured on its way.
        captured = sign_decision(
            key, run_a.id, GateDecision(stage="first", decision="approve", by="alice")
        )
        await _raw_update(run_a, captured)  # where it was made for: alice, proved
        await _raw_update(run_b, captured)  # another run
        await wait_for_gate(run_a, "second")
        await _raw_update(run_a, captured.model_copy(update={"stage": "second"}))  # another gate
        await wait_for_gate(run_b, "second")
        early = sign_decision(
            key,
            run_b.id,
            GateDecision(stage="second", decision="approve", by="alice"),
            now=datetime.now(UTC) - timedelta(hours=1),  # made before this gate waited
        )
        await _raw_update(run_b, early)
        result_a, result_b = await asyncio.gather(run_a.result(), run_b.result())
    a, b = _gates(result_a), _gates(result_b)
    assert a["first"].by == "alice" and a["first"].unverified is None
    for decided, why in (
        (b["first"], "does not match this run, gate"),
        (a["second"], "does not match this run, gate"),
        (b["second"], "earlier wait"),
    ):
        assert (decided.by, decided.claimed_by) == ("signal", "alice")
        assert why in (decided.unverified or ""), decided
    await assert_replays(client, run_a.id, run_b.id)


async def test_cli_approve_records_the_os_account_not_the_environment_or_the_payload(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    address = str(temporal_env.client.service_client.config.target_host)
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(TWO_GATES), task_queue)
        await wait_for_gate(handle, "first")
        spoofed = {"USER": "alice", "LOGNAME": "alice"}
        approved = await run_armature(
            "approve", handle.id, "first", "--address", address, "--comment", "ok", env=spoofed
        )
        assert approved.returncode == 0, approved.stderr
        await wait_for_gate(handle, "second")
        rejected = await run_armature(
            "reject", handle.id, "second", "--address", address, "--reason", "no", env=spoofed
        )
        assert rejected.returncode == 0, rejected.stderr
        result = await run_outcome(handle)
    assert result is not None and result.state == "rejected"
    me = pwd.getpwuid(os.getuid()).pw_name
    gates = _gates(result)
    assert [gates["first"].by, gates["second"].by] == [me, me]  # not $USER's "alice"
    assert gates["first"].claimed_by is None and gates["second"].claimed_by is None
    stored = _stored(handle.id)
    assert stored["first"].decided_by == me and stored["first"].trusted


async def test_cli_approve_without_the_trace_key_sends_nothing_and_says_why(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Any
) -> None:
    address = str(temporal_env.client.service_client.config.target_host)
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(TWO_GATES), task_queue)
        await wait_for_gate(handle, "first")
        elsewhere = tmp_path / "laptop"  # a machine without the workers' key
        refused = await run_armature(
            "approve",
            handle.id,
            "first",
            "--address",
            address,
            env={"ARMATURE_HOME": str(elsewhere)},
        )
        assert refused.returncode == 2, refused.stdout
        assert f"no trace key at {elsewhere / 'trace.key'}" in refused.stderr
        assert "nothing was sent" in refused.stderr
        status = await wait_for_gate(handle, "first")  # still waiting: nothing was written
        assert status.stages["first"].gate is None
        await handle.cancel()
