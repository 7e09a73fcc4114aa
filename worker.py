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

from activities.adapters import run_adapter
from activities.bandit import bandit_maintenance, bandit_reward, bandit_select
from activities.finetune import finetune_prepare, finetune_record, finetune_train
from activities.improve import improve_prepare, improve_record
from activities.llm import llm_call
from activities.memory import capture_memory, load_memory
from activities.tools import tool_call
from activities.traces import load_prior_run, record_traces
from armature_temporal import settings
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
    run_adapter,
    load_memory,
    capture_memory,
    bandit_select,
    bandit_reward,
    bandit_maintenance,
    improve_prepare,
    improve_record,
    finetune_prepare,
    finetune_train,
    finetune_record,
]

#: Modules the sandbox shares across workflow runs instead of re-importing them for each run:
#: the pure core and the template and schema libraries it uses.
PASSTHROUGH = ("armature_temporal", "jinja2", "markupsafe", "jsonschema", "ruamel")
#: The interpreter (workflows/) too, unless the sandbox is strict. It holds no module-level
#: state, and importing it again costs every run its first workflow task's worth of CPU.
INTERPRETER = "workflows"


def workflow_runner(*, strict: bool | None = None) -> SandboxedWorkflowRunner:
    """The workflow sandbox with Armature's pure core passed through.

    Args:
        strict: Re-import the interpreter in every run's sandbox, under the sandbox's full
            restrictions: a non-deterministic call (``datetime.now()``, ``random``, I/O) in
            workflow code raises at once instead of passing silently. Slower; the test suite
            runs so. Default: ``ARMATURE_STRICT_SANDBOX`` (off).
    """
    if strict is None:
        strict = settings.strict_sandbox()
    modules = PASSTHROUGH if strict else (*PASSTHROUGH, INTERPRETER)
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*modules)
    )


def build_worker(
    client: Client,
    task_queue: str,
    *,
    activities: Sequence[Any] | None = None,
    max_cached_workflows: int = 1000,
    max_concurrent_activities: int = 100,
    strict_sandbox: bool | None = None,
) -> Worker:
    """A worker for the interpreter workflow and (by default) the real activities.

    Args:
        client: A client built with the pydantic data converter.
        task_queue: The queue runs are submitted to.
        activities: Replace the activities (tests register ``fake_*`` ones under the same names).
        max_cached_workflows: 0 replays every workflow task from history (replay testing).
        max_concurrent_activities: Upper bound on activities running at once.
        strict_sandbox: See :func:`workflow_runner`.
    """
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=list(ACTIVITIES if activities is None else activities),
        workflow_runner=workflow_runner(strict=strict_sandbox),
        max_cached_workflows=max_cached_workflows,
        max_concurrent_activities=max_concurrent_activities,
    )
