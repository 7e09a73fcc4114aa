"""A small workflow that runs the interpreter's adapter, memory and evaluation collaborators on
a Plan, the way the interpreter calls them: memory loaded at the start and injected as
``memory.inject_as``, adapter stages run in order (the others take the output the test gives,
or are skipped), memory captured after each completed stage, evaluations after the run.

It exercises the collaborators on a real Temporal server with the real activities, trace store
and gates (the ``resolve_gate`` update and ``status`` query have the interpreter's names), so
the tests hold whatever wires them into ``RunSpecWorkflow``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from armature_temporal.runtime.models import (
        GateDecision,
        RunInput,
        RunResult,
        RunStatus,
    )
    from armature_temporal.runtime.progress import ancestors
    from armature_temporal.runtime.prompts import stage_variables

from workflows.interpreter import (
    Adapters,
    Evaluations,
    Gates,
    Memory,
    RunContext,
    StageFailure,
    Tracer,
)

HARNESS = "CollaboratorHarness"


class HarnessInput(BaseModel):
    """A run, and the outputs of the stages the harness does not run itself (by stage id)."""

    run: RunInput
    given: dict[str, Any] = Field(default_factory=dict)


@workflow.defn(name=HARNESS)
class CollaboratorHarness:
    @workflow.init
    def __init__(self, inp: HarnessInput) -> None:
        self.ctx = RunContext(inp.run, workflow.info().workflow_id, workflow.now())
        self.tracer = Tracer(self.ctx, inp.run)
        self.gates = Gates(self.ctx, self.tracer)
        self.adapters = Adapters(self.ctx, self.tracer, self.gates)
        self.memory = Memory(self.ctx, self.tracer)
        self.evaluations = Evaluations(self.ctx, self.tracer)

    @workflow.update(name="resolve_gate")
    async def resolve_gate(self, decision: GateDecision) -> str:
        self.gates.receive(decision)
        return f"{decision.stage}: {decision.decision}"

    @resolve_gate.validator
    def _validate_gate(self, decision: GateDecision) -> None:
        problem = self.gates.problem(decision.stage)
        if problem:
            raise ApplicationError(problem, type="gate_not_waiting", non_retryable=True)

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return RunStatus(
            run_id=self.ctx.run_id,
            spec_name=self.ctx.plan.name,
            spec_hash=self.ctx.plan.spec_hash,
            state=self.ctx.state,
            stages=self.ctx.results,
            pending_gates=list(self.ctx.pending.values()),
        )

    @workflow.run
    async def run(self, inp: HarnessInput) -> RunResult:
        run, plan = self.ctx, self.ctx.plan
        remembered = await self.memory.load()
        for stage in plan.stages:
            result = run.results[stage.id]
            variables = stage_variables(
                inputs=run.inputs,
                outputs=run.outputs,
                visible=ancestors(plan, stage.id),
                mission=plan.mission,
                run={"id": run.run_id, "spec": plan.name, "spec_hash": plan.spec_hash},
                extra={plan.memory.inject_as: remembered} if plan.memory else None,
            )
            try:
                if stage.id in inp.given:
                    output = inp.given[stage.id]
                elif stage.kind == "adapter":
                    output = await self.adapters.stage(stage, variables)
                else:
                    result.status = "skipped"
                    continue
            except StageFailure as exc:
                result.status, result.error = "failed", str(exc)
                result.error_type = exc.error_type  # type: ignore[assignment]
            else:
                result.status, result.output = "completed", output
                run.outputs[stage.id] = output
                await self.memory.capture(stage.id, output)
            finally:
                self.tracer.stage(stage)
        await self.evaluations.run()
        failed = [sid for sid, r in run.results.items() if r.status == "failed"]
        run.state = "failed" if failed else "completed"
        reason = f"stage {failed[0]!r} failed" if failed else None
        self.tracer.end(reason)
        await self.tracer.flush(final=True)
        return RunResult(
            run_id=run.run_id,
            spec_name=plan.name,
            spec_hash=plan.spec_hash,
            state=run.state,
            reason=reason,
            stages=run.results,
            outputs=run.outputs,
        )


def harness_worker(client: Any, task_queue: str, activities: list[Any] | None = None) -> Any:
    """Workers for the harness with the real activities (or these); tool activities on the
    tools queue, as :func:`worker.build_worker` splits them."""
    from worker import build_worker

    return build_worker(client, task_queue, activities=activities, workflows=[CollaboratorHarness])


async def start_harness(
    client: Any,
    task_queue: str,
    plan: Any,
    inputs: dict[str, Any] | None = None,
    *,
    given: dict[str, Any] | None = None,
    verification: bool = False,
) -> Any:
    """Start the harness on ``plan``; returns its handle (``await handle.result()``)."""
    import uuid

    run = RunInput(plan=plan, inputs=inputs or {}, verification=verification)
    return await client.start_workflow(
        HARNESS,
        HarnessInput(run=run, given=given or {}),
        id=f"{plan.name}-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=RunResult,
    )
