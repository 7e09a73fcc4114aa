"""The library call (armature_temporal.library) against the test dev server, with a worker in
this process on the test's own task queue: run returns outputs, start/approve/reject/result
on a gated run, failures raised as RunFailed naming the stage."""

from __future__ import annotations

import asyncio
import os
import pwd

import pytest
from temporalio.testing import WorkflowEnvironment

from armature_temporal import RunFailed, RunHandle, run, start
from armature_temporal.library import RunTimeout
from armature_temporal.service.client import GateError, InputError
from tests.fakes import SPECS, plan_from
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

GATED = """\
name: lib-gated
inputs: [topic]
model_tiers: {small: {provider: simulate}}
stages:
  - {id: draft, role: {name: W, description: "Write about {{ inputs.topic }}"}}
  - {id: ok, depends_on: [draft], gate: {type: human, message: "Send {{ draft.content }}?"}}
  - {id: after, depends_on: [ok], role: {name: A, description: "{{ ok.decision }}"}}
"""

FAILS = """\
name: lib-fails
inputs: [n]
model_tiers: {only: {provider: simulate, valid_rate: 0.0}}
stages:
  - {id: s, role: {name: S, description: "{{ n }}"}, output_mode: json}
"""


def address_of(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


async def waiting_at(handle: RunHandle, gate: str) -> None:
    for _ in range(400):
        view = await handle.status()
        if any(g.stage == gate for g in view.pending_gates):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.run_id} never waited at {gate}")


async def test_run_of_a_spec_path_returns_its_outputs(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with build_worker(temporal_env.client, task_queue):
        outputs = await run(
            SPECS / "quickstart.yaml",
            {"topic": "tide pools"},
            address=address_of(temporal_env),
            queue=task_queue,
        )
    assert set(outputs) == {"outline", "draft", "review"}
    assert len(outputs["outline"]["points"]) == 3
    assert 0.0 <= outputs["review"]["score"] <= 1.0


async def test_start_approve_result_on_a_gated_run_records_who_decided(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    address = address_of(temporal_env)
    async with build_worker(temporal_env.client, task_queue):
        handle = await start(
            plan_from(GATED), {"topic": "tides"}, address=address, queue=task_queue
        )
        await waiting_at(handle, "ok")
        with pytest.raises(RunTimeout):
            await handle.result(timeout_s=0.2)  # it waits for a person, and keeps waiting
        with pytest.raises(GateError):
            await handle.approve("draft")  # not a gate: refused, nothing written
        await handle.approve("ok", comment="ship it")
        outputs = await handle.result(timeout_s=60)
        view = await handle.status()
    assert {"draft", "after"} <= set(outputs)
    gate = view.stages["ok"].gate
    assert gate is not None and (gate.decision, gate.comment) == ("approve", "ship it")
    assert gate.by == pwd.getpwuid(os.getuid()).pw_name  # this account, proved
    assert gate.claimed_by is None and gate.unverified is None


async def test_a_rejected_run_raises_run_failed_naming_the_gate(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    address = address_of(temporal_env)
    async with build_worker(temporal_env.client, task_queue):
        handle = await start(
            plan_from(GATED), {"topic": "tides"}, address=address, queue=task_queue
        )
        await waiting_at(handle, "ok")
        with pytest.raises(GateError, match="needs a reason"):  # one rule, as everywhere
            await handle.reject("ok", " ")
        await handle.reject("ok", "wrong tone")
        with pytest.raises(RunFailed) as caught:
            await handle.result(timeout_s=60)
    failed = caught.value
    assert (failed.run_id, failed.state, failed.stage) == (handle.run_id, "rejected", "ok")
    assert "draft" in failed.outputs  # what did complete comes with the failure
    assert handle.run_id in str(failed) and "'ok'" in str(failed)


async def test_a_failing_stage_raises_run_failed_naming_it_and_why(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with build_worker(temporal_env.client, task_queue):
        with pytest.raises(RunFailed) as caught:
            await run(
                plan_from(FAILS), {"n": 1}, address=address_of(temporal_env), queue=task_queue
            )
    assert (caught.value.state, caught.value.stage) == ("failed", "s")
    assert "output invalid" in caught.value.reason or "invalid" in str(caught.value)


async def test_a_cancelled_run_raises_run_failed(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    address = address_of(temporal_env)
    async with build_worker(temporal_env.client, task_queue):
        handle = await start(plan_from(GATED), {"topic": "x"}, address=address, queue=task_queue)
        await waiting_at(handle, "ok")
        outcome = await handle.cancel()
        with pytest.raises(RunFailed) as caught:
            await handle.result(timeout_s=60)
    assert outcome.status == "cancelled" and not outcome.already_ended
    assert caught.value.state == "cancelled"


async def test_inputs_that_do_not_fit_are_refused_before_anything_starts(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    with pytest.raises(InputError) as caught:
        await start(
            SPECS / "quickstart.yaml",
            {"topic": 3, "colour": "red"},
            address=address_of(temporal_env),
            queue=task_queue,
        )
    assert "topic" in str(caught.value)
    running = f"TaskQueue = '{task_queue}'"
    assert [wf async for wf in temporal_env.client.list_workflows(running)] == []


async def test_a_library_caller_gets_input_errors_in_python_terms(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    """``from armature_temporal import InputError`` (the README names it) works; its message
    speaks to Python callers, not of --input; ``run(spec, "text")`` was a raw ValueError; a
    lone surrogate or an oversized input is an InputError before anything starts."""
    import armature_temporal

    assert armature_temporal.InputError is InputError
    address = address_of(temporal_env)
    with pytest.raises(InputError) as caught:
        await start(SPECS / "quickstart.yaml", {"colour": "red"}, address=address, queue=task_queue)
    assert "start(spec, {'name': value})" in str(caught.value)
    assert "--input" not in str(caught.value)
    with pytest.raises(
        InputError, match=r"must be a mapping .* not str 'text'.*\{'topic': \.\.\.\}"
    ):
        await run(SPECS / "quickstart.yaml", "text", address=address, queue=task_queue)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="named by strings; got 1"):
        await start(SPECS / "quickstart.yaml", {1: "x"}, address=address, queue=task_queue)  # type: ignore[dict-item]
    with pytest.raises(InputError, match="lone surrogate"):
        await start(
            SPECS / "quickstart.yaml", {"topic": "\ud800"}, address=address, queue=task_queue
        )
    with pytest.raises(InputError, match=r"over the 1\.0 MiB limit"):
        await start(
            SPECS / "quickstart.yaml", {"topic": "x" * 2_000_000}, address=address, queue=task_queue
        )
    running = f"TaskQueue = '{task_queue}'"
    assert [wf async for wf in temporal_env.client.list_workflows(running)] == []


async def test_spec_must_be_a_path_or_a_plan() -> None:
    with pytest.raises(TypeError, match="spec file's path or a compiled Plan"):
        await start(42)  # type: ignore[arg-type]


async def test_handle_events_follow_a_gated_run_to_its_end_and_resume_after_a_seq(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    address = address_of(temporal_env)
    async with build_worker(temporal_env.client, task_queue):
        handle = await start(
            plan_from(GATED), {"topic": "tides"}, address=address, queue=task_queue
        )
        seen = []
        async for event in handle.events():
            seen.append(event)
            if event.type == "gate_waiting":
                await handle.approve("ok", comment="fine")
        rest = [e async for e in handle.events(after=2)]
    types = [e.type for e in seen]
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert types[0] == "stage_start" and types[-1] == "run_complete"
    assert "gate_waiting" in types and "gate_decided" in types
    decided = next(e for e in seen if e.type == "gate_decided")
    assert (decided.stage, decided.data["decision"]) == ("ok", "approve")
    assert [(e.seq, e.type, e.stage) for e in rest] == [(e.seq, e.type, e.stage) for e in seen[2:]]
