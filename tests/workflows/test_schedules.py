"""Cron triggers become Temporal Schedules, idempotently, with overlap SKIP."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, ScheduleOverlapPolicy, WorkflowExecution
from temporalio.service import RPCError

from armature_temporal.runtime.models import RunResult
from armature_temporal.runtime.search_attributes import SPEC_NAME
from armature_temporal.service.schedules import apply_triggers
from tests.fakes import plan_from
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: nightly
model_tiers: {small: {provider: simulate}}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
triggers:
  - {type: cron, schedule: "0 3 * * *", inputs: {topic: reefs}}
  - {type: cron, schedule: "@every 12h"}
stages:
  - {id: s, role: {name: S, description: "{{ inputs.topic }}"}}
"""


async def completed_runs(client: Client, prefix: str) -> list[WorkflowExecution]:
    """Workflows whose id starts with ``prefix``, once the newest has completed (≤ 10 s)."""
    runs: list[WorkflowExecution] = []
    for _ in range(100):
        runs = [w async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{prefix}'")]
        if runs and runs[0].status is not None and runs[0].status.name == "COMPLETED":
            break
        await asyncio.sleep(0.1)
    return runs


async def test_cron_triggers_become_schedules_and_reapplying_updates_them(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(SPEC)
    created = await apply_triggers(client, plan, task_queue)
    assert [(c.schedule_id, c.action) for c in created] == [
        ("nightly-cron-0", "created"),
        ("nightly-cron-1", "created"),
    ]
    desc = await client.get_schedule_handle("nightly-cron-0").describe()
    assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
    # The server normalises cron into calendar specs: 03:00 every day.
    (calendar,) = desc.schedule.spec.calendars
    assert [r.start for r in calendar.hour] == [3] and [r.start for r in calendar.minute] == [0]

    async with build_worker(client, task_queue):
        await client.get_schedule_handle("nightly-cron-0").trigger()
        runs = await completed_runs(client, "nightly-cron0")
        assert runs, "the schedule started no run"
        result = await client.get_workflow_handle(runs[0].id, result_type=RunResult).result()
    assert result.state == "completed"
    started = await client.get_workflow_handle(runs[0].id).describe()
    assert started.typed_search_attributes.get(SPEC_NAME) == "nightly"
    history = await client.get_workflow_handle(runs[0].id).fetch_history()
    first = history.events[0].workflow_execution_started_event_attributes
    run_input = client.data_converter.payload_converter.from_payload(first.input.payloads[0], dict)
    assert run_input["inputs"] == {"topic": "reefs"}

    again = await apply_triggers(
        client,
        plan_from(SPEC.replace('  - {type: cron, schedule: "@every 12h"}\n', "")),
        task_queue,
    )
    actions = {(c.schedule_id, c.action) for c in again}
    assert ("nightly-cron-0", "updated") in actions
    assert ("nightly-cron-1", "deleted") in actions
    removed = await apply_triggers(client, plan, task_queue, delete=True)
    assert [(c.schedule_id, c.action) for c in removed] == [("nightly-cron-0", "deleted")]
    with pytest.raises(RPCError):
        await client.get_schedule_handle("nightly-cron-0").describe()


IMPROVING = """\
name: improving
model_tiers: {small: {provider: simulate}, frontier: {provider: simulate}}
self_improvement:
  editable_surfaces: [s.model_tier]
  schedule: "30 2 * * 1"
  min_traces: 50
finetune: {base_model: ./models/none-yet, schedule: "0 5 * * 0"}
stages:
  - {id: s, role: {name: S, model_tier: small, description: hi}}
"""


async def test_self_improvement_becomes_a_schedule_that_starts_improvement_rounds(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(IMPROVING)
    created = await apply_triggers(
        client, plan, task_queue, spec_text=IMPROVING, spec_path="improving.yaml"
    )
    assert [(c.schedule_id, c.action, c.cron) for c in created] == [
        ("improving-improve", "created", "30 2 * * 1"),
        ("improving-finetune", "created", "0 5 * * 0"),
    ]
    finetune = await client.get_schedule_handle("improving-finetune").describe()
    assert finetune.schedule.action.workflow == "Finetune"
    handle = client.get_schedule_handle("improving-improve")
    desc = await handle.describe()
    assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
    (calendar,) = desc.schedule.spec.calendars
    assert [r.start for r in calendar.hour] == [2] and [r.start for r in calendar.minute] == [30]
    async with build_worker(client, task_queue):
        await handle.trigger()
        rounds = await completed_runs(client, "improve-improving")
        assert rounds, "the schedule started no improvement round"
        result = await client.get_workflow_handle(rounds[0].id).result()
    # No runs yet: the round says so and stops (min_traces 50).
    assert result["status"] == "too_few_traces" and "min_traces = 50" in result["detail"]

    # Removing the block (or --delete) removes the schedule.
    removed = await apply_triggers(
        client,
        plan_from(
            IMPROVING.split("self_improvement:")[0] + "stages:" + IMPROVING.split("stages:")[1]
        ),
        task_queue,
        spec_text="irrelevant",
    )
    actions = {(c.schedule_id, c.action) for c in removed}
    assert {("improving-improve", "deleted"), ("improving-finetune", "deleted")} <= actions
    with pytest.raises(RPCError):
        await handle.describe()
