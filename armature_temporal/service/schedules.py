"""Cron triggers as Temporal Schedules: created idempotently, overlap policy SKIP.

``armature schedule SPEC`` turns each ``triggers: [{type: cron, schedule: ...}]`` entry into a
Schedule with id ``<spec name>-cron-<n>`` that starts the interpreter workflow with the compiled
plan and the trigger's inputs. Applying again updates the schedules in place (new plan, new
cron) and deletes ones whose trigger was removed; nothing runs twice because a run is still
going (overlap SKIP).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

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

from armature_temporal.runtime.bandit_models import SpecArms
from armature_temporal.runtime.models import BanditMaintenanceInput, RunInput
from armature_temporal.runtime.search_attributes import SPEC_HASH, SPEC_NAME, WAITING_GATE
from armature_temporal.service.client import WORKFLOW_NAME, prepare_inputs
from armature_temporal.spec.compiler import Plan

__all__ = [
    "MAX_TRIGGERS",
    "ScheduleChange",
    "apply_triggers",
    "bandit_names",
    "finetune_schedule_id",
    "improve_schedule_id",
    "learn_schedule_id",
    "schedule_id",
]

#: How many trigger slots beyond the current ones are checked for stale schedules.
MAX_TRIGGERS = 16


class ScheduleChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    schedule_id: str
    action: Literal["created", "updated", "deleted"]
    cron: str | None = None


#: How often bandit maintenance (evolution, retirement, snapshots) runs for a spec with arms.
MAINTENANCE_EVERY = timedelta(hours=1)


async def _upsert(
    client: Client, sid: str, schedule: Schedule, label: str | None
) -> ScheduleChange:
    """Create the schedule, or replace the existing one with this id in place."""
    try:
        await client.create_schedule(sid, schedule)
        return ScheduleChange(schedule_id=sid, action="created", cron=label)
    except ScheduleAlreadyRunningError:

        def replace(_: ScheduleUpdateInput, new: Schedule = schedule) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=new)

        await client.get_schedule_handle(sid).update(replace)
        return ScheduleChange(schedule_id=sid, action="updated", cron=label)


async def _delete(client: Client, sid: str) -> list[ScheduleChange]:
    """Delete the schedule if it exists."""
    try:
        await client.get_schedule_handle(sid).delete()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    return [ScheduleChange(schedule_id=sid, action="deleted")]


def bandit_names(plan: Plan) -> list[str]:
    """The bandits of a spec: one per stage with arms, named ``<spec>:<stage>``."""
    return [f"{plan.name}:{s.id}" for s in plan.stages if s.arms]


def maintenance_input(plan: Plan, spec_path: str | None = None) -> BanditMaintenanceInput:
    """The maintenance round of a spec's bandits; stages with ``bandit.evolve`` carry their
    arms and policy (and the spec's path, to validate a bred arm as part of it)."""
    spec_arms = {}
    for s in plan.stages:
        if s.arms and s.bandit is not None and s.bandit.evolve is not None:
            refiner = s.bandit.evolve.refiner_tier if s.bandit.evolve.mutate_prompt else None
            spec_arms[f"{plan.name}:{s.id}"] = SpecArms(
                spec_path=str(Path(spec_path).resolve())
                if spec_path and Path(spec_path).is_file()
                else None,
                stage=s.id,
                arms=[a.model_dump(mode="json") for a in s.arms],
                policy=s.bandit,
                refiner={"name": refiner} if refiner else None,
            )
    return BanditMaintenanceInput(names=bandit_names(plan), spec_arms=spec_arms)


async def _apply_maintenance(
    client: Client, plan: Plan, task_queue: str, *, delete: bool, spec_path: str | None = None
) -> list[ScheduleChange]:
    sid = f"{plan.name}-bandit-maintenance"
    names = [] if delete else bandit_names(plan)
    if not names:
        return await _delete(client, sid)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            "BanditMaintenance",
            maintenance_input(plan, spec_path),
            id=f"{plan.name}-bandit-maintenance",
            task_queue=task_queue,
            static_summary=f"bandit maintenance for {', '.join(names)}",
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=MAINTENANCE_EVERY)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    return [await _upsert(client, sid, schedule, "every 1h")]


def improve_schedule_id(plan: Plan) -> str:
    return f"{plan.name}-improve"


def finetune_schedule_id(plan: Plan) -> str:
    return f"{plan.name}-finetune"


def learn_schedule_id(plan: Plan) -> str:
    return f"{plan.name}-learn"


async def _apply_loops(
    client: Client,
    plan: Plan,
    task_queue: str,
    spec_text: str | None,
    spec_path: str,
    *,
    delete: bool,
) -> list[ScheduleChange]:
    """The improvement, fine-tune and experience loops' schedules, from
    ``self_improvement.schedule``, ``finetune.schedule`` and ``experience.schedule`` (an
    enabled experience section). They carry the spec text as applied: edit the spec, apply
    again."""
    from armature_temporal.experience.learning import LearnInput
    from armature_temporal.finetune.models import FinetuneInput
    from armature_temporal.improve.models import ImproveInput

    experience = plan.experience
    learning = experience if experience and experience.enabled and experience.schedule else None
    loops: list[tuple[str, str, str, Any, Any]] = [
        ("Improve", "improve", improve_schedule_id(plan), plan.self_improvement, ImproveInput),
        ("Finetune", "finetune", finetune_schedule_id(plan), plan.finetune, FinetuneInput),
        ("Learn", "learn", learn_schedule_id(plan), learning, LearnInput),
    ]
    changes: list[ScheduleChange] = []
    for workflow, prefix, sid, block, make_input in loops:
        if delete or block is None or spec_text is None:
            changes += await _delete(client, sid)
            continue
        schedule = Schedule(
            action=ScheduleActionStartWorkflow(
                workflow,
                make_input(spec_text=spec_text, spec_path=spec_path),
                id=f"{prefix}-{plan.name}",  # Temporal appends the scheduled time
                task_queue=task_queue,
                static_summary=f"{prefix} round for spec {plan.name!r}",
            ),
            spec=ScheduleSpec(cron_expressions=[block.schedule]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        )
        changes.append(await _upsert(client, sid, schedule, block.schedule))
    return changes


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
    client: Client,
    plan: Plan,
    task_queue: str,
    *,
    delete: bool = False,
    spec_text: str | None = None,
    spec_path: str = "<spec>",
) -> list[ScheduleChange]:
    """Create or update one Schedule per cron trigger; delete schedules of removed triggers
    (all of them with ``delete=True``). Raises InputError on trigger inputs that do not
    satisfy the spec's input schema.

    Also the spec's recurring loops: hourly bandit maintenance when it has arms, the
    improvement loop on ``self_improvement.schedule``, the fine-tune loop on
    ``finetune.schedule`` and the experience loop on ``experience.schedule`` when it has
    those blocks and ``spec_text`` is given."""
    crons = [] if delete else [t for t in plan.triggers if t.type == "cron"]
    wanted = {schedule_id(plan, i): (i, t) for i, t in enumerate(crons)}
    changes: list[ScheduleChange] = []
    for sid, (index, trigger) in wanted.items():
        assert trigger.schedule is not None
        schedule = _schedule(
            plan, index, trigger.schedule, prepare_inputs(plan, dict(trigger.inputs)), task_queue
        )
        changes.append(await _upsert(client, sid, schedule, trigger.schedule))
    changes += await _apply_maintenance(
        client, plan, task_queue, delete=delete, spec_path=spec_path
    )
    changes += await _apply_loops(client, plan, task_queue, spec_text, spec_path, delete=delete)
    prefix = f"{plan.name}-cron-"
    # Visibility lists schedules eventually; also try the next ids directly, so a trigger
    # removed a moment ago is still found.
    stale = {f"{prefix}{i}" for i in range(len(wanted), len(wanted) + MAX_TRIGGERS)}
    async for listed in await client.list_schedules():
        if listed.id.startswith(prefix):
            stale.add(listed.id)
    for sid in sorted(stale - set(wanted)):
        changes += await _delete(client, sid)
    return changes
