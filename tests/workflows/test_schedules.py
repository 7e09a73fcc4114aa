"""Cron triggers become Temporal Schedules, idempotently, with overlap SKIP."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, ScheduleOverlapPolicy
from temporalio.service import RPCError

from armature_temporal.runtime_models import RunResult
from armature_temporal.schedules import apply_triggers
from armature_temporal.search_attributes import SPEC_NAME
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
        for _ in range(100):
            runs = [
                w async for w in client.list_workflows("WorkflowId STARTS_WITH 'nightly-cron0'")
            ]
            if runs and runs[0].status is not None and runs[0].status.name == "COMPLETED":
                break
            await asyncio.sleep(0.1)
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
