"""Builds the Temporal workers that run Armature's interpreter workflow and activities.

Two kinds, on two task queues: the main worker (the workflows, model calls, traces, loops: it
holds the provider secrets) on the run's queue ``Q``, and the tools worker (``tool_call`` and
``run_adapter``: shell, files, HTTP, Python tools, adapters) on ``Q-tools``
(:func:`~workflows.interpreter.queues.tools_task_queue`), meant to run in a process without
secrets (``armature worker --tools-only``). :func:`build_worker` builds either or both;
``armature worker`` runs the main one and a scrubbed tools-only child, and the embedded local
stack starts both. Run as many of each as you like: they share the work. A main worker also
polls the ledger anchors' queue (:data:`LEDGER_ANCHOR_QUEUE`), where each trace database's
``LedgerAnchor`` workflow keeps its ledger's heads.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.adapters import run_adapter
from activities.bandit import bandit_maintenance, bandit_reward, bandit_select
from activities.cache import cache_hit, cache_keep, cache_lookup, cache_settle
from activities.experience import load_lessons, reward_lessons
from activities.facts import load_facts, navigate_facts, record_facts
from activities.finetune import (
    finetune_prepare,
    finetune_record,
    finetune_train,
    finetune_train_dpo,
)
from activities.gates import verify_gate_decision
from activities.improve import improve_effort, improve_prepare, improve_record, improve_settle
from activities.improve_cases import improve_grade_cases
from activities.improve_combine import improve_combine, improve_record_combined
from activities.improve_search import improve_merge, improve_reflect
from activities.knowledge import search_knowledge
from activities.learn import critique, learn_prepare, learn_record
from activities.llm import llm_call
from activities.memory import capture_memory, load_memory
from activities.messages import read_message, store_messages
from activities.tool_queue import TOOL_ACTIVITIES, activity_name, refuse_on_main_queue
from activities.tools import tool_call
from activities.traces import anchor_sender, load_prior_run, record_traces
from armature_temporal import settings
from armature_temporal.runtime.ledger_anchor import LEDGER_ANCHOR_QUEUE
from armature_temporal.service.tools_env import tools_task_queue
from workflows.agent_loop import AgentLoopWorkflow
from workflows.anchor import LedgerAnchorWorkflow
from workflows.finetune import FinetuneWorkflow
from workflows.improve import ImproveWorkflow
from workflows.learn import LearnWorkflow
from workflows.maintenance import BanditMaintenanceWorkflow
from workflows.run_spec import RunSpecWorkflow
from workflows.sandbox_runner import FastSandboxRunner

__all__ = [
    "ACTIVITIES",
    "ANCHOR_WORKFLOWS",
    "LEDGER_ANCHOR_QUEUE",
    "TOOL_ACTIVITIES",
    "WORKFLOWS",
    "WorkerRole",
    "Workers",
    "build_worker",
    "tools_task_queue",
    "workflow_runner",
]

WORKFLOWS: list[type] = [
    RunSpecWorkflow,
    AgentLoopWorkflow,
    BanditMaintenanceWorkflow,
    ImproveWorkflow,
    FinetuneWorkflow,
    LearnWorkflow,
]
#: On :data:`LEDGER_ANCHOR_QUEUE`, polled by every main worker (they call no activity).
ANCHOR_WORKFLOWS: list[type] = [LedgerAnchorWorkflow]
ACTIVITIES: list[Any] = [
    llm_call,
    tool_call,
    record_traces,
    read_message,
    store_messages,
    load_prior_run,
    verify_gate_decision,
    run_adapter,
    load_memory,
    capture_memory,
    search_knowledge,
    load_facts,
    record_facts,
    navigate_facts,
    cache_lookup,
    cache_keep,
    cache_hit,
    cache_settle,
    load_lessons,
    reward_lessons,
    bandit_select,
    bandit_reward,
    bandit_maintenance,
    improve_effort,
    improve_prepare,
    improve_record,
    improve_settle,
    improve_combine,
    improve_record_combined,
    improve_grade_cases,
    improve_reflect,
    improve_merge,
    finetune_prepare,
    finetune_train,
    finetune_train_dpo,
    finetune_record,
    critique,
    learn_prepare,
    learn_record,
]

#: How long stopping workers waits for ledger heads still being sent to Temporal.
FINISH_WITHIN = timedelta(seconds=5)
#: ``main``: workflows and every other activity on the run's queue; ``tools``: the tool
#: activities on its tools queue; ``all``: both (one process: tests, ``--with-worker`` uses).
WorkerRole = Literal["all", "main", "tools"]

#: Modules the sandbox shares across workflow runs instead of re-importing them for each run:
#: the pure core, the template and schema libraries it uses, and OpenTelemetry (the run's spans
#: are opened from workflow code: workflows/interpreter/spans.py).
PASSTHROUGH = ("armature_temporal", "jinja2", "markupsafe", "jsonschema", "ruamel", "opentelemetry")
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
    # The SDK's sandbox, less two per-payload costs (workflows.sandbox_runner).
    return FastSandboxRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*modules)
    )


class Workers:
    """One or two :class:`~temporalio.worker.Worker` s run together: ``async with`` starts
    them all and stops them all; :meth:`run` runs them until one stops."""

    def __init__(
        self,
        workers: Sequence[Worker],
        *,
        finish: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``finish``: awaited (for at most :data:`FINISH_WITHIN`) once they all stopped: the
        main worker's ledger heads still on their way to Temporal."""
        if not workers:
            raise ValueError("no worker to run: give it workflows or activities")
        self.workers = list(workers)
        self.finish = finish

    @property
    def task_queues(self) -> list[str]:
        """The queues these workers poll."""
        return [w.task_queue for w in self.workers]

    async def run(self) -> None:
        """Run every worker until one of them stops (then stop the rest)."""
        tasks = [asyncio.ensure_future(w.run()) for w in self.workers]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await self.shutdown()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            task.result()

    async def shutdown(self) -> None:
        """Stop every worker that is running (waiting for in-flight tasks to finish)."""
        await asyncio.gather(*(w.shutdown() for w in self.workers if w.is_running))
        await self._finish()

    async def _finish(self) -> None:
        # The MCP servers the tool activities started in this process stop with the worker.
        if (calls := sys.modules.get("armature_temporal.mcp.calls")) is not None:
            await calls.close_all()
        if self.finish is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.finish(), FINISH_WITHIN.total_seconds())

    async def __aenter__(self) -> Workers:
        entered: list[Worker] = []
        try:
            for w in self.workers:
                await w.__aenter__()
                entered.append(w)
        except BaseException:
            for w in reversed(entered):
                await w.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for w in reversed(self.workers):
            await w.__aexit__(exc_type, exc, tb)
        await self._finish()


def build_worker(
    client: Client,
    task_queue: str,
    *,
    activities: Sequence[Any] | None = None,
    workflows: Sequence[type] | None = None,
    role: WorkerRole = "all",
    max_cached_workflows: int = 1000,
    max_concurrent_activities: int = 100,
    strict_sandbox: bool | None = None,
) -> Workers:
    """Workers for the interpreter workflow and (by default) the real activities.

    The tool activities (:data:`TOOL_ACTIVITIES`, by name) go to a worker on
    ``tools_task_queue(task_queue)``, the rest and the workflows to one on ``task_queue``; a
    main worker also runs the ledger anchors (:data:`ANCHOR_WORKFLOWS`) on
    :data:`LEDGER_ANCHOR_QUEUE`.

    Args:
        client: A client built with the pydantic data converter.
        task_queue: The queue runs are submitted to.
        activities: Replace the activities (tests register ``fake_*`` ones under the same names).
        workflows: Replace the workflows (default :data:`WORKFLOWS`).
        role: Which workers: ``all`` (both, in this process), ``main`` (no tool activities:
            the tools run in a worker elsewhere), ``tools`` (only the tool activities, for a
            process that holds no provider secrets).
        max_cached_workflows: How many runs stay in memory between workflow tasks. 0 replays
            every task from history; keep it for answering queries on closed runs: with local
            activities in flight (trace flushes, gates, caches) an eviction can livelock a run
            (an SDK core bug, temporalio/sdk-rust #1304 and #1482). Prove replay safety with
            ``temporalio.worker.Replayer`` on the run's history instead.
        max_concurrent_activities: Upper bound on activities running at once (per worker).
        strict_sandbox: See :func:`workflow_runner`.
    """
    chosen = list(ACTIVITIES if activities is None else activities)
    tools = [fn for fn in chosen if activity_name(fn) in TOOL_ACTIVITIES]
    rest = [fn for fn in chosen if activity_name(fn) not in TOOL_ACTIVITIES]
    workers = []
    if role in ("all", "main"):
        workers.append(
            Worker(
                client,
                task_queue=task_queue,
                workflows=list(WORKFLOWS if workflows is None else workflows),
                activities=[*rest, *(refuse_on_main_queue(activity_name(fn)) for fn in tools)],
                workflow_runner=workflow_runner(strict=strict_sandbox),
                max_cached_workflows=max_cached_workflows,
                max_concurrent_activities=max_concurrent_activities,
            )
        )
        workers.append(
            Worker(
                client,
                task_queue=LEDGER_ANCHOR_QUEUE,
                workflows=ANCHOR_WORKFLOWS,
                workflow_runner=workflow_runner(strict=strict_sandbox),
                max_cached_workflows=max_cached_workflows,
            )
        )
    if role in ("all", "tools") and tools:
        workers.append(
            Worker(
                client,
                task_queue=tools_task_queue(task_queue),
                activities=tools,
                max_concurrent_activities=max_concurrent_activities,
            )
        )
    main = role in ("all", "main")
    return Workers(workers, finish=anchor_sender(client).drain if main else None)
