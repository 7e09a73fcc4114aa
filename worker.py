"""Builds the Temporal worker that runs Armature's interpreter workflow and activities.

``armature worker`` runs one against any Temporal address; the embedded local stack starts one
for you. Run as many as you like on the same task queue: they share the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.bandit import bandit_maintenance, bandit_reward, bandit_select
from activities.finetune import finetune_prepare, finetune_record, finetune_train
from activities.improve import improve_prepare, improve_record
from activities.llm import llm_call
from activities.tools import tool_call
from activities.traces import load_prior_run, record_traces
from workflows.finetune import FinetuneWorkflow
from workflows.improve import ImproveWorkflow
from workflows.maintenance import BanditMaintenanceWorkflow
from workflows.run_spec import RunSpecWorkflow

__all__ = ["ACTIVITIES", "WORKFLOWS", "build_worker", "workflow_runner"]

WORKFLOWS: list[type] = [
    RunSpecWorkflow,
    BanditMaintenanceWorkflow,
    ImproveWorkflow,
    FinetuneWorkflow,
]
ACTIVITIES: list[Any] = [
    llm_call,
    tool_call,
    record_traces,
    load_prior_run,
    bandit_select,
    bandit_reward,
    bandit_maintenance,
    improve_prepare,
    improve_record,
    finetune_prepare,
    finetune_train,
    finetune_record,
]

#: Pure modules the sandbox may share across workflow runs instead of re-importing.
PASSTHROUGH = ("armature_temporal", "jinja2", "markupsafe", "jsonschema", "ruamel")


def workflow_runner() -> SandboxedWorkflowRunner:
    """The workflow sandbox with Armature's pure core passed through."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )


def build_worker(
    client: Client,
    task_queue: str,
    *,
    activities: Sequence[Any] | None = None,
    max_cached_workflows: int = 1000,
    max_concurrent_activities: int = 100,
) -> Worker:
    """A worker for the interpreter workflow and (by default) the real activities.

    Args:
        client: A client built with the pydantic data converter.
        task_queue: The queue runs are submitted to.
        activities: Replace the activities (tests register ``fake_*`` ones under the same names).
        max_cached_workflows: 0 replays every workflow task from history (replay testing).
        max_concurrent_activities: Upper bound on activities running at once.
    """
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=list(ACTIVITIES if activities is None else activities),
        workflow_runner=workflow_runner(),
        max_cached_workflows=max_cached_workflows,
        max_concurrent_activities=max_concurrent_activities,
    )
