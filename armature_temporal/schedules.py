"""Cron triggers as Temporal Schedules: created idempotently, overlap policy SKIP.

``armature schedule SPEC`` turns each ``triggers: [{type: cron, schedule: ...}]`` entry into a
Schedule with id ``<spec name>-cron-<n>`` that starts the interpreter workflow with the compiled
plan and the trigger's inputs. Applying again updates the schedules in place (new plan, new
cron) and deletes ones whose trigger was removed; nothing runs twice because a run is still
going (overlap SKIP).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from armature_temporal.client import WORKFLOW_NAME, prepare_inputs
from armature_temporal.compiler import Plan
from armature_temporal.runtime_models import BanditMaintenanceInput, RunInput
from armature_temporal.search_attributes import SPEC_HASH, SPEC_NAME, WAITING_GATE

__all__ = ["MAX_TRIGGERS", "ScheduleChange", "apply_triggers", "bandit_names", "schedule_id"]

#: How many trigger slots beyond the current ones are checked for stale schedules.
MAX_TRIGGERS = 16


class ScheduleChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    schedule_id: str
    action: Literal["created", "updated", "deleted"]
    cron: str | None = None


#: How often bandit maintenance (evolution, retirement, snapshots) runs for a spec with arms.
MAINTENANCE_EVERY = timedelta(hours=1)


def bandit_names(plan: Plan) -> list[str]:
    """The bandits of a spec: one per stage with arms, named ``<spec>:<stage>``."""
    return [f"{plan.name}:{s.id}" for s in plan.stages if s.arms]


async def _apply_maintenance(
    client: Client, plan: Plan, task_queue: str, *, delete: bool
) -> list[ScheduleChange]:
    sid = f"{plan.name}-bandit-maintenance"
    names = [] if delete else bandit_names(plan)
    if not names:
        try:
            await client.get_schedule_handle(sid).delete()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        return [ScheduleChange(schedule_id=sid, action="deleted")]
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            "BanditMaintenance",
            BanditMaintenanceInput(names=names),
            id=f"{plan.name}-bandit-maintenance",
            task_queue=task_queue,
            static_summary=f"bandit maintenance for {', '.join(names)}",
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=MAINTENANCE_EVERY)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    try:
        await client.create_schedule(sid, schedule)
        return [ScheduleChange(schedule_id=sid, action="created", cron="every 1h")]
    except ScheduleAlreadyRunningError:

        def replace(_: ScheduleUpdateInput, new: Schedule = schedule) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=new)

        await client.get_schedule_handle(sid).update(replace)
        return [ScheduleChange(schedule_id=sid, action="updated", cron="every 1h")]


def schedule_id(plan: Plan, index: int) -> str:
    return f"{plan.name}-cron-{index}"


def _schedule(
    plan: Plan, index: int, cron: str, inputs: dict[str, object], task_queue: str
) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            WORKFLOW_NAME,
            RunInput(plan=plan, inputs=inputs),
            id=f"{plan.name}-cron{index}",  # Temporal appends the scheduled time
            task_queue=task_queue,
            memo={
                "spec_name": plan.name,
                "spec_version": plan.version,
                "spec_hash": plan.spec_hash,
                "trigger": f"cron {cron}",
            },
            typed_search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(SPEC_NAME, plan.name),
                    SearchAttributePair(SPEC_HASH, plan.spec_hash),
                    SearchAttributePair(WAITING_GATE, False),
                ]
            ),
            static_summary=f"Armature run of spec {plan.name!r} (cron {cron})",
        ),
        spec=ScheduleSpec(cron_expressions=[cron]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def apply_triggers(
    client: Client, plan: Plan, task_queue: str, *, delete: bool = False
) -> list[ScheduleChange]:
    """Create or update one Schedule per cron trigger; delete schedules of removed triggers
    (all of them with ``delete=True``). Raises InputError on trigger inputs that do not
    satisfy the spec's input schema."""
    crons = [] if delete else [t for t in plan.triggers if t.type == "cron"]
    wanted = {schedule_id(plan, i): (i, t) for i, t in enumerate(crons)}
    changes: list[ScheduleChange] = []
    for sid, (index, trigger) in wanted.items():
        assert trigger.schedule is not None
        schedule = _schedule(
            plan, index, trigger.schedule, prepare_inputs(plan, dict(trigger.inputs)), task_queue
        )
        try:
            await client.create_schedule(sid, schedule)
            changes.append(ScheduleChange(schedule_id=sid, action="created", cron=trigger.schedule))
        except ScheduleAlreadyRunningError:

            def replace(_: ScheduleUpdateInput, new: Schedule = schedule) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=new)

            await client.get_schedule_handle(sid).update(replace)
            changes.append(ScheduleChange(schedule_id=sid, action="updated", cron=trigger.schedule))
    changes += await _apply_maintenance(client, plan, task_queue, delete=delete)
    prefix = f"{plan.name}-cron-"
    # Visibility lists schedules eventually; also try the next ids directly, so a trigger
    # removed a moment ago is still found.
    stale = {f"{prefix}{i}" for i in range(len(wanted), len(wanted) + MAX_TRIGGERS)}
    async for listed in await client.list_schedules():
        if listed.id.startswith(prefix):
            stale.add(listed.id)
    for sid in sorted(stale - set(wanted)):
        try:
            await client.get_schedule_handle(sid).delete()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                continue
            raise
        changes.append(ScheduleChange(schedule_id=sid, action="deleted"))
    return changes
