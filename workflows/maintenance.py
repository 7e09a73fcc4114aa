"""Recurring bandit maintenance, run by a Temporal Schedule: evolution, retirement of hopeless
arms, and posterior snapshots for learning curves (``armature bandit history``)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from armature_temporal.runtime.models import BanditMaintenanceInput

__all__ = ["BanditMaintenanceWorkflow"]


@workflow.defn(name="BanditMaintenance")
class BanditMaintenanceWorkflow:
    """One maintenance round over the named bandits (one activity)."""

    @workflow.run
    async def run(self, inp: BanditMaintenanceInput) -> list[str]:
        done: list[str] = await workflow.execute_activity(
            "bandit_maintenance",
            inp,
            result_type=list[str],
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary=f"maintain {', '.join(inp.names)}",
        )
        return done
