"""``Facts``: the facts that outlive a run, in a run (``memory.extract_knowledge``,
``memory.navigation_tools``; the core is armature_temporal/knowledge/facts.py).

At run start :meth:`Facts.load` reads the current facts of the memory's namespace (a local
activity): the prompt block every LLM stage but a judge carries (within
``knowledge_budget_chars``, stale ones marked), and 0.7.0's ``inject_knowledge_as`` items. A
stage whose role lists a navigation tool reads facts through the tools instead of the block, as
0.7.0 did. After a stage completes, :meth:`Facts.record` keeps the facts its output states —
screened by the admission scan, reconciled with the kept ones — never in a verification run.
:meth:`Facts.tool` answers a navigation tool call, read-only. Every step leaves a ``memory``
trace record (event ``facts_loaded``, ``facts``, or ``facts_failed``); facts never stop a run.

Only plans with ``extract_knowledge`` or ``navigation_tools`` do any of this, behind
``workflow.patched`` (:data:`PATCH`): 0.7.0 specs loaded these fields before they acted.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.knowledge.facts_navigate import LEGACY_TOOL_NAMES, NAVIGATION_TOOLS
from armature_temporal.runtime.facts_io import (
    FactsLoaded,
    FactsNavigate,
    FactsQuery,
    FactsRecord,
    FactsRecorded,
)
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.tool_checks import FACT_TOOLS
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["FACT_TOOL_NAMES", "PATCH", "Facts", "fact_tool_definitions"]

#: workflow.patched id of facts in runs.
PATCH = "facts-kept"
#: The navigation tools a role may list, by every name it may use.
FACT_TOOL_NAMES = FACT_TOOLS
_TIMEOUT = timedelta(seconds=60)


def fact_tool_definitions(tools: list[str]) -> list[dict[str, Any]]:
    """The navigation tools a role lists, as a model is shown them (under the name listed:
    0.7.0's ``memory.search_records`` is ``facts_search`` under its old name)."""
    by_name = {t["name"]: t for t in NAVIGATION_TOOLS}
    return [
        {**by_name[LEGACY_TOOL_NAMES.get(name, name)], "name": name}
        for name in tools
        if name in FACT_TOOL_NAMES
    ]


_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


class Facts:
    """Loads, keeps and answers one run's facts (nothing when the plan keeps none)."""

    def __init__(self, run: RunContext, tracer: Tracer) -> None:
        self.run = run
        self.tracer = tracer
        #: The prompt block and the template variable's items, once loaded.
        self.text = ""
        self.items: list[dict[str, Any]] = []
        self._on: bool | None = None

    def wanted(self) -> bool:
        memory = self.run.plan.memory
        if memory is None or not memory.keeps_facts:
            return False
        if self._on is None:
            self._on = workflow.patched(PATCH)
        return self._on

    @property
    def namespace(self) -> str:
        return self.run.plan.memory_name or self.run.plan.name

    def block_for(self, stage: PlanStage) -> str:
        """The facts block a stage's prompt carries: none for a judge, or for a role that
        reads facts through the navigation tools."""
        if not self.text or stage.role is None or stage.role.type == "judge":
            return ""
        if FACT_TOOL_NAMES & set(stage.role.tools):
            return ""
        return self.text

    async def load(self) -> None:
        memory = self.run.plan.memory
        if not self.wanted() or memory is None or memory.fresh:  # fresh: start with none
            return
        try:
            loaded: FactsLoaded = await workflow.execute_local_activity(
                "load_facts",
                FactsQuery(
                    namespace=self.namespace,
                    budget_chars=memory.budget_chars,
                    staleness_days=memory.staleness_days,
                    now=workflow.now().isoformat(),
                ),
                result_type=FactsLoaded,
                start_to_close_timeout=_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"load facts {self.namespace!r}",
            )
        except (ActivityError, ApplicationError) as exc:
            self._failed("load", "facts not loaded, the run goes on without them", exc)
            return
        self.text, self.items = loaded.text, loaded.items
        self._trace("facts_loaded", None, **loaded.trace)

    async def record(self, stage: PlanStage, output: Any) -> None:
        """Keep the facts a completed stage's output states (never in a verification run)."""
        memory = self.run.plan.memory
        if not self.wanted() or memory is None or not memory.extract_knowledge:
            return
        if self.run.verification or not isinstance(output, dict):
            return
        try:
            done: FactsRecorded = await workflow.execute_local_activity(
                "record_facts",
                FactsRecord(
                    namespace=self.namespace,
                    run_id=self.run.run_id,
                    stage=stage.id,
                    output=output,
                    recorded_at=workflow.now().isoformat(),
                    reconcile=memory.reconcile,
                ),
                result_type=FactsRecorded,
                start_to_close_timeout=_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"{stage.id}: keep the facts it states",
            )
        except (ActivityError, ApplicationError) as exc:
            self._failed(
                "record", f"stage {stage.id!r}: facts not kept, the run goes on", exc, stage.id
            )
            return
        if done.summary or done.rejected:
            self._trace(
                "facts",
                stage.id,
                decisions=done.summary,
                fact_ids=done.fact_ids,
                rejected=done.rejected,
                **({"skipped": done.skipped} if done.skipped else {}),
            )

    async def tool(self, stage: PlanStage, name: str, arguments: dict[str, Any]) -> Any:
        """A navigation tool's answer, or ``{error}`` the model reads."""
        memory = self.run.plan.memory
        if memory is None or not memory.navigation_tools or not self.wanted():
            return {"error": "this workflow keeps no facts to navigate", "error_type": "args"}
        self._trace("facts_tool", stage.id, tool=name, arguments=arguments)
        try:
            return await workflow.execute_local_activity(
                "navigate_facts",
                FactsNavigate(
                    namespace=self.namespace,
                    tool=name,
                    arguments=arguments,
                    now=workflow.now().isoformat(),
                    staleness_days=memory.staleness_days,
                ),
                result_type=dict,
                start_to_close_timeout=_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"{stage.id}: {name}",
            )
        except (ActivityError, ApplicationError) as exc:
            cause = exc.cause or exc
            return {"error": f"{name} failed: {cause}", "error_type": "tool_error"}

    def _trace(self, event: str, stage_id: str | None, **data: Any) -> None:
        self.tracer.chain.add(
            "memory",
            workflow.now().isoformat(),
            stage_id=stage_id,
            status="completed",
            data={"memory_name": self.namespace, "event": event, **data},
        )

    def _failed(
        self,
        event: str,
        message: str,
        exc: ActivityError | ApplicationError,
        stage_id: str | None = None,
    ) -> None:
        data = {"memory_name": self.namespace, "event": f"facts_{event}_failed"}
        self.tracer.memory_failed(message, exc, data, stage_id)
