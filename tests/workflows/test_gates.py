"""Human gates: durable waits resolved by update or signal, with timeouts and validation.

Each run that ends is then replayed from its whole history in the strict sandbox
(``assert_replays``), a replay-safety check on the interpreter.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.models import GateDecision, RunResult
from armature_temporal.runtime.search_attributes import WAITING_GATE
from armature_temporal.service.client import GateError, decide_gate, run_outcome, waiting_gates
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, assert_replays, plan_from, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_gate_waits_then_approve_lets_the_run_finish(client: Client, task_queue: str) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        status = await wait_for_gate(handle, "approve_reply")
        assert status.state == "waiting_gate"
        assert status.stages["approve_reply"].status == "waiting_gate"
        assert "Send this reply?" in (status.pending_gates[0].message or "")
        desc = await handle.describe()
        assert desc.typed_search_attributes.get(WAITING_GATE) is True
        for _ in range(100):  # visibility is eventually consistent
            listed = {
                run.run_id: g for run, g in await waiting_gates(client, spec="customer-triage")
            }
            if handle.id in listed:
                break
            await asyncio.sleep(0.1)
        gates = listed[handle.id]
        assert isinstance(gates, list) and [g.stage for g in gates] == ["approve_reply"]
        answer = await decide_gate(
            client, handle.id, "approve_reply", "approve", comment="ship it", by="tester"
        )
        assert answer == "approve_reply: approved"
        result = await handle.result()
    assert result.state == "completed"
    gate = result.stages["approve_reply"].gate
    assert gate is not None and gate.comment == "ship it" and gate.by == "tester"
    assert result.stages["refine"].status == "completed"
    desc = await handle.describe()
    assert desc.typed_search_attributes.get(WAITING_GATE) is False
    await assert_replays(client, handle.id)


async def test_reject_ends_the_run_rejected(client: Client, task_queue: str) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
        await decide_gate(client, handle.id, "approve_reply", "reject", comment="wrong tone")
        result = await run_outcome(handle)  # a rejected run fails with type RunRejected
    assert result is not None and result.state == "rejected"
    assert result.stages["approve_reply"].status == "rejected"
    assert result.stages["approve_reply"].error_type == "gate_rejected"
    assert "wrong tone" in (result.reason or "")
    await assert_replays(client, handle.id)


async def test_decision_for_a_stage_that_is_not_waiting_is_refused_and_writes_nothing(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
        before = (await handle.describe()).history_length
        with pytest.raises(GateError, match="'analyze' is not waiting for approval"):
            await decide_gate(client, handle.id, "analyze", "approve")
        with pytest.raises(
            GateError, match=r"unknown stage 'approve_rply'.*did you mean 'approve_reply'"
        ):
            await decide_gate(client, handle.id, "approve_rply", "approve")
        after = (await handle.describe()).history_length
        assert after == before
        await decide_gate(client, handle.id, "approve_reply", "approve")
        with pytest.raises(GateError):
            await decide_gate(client, handle.id, "approve_reply", "approve")
        assert (await handle.result()).state == "completed"
    await assert_replays(client, handle.id)


async def test_signal_resolves_a_gate_like_the_update(client: Client, task_queue: str) -> None:
    plan = plan_from("""\
name: signal-gate
model_tiers: {small: {provider: simulate}}
stages:
  - {id: ok, gate: {type: human, message: proceed?}}
  - {id: after, depends_on: [ok], role: {name: A, description: "{{ ok.decision }}"}}
""")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "ok")
        await handle.signal("gate", GateDecision(stage="nope", decision="approve"))
        await handle.signal("gate", GateDecision(stage="ok", decision="approve", by="ui"))
        result = await handle.result()
    assert result.state == "completed"
    # A signal proves nobody: it is recorded as by "signal", its claim kept apart.
    assert result.outputs["ok"] == {
        "approved": True,
        "feedback": None,
        "decision": "approve",
        "comment": None,
        "by": "signal",
    }
    gate = result.stages["ok"].gate
    assert gate is not None and gate.claimed_by == "ui"
    await assert_replays(client, handle.id)


async def test_tool_call_that_needs_approval_waits_then_runs(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "safe-shell.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        status = await wait_for_gate(handle, "archive")
        assert status.stages["record"].status == "completed"
        assert "irreversible tool call needs a human" in (status.pending_gates[0].message or "")
        await decide_gate(client, handle.id, "archive", "approve")
        result = await handle.result()
    assert result.state == "completed"
    assert result.outputs["archive"]["exit_code"] == 0
    await assert_replays(client, handle.id)


@pytest.mark.parametrize(
    ("on_timeout", "state"), [("approve", "completed"), ("reject", "rejected"), ("fail", "failed")]
)
async def test_gate_timeout_applies_on_timeout(
    skipping_env: WorkflowEnvironment, task_queue: str, on_timeout: str, state: str
) -> None:
    plan = plan_from(f"""\
name: timeout-gate
stages:
  - {{id: ok, gate: {{type: human, timeout: 2d, on_timeout: {on_timeout}}}}}
""")
    client = skipping_env.client
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        result = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert isinstance(result, RunResult)
    assert result.state == state
    stage = result.stages["ok"]
    if on_timeout == "fail":
        assert stage.error_type == "timeout" and "nobody decided" in (stage.error or "")
    else:
        assert stage.gate is not None and stage.gate.by == "timeout"
    await assert_replays(client, handle.id)


async def test_gates_lists_a_waiting_run_whose_workers_are_gone_with_the_reason(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import armature_temporal.service.client as client_module

    monkeypatch.setattr(client_module, "GATE_QUERY_TIMEOUT_S", 1.0)
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
    # The worker is gone: nobody can answer the status query, but the run still waits.
    for _ in range(100):
        listed = {run.run_id: g for run, g in await waiting_gates(client, spec="customer-triage")}
        if handle.id in listed:
            break
        await asyncio.sleep(0.1)
    problem = listed[handle.id]
    assert isinstance(problem, str) and "no worker answered its status query" in problem
    assert "armature worker" in problem
    await handle.terminate("test done")
