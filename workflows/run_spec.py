"""The spec interpreter: one Temporal workflow type that runs any compiled Plan.

Deterministic by construction: the Plan arrives in the input, time is ``workflow.now()``,
randomness is ``workflow.random()``, and every model or tool call is an activity. Stages start
the moment their dependencies finish; a failed stage cancels its running siblings (fail-fast),
marks the rest skipped and fails the run with the reason.

This module keeps the Temporal surface — the run, the gate update and signal, the status query
and the DAG loop — and hands each kind of stage to a collaborator in ``workflows.interpreter``.
None of them holds module-level state, so the worker passes them through the sandbox (imported
once per worker, not once per run) unless its sandbox is strict (``worker.workflow_runner``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from jinja2 import UndefinedError
    from pydantic import ValidationError

    from armature_temporal.runtime.models import (
        GateDecision,
        PriorRunQuery,
        PriorRunResult,
        RefusedSignal,
        RunEvent,
        RunInput,
        RunResult,
        RunStatus,
    )
    from armature_temporal.runtime.outputs import (
        SKIPPED,
        failed_output,
        judge_score,
        truncate_output,
    )
    from armature_temporal.runtime.progress import ancestors, diagnostics, transcript
    from armature_temporal.runtime.prompts import stage_variables
    from armature_temporal.spec.compiler import PlanStage
    from armature_temporal.spec.models import unwrap_expression as unwrap
    from armature_temporal.spec.templating import absent_as_empty, evaluate, truth

# Not under imports_passed_through: the worker passes workflows/ through unless its sandbox is
# strict, and a strict sandbox must import (and restrict) the interpreter's code too.
from workflows.interpreter import (
    Adapters,
    Arms,
    Critic,
    Evaluations,
    FanOut,
    GateRejected,
    Gates,
    LessonMemory,
    LLMStages,
    Memory,
    RunContext,
    StageFailure,
    ToolCalls,
    Tracer,
    classify,
    spans,
)
from workflows.interpreter.facts import Facts
from workflows.interpreter.tool_loop import LOOP_PROGRESS_SIGNAL
from workflows.interpreter.tracing import FLUSH_EVERY

__all__ = ["WORKFLOW_NAME", "RunSpecWorkflow", "StageFailure"]

WORKFLOW_NAME = "RunSpec"
FINISHED_OK = ("completed", "skipped")
#: workflow.patched id: a rejected top-level run fails (type RunRejected) instead of completing.
REJECTED_RUN_FAILS = "rejected-run-fails"
#: workflow.patched id: a condition or skip_if naming what the run has nothing for renders
#: empty (false), as in armature-agents 0.7.0, instead of failing the stage.
ABSENT_IS_EMPTY = "absent-is-empty"


@workflow.defn(name=WORKFLOW_NAME)
class RunSpecWorkflow:
    """Runs one Plan. Update ``resolve_gate`` / signal ``gate`` decide human gates; query
    ``status`` shows progress and pending gates, query ``events`` what happened so far."""

    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        self.ctx = RunContext(inp, workflow.info().workflow_id, workflow.now())
        self.plan = inp.plan
        self.tracer = Tracer(self.ctx, inp)
        self.gates = Gates(self.ctx, self.tracer)
        self.tools = ToolCalls(self.ctx, self.tracer, self.gates)
        self.arms = Arms(self.ctx)
        self.lessons = LessonMemory(self.ctx, self.tracer, inp.lessons)
        self.facts = Facts(self.ctx, self.tracer)
        self.llm = LLMStages(
            self.ctx, self.tracer, self.gates, self.tools, self.arms, self.lessons, self.facts
        )
        self.fan_out = FanOut(self.ctx, self.tracer, self.llm, WORKFLOW_NAME)
        self.adapters = Adapters(self.ctx, self.tracer, self.gates)
        self.memory = Memory(self.ctx, self.tracer)
        self.evaluations = Evaluations(self.ctx, self.tracer, self.llm)
        self.critic = Critic(self.ctx, self.tracer, lambda stage: self._variables(stage, False))

    # --- handlers ------------------------------------------------------------------------------

    @workflow.update(name="resolve_gate")
    async def resolve_gate(self, decision: GateDecision) -> str:
        """Approve or reject a waiting gate. The validator rejects unknown or resolved gates.
        Who decided is never taken from the payload (``Gates.receive``)."""
        self.gates.receive(decision)
        return f"{decision.stage}: {'approved' if decision.decision == 'approve' else 'rejected'}"

    @resolve_gate.validator
    def _validate_gate(self, decision: GateDecision) -> None:
        problem = self.gates.problem(decision.stage)
        if problem:
            raise ApplicationError(problem, type="gate_not_waiting", non_retryable=True)

    @workflow.signal(name="gate")
    def gate_signal(self, sent: Any) -> None:
        """The same decision as a signal, for the Web UI and ``temporal workflow signal``.

        A signal cannot answer back, so one that is refused (not a decision, an unknown stage,
        a gate that is not waiting) is kept with the reason in ``status.refused_signals``.
        It is typed ``Any`` and validated here: a payload the model rejects would otherwise
        be dropped by the SDK before this handler saw it.
        """
        try:
            decision = GateDecision.model_validate(sent)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            self._refuse(
                sent,
                f"not a gate decision ({problems}); send "
                '{"stage": "<gate>", "decision": "approve" or "reject"}',
            )
            return
        problem = self.gates.problem(decision.stage)
        if problem:
            self._refuse(sent, problem, decision.stage)
            return
        self.gates.receive(decision)

    @workflow.signal(name=LOOP_PROGRESS_SIGNAL)
    def loop_progress(self, sent: Any) -> None:
        """A long tool loop's AgentLoop child reporting how far it got (at the end of each of
        its executions); the stage's status and a stage_progress event show it. A report for a
        stage with no loop in a child, or not shaped like one, is refused and kept in
        ``status.refused_signals``."""
        problem = self.llm.loop.child_progress(sent)
        if problem is not None:
            self._refuse(sent, problem, signal=LOOP_PROGRESS_SIGNAL)

    def _refuse(
        self, sent: Any, reason: str, stage: str | None = None, *, signal: str = "gate"
    ) -> None:
        workflow.logger.warning("refused %s signal: %s", signal, reason)
        if stage is None and isinstance(sent, dict) and isinstance(sent.get("stage"), str):
            stage = sent["stage"]
        self.ctx.refused_signals.append(
            RefusedSignal(
                signal=signal,
                stage=stage,
                received=sent,
                reason=reason,
                at=workflow.now().isoformat(),
            )
        )

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        run = self.ctx
        return RunStatus(
            run_id=run.run_id,
            spec_name=self.plan.name,
            spec_hash=self.plan.spec_hash,
            state=run.state,
            stages=run.results,
            pending_gates=list(run.pending.values()),
            refused_signals=list(run.refused_signals),
        )

    @workflow.query(name="events")
    def events(self, after: int = 0) -> list[RunEvent]:
        """The run's events with ``seq`` greater than ``after``, oldest first (see
        ``RunEvent``). The log ends with ``run_complete`` or ``run_failed``; a closed run
        answers too, from a worker's replay of its history."""
        return self.ctx.events.after(after)

    # --- the run ---------------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        with spans.run_span(self.plan, self.ctx.run_id, self.ctx.verification):
            return await self._run()

    async def _run(self) -> RunResult:
        run = self.ctx
        if self.plan.continuation is not None and run.prior_run is None:
            await self._load_prior_run()
        if self.plan.memory is not None:
            run.memory = await self.memory.load()
            await self.facts.load()
        try:
            reason = await self._run_dag([s for s in self.plan.stages if not s.post_run])
        except asyncio.CancelledError:
            run.state = "cancelled"
            self.tracer.end("run cancelled")
            await self.tracer.flush(final=True)
            run.events.run_end("cancelled", "run cancelled", {})
            raise
        if reason is None:
            reason = self._missing_outputs()
        post = [s for s in self.plan.stages if s.post_run]
        if post:
            await self._run_dag(post, post_run=True)
        await self.evaluations.run()
        await self.critic.run()
        if reason is None:
            run.state = "completed"
        elif run.state != "rejected":
            run.state = "failed"
        await self.llm.cache.settle()
        result = RunResult(
            run_id=run.run_id,
            spec_name=self.plan.name,
            spec_hash=self.plan.spec_hash,
            state=run.state,
            reason=reason,
            stages=run.results,
            outputs=run.outputs,
            refused_signals=run.refused_signals,
        )
        self.tracer.end(reason)
        await self.tracer.flush(final=True)
        # Last, so a follower told the run ended finds its result (nothing awaits after this).
        run.events.run_end(run.state, reason, run.outputs)
        if run.state == "failed":
            raise ApplicationError(
                reason or "run failed",
                result.model_dump(mode="json"),
                type="RunFailed",
                non_retryable=True,
            )
        # A rejected top-level run ends as a failed workflow (type RunRejected) so the Web UI
        # and visibility do not list it as Completed; the RunResult travels in the details.
        # A fan-out child still returns its result: its parent reads the rejection from it.
        # Runs that completed their rejection before this change replay as they ran.
        if (
            run.state == "rejected"
            and workflow.info().parent is None
            and workflow.patched(REJECTED_RUN_FAILS)
        ):
            raise ApplicationError(
                reason or "run rejected",
                result.model_dump(mode="json"),
                type="RunRejected",
                non_retryable=True,
            )
        return result

    def _missing_outputs(self) -> str | None:
        """contracts.outputs: the first required output the run did not produce, or None."""
        for contract in self.plan.required_outputs:
            if not contract.required or contract.stage in self.ctx.held:
                continue  # held: a verification run stopped before it, at a gate
            output = self.ctx.outputs.get(contract.stage)
            if not isinstance(output, dict) or output.get(contract.key) is None:
                return (
                    f"required output {contract.stage}.{contract.key} is missing or null "
                    "(contracts.outputs)"
                )
        return None

    async def _load_prior_run(self) -> None:
        """The previous run's ``carry_forward`` values (continuation), by a local activity."""
        assert self.plan.continuation is not None
        try:
            prior = await workflow.execute_local_activity(
                "load_prior_run",
                PriorRunQuery(
                    spec_name=self.plan.name,
                    carry_forward=self.plan.continuation.carry_forward,
                    exclude_run_id=self.ctx.run_id,
                ),
                result_type=PriorRunResult,
                start_to_close_timeout=timedelta(seconds=30),
                summary="load carry_forward values from the previous run",
            )
            self.ctx.prior_run = prior.values
            self.ctx.prior_run_id = prior.run_id
        except (ActivityError, ApplicationError) as exc:
            # No store, no memory: run with empty carried values rather than not at all.
            workflow.logger.warning("prior run not loaded: %s", exc)
            self.ctx.prior_run = {k: None for k in self.plan.continuation.carry_forward}

    async def _run_dag(self, stages: list[PlanStage], post_run: bool = False) -> str | None:
        """Run stages as their dependencies finish; return the failure reason, if any."""
        results = self.ctx.results
        tasks: dict[str, asyncio.Task[None]] = {}
        reason: str | None = None
        try:
            while True:
                self.gates.hold_after(stages)
                if reason is None:
                    for stage in stages:
                        result = results[stage.id]
                        ready = all(results[d].status in FINISHED_OK for d in stage.depends_on)
                        if result.status == "pending" and ready:
                            result.status = "running"
                            tasks[stage.id] = asyncio.create_task(self._run_stage(stage, post_run))
                if not tasks:
                    break
                await workflow.wait(list(tasks.values()), return_when=asyncio.FIRST_COMPLETED)
                if self.tracer.buffered >= FLUSH_EVERY:
                    await self.tracer.flush()
                for sid in [sid for sid, task in tasks.items() if task.done()]:
                    # An unexpected exception is an interpreter bug: re-raise it so the
                    # workflow task fails and Temporal retries it (after a fix, on replay).
                    tasks.pop(sid).result()
                    result = results[sid]
                    if result.status in ("failed", "rejected") and reason is None:
                        reason = f"stage {sid!r} {result.status}: {result.error}"
                        if result.status == "rejected":
                            self.ctx.state = "rejected"
                        for other in tasks.values():
                            other.cancel()
        except asyncio.CancelledError:
            for task in tasks.values():
                task.cancel()
            raise
        for stage in stages:
            if results[stage.id].status == "pending":
                results[stage.id].status = "skipped"
                results[stage.id].error = "not run: " + (reason or "a dependency was skipped")
                results[stage.id].error_type = "dependency_failed" if reason else None
        return reason

    async def _run_stage(self, stage: PlanStage, post_run: bool) -> None:
        with spans.stage_span(stage, self.ctx.run_id) as span:
            await self._stage(stage, post_run)
            spans.finish_stage(span, self.ctx.results[stage.id], self.ctx.arm_of(stage.id))

    async def _stage(self, stage: PlanStage, post_run: bool) -> None:
        result = self.ctx.results[stage.id]
        result.started_at = workflow.now().isoformat()
        self.ctx.events.stage_start(stage.id, stage.kind)
        variables = self._variables(stage, post_run)
        evicted = False
        try:
            if self._should_skip(stage, variables):
                result.status = "skipped"
                result.error = "condition not met"
                self.ctx.outputs[stage.id] = result.output = dict(SKIPPED)
                return
            output: Any = None
            if stage.kind != "llm":
                self.ctx.count_execution(stage.id)
            if stage.partition_source is not None:
                output = await self._per_item(stage, variables)
            elif stage.kind == "llm":
                output = await self.llm.stage(stage, variables)
            elif stage.kind == "tool":
                output = await self.tools.stage(stage, variables)
            elif stage.kind == "adapter":
                output = await self.adapters.stage(stage, variables)
            elif stage.kind == "fan_out":
                output = await self.fan_out.stage(stage, variables)
            if stage.gate is not None:
                if self.gates.never_approves():
                    self.gates.hold(stage, output)
                    return
                decision = await self.gates.wait(
                    stage.id,
                    self.gates.message(stage, variables, output),
                    stage.gate.timeout_s,
                    stage.gate.on_timeout,
                    unattended="approve",
                )
                result.gate = decision
                if decision.decision == "reject" and stage.gate.on_reject == "stop":
                    raise GateRejected(decision.comment or "rejected")
                if output is None:
                    output = {
                        "approved": decision.decision == "approve",
                        "feedback": decision.comment,
                        "decision": decision.decision,
                        "comment": decision.comment,
                        "by": decision.by,
                    }
            if stage.output_max_chars is not None:
                output = truncate_output(output, stage.output_max_chars)
            self.ctx.outputs[stage.id] = output
            result.output = output
            result.status = "completed"
            self._check_judge(stage, output)
        except GateRejected as exc:
            result.status, result.error_type = "rejected", "gate_rejected"
            result.error = f"rejected at the gate: {exc}"
        except StageFailure as exc:
            result.status, result.error_type, result.error = "failed", exc.error_type, str(exc)  # type: ignore[assignment]
        except ApplicationError as exc:  # a local activity's failure (bandit, prior run)
            result.status, result.error_type = "failed", "provider_error"
            result.error = f"stage {stage.id!r}: {exc.message}"
        except (ActivityError, ChildWorkflowError) as exc:
            result.error_type, result.error = classify(exc)  # type: ignore[assignment]
            result.status = "cancelled" if result.error_type == "cancelled" else "failed"
        except asyncio.CancelledError:
            result.status, result.error_type = "cancelled", "cancelled"
            result.error = "cancelled (a sibling stage failed or the run was cancelled)"
        except GeneratorExit:
            # Evicted from the worker's cache (e.g. the worker shuts down while the run waits):
            # the run continues elsewhere from its history, and no workflow API may be called.
            evicted = True
            raise
        finally:
            if not evicted:
                self._failure_as_value(stage)
                result.finished_at = workflow.now().isoformat()
                if result.status != "running":
                    spans.note({"armature.trace.hash": self.tracer.stage(stage).hash})
                    self.ctx.events.stage_complete(stage.id, result)
        if self.plan.memory is not None and result.status == "completed":
            await self.memory.capture(stage.id, result.output)
            await self.facts.record(stage, result.output)
        if self.arms.wanted(stage):
            await self.arms.after_stage(stage)
        if self.lessons.wanted():
            await self.lessons.after_stage(stage)

    async def _per_item(self, stage: PlanStage, variables: dict[str, Any]) -> Any:
        """``partition_source``: the stage once per item of a list (item bound to
        partition_key), at most ``fan_out`` at a time; an item that fails gives
        ``{_failed, error}`` instead of failing the others; results combined by fan_in."""
        assert stage.partition_source is not None
        try:
            items = evaluate(unwrap(stage.partition_source), variables)
        except Exception as exc:  # jinja raises many types
            raise StageFailure(
                "template_error", f"stage {stage.id!r}: partition_source failed: {exc}"
            ) from exc
        if not isinstance(items, list | tuple):
            raise StageFailure(
                "output_invalid",
                f"stage {stage.id!r}: partition_source {stage.partition_source!r} gave "
                f"{type(items).__name__}, not a list",
            )
        if stage.kind == "fan_out":
            return await self.fan_out.stage(stage, variables, list(items))
        name = stage.partition_key or "item"
        limit = asyncio.Semaphore(stage.fan_out or 20)

        async def one(item: Any) -> Any:
            async with limit:
                item_vars = {**variables, name: item}
                if stage.inject_file_as is not None:
                    item_vars[stage.inject_file_as] = await self._file_text(stage, item, item_vars)
                try:
                    if stage.kind == "llm":
                        return await self.llm.stage(stage, item_vars)
                    if stage.kind == "adapter":
                        return await self.adapters.stage(stage, item_vars)
                    return await self.tools.stage(stage, item_vars)
                except StageFailure as exc:
                    return failed_output(str(exc), exc.error_type)

        outputs = list(await asyncio.gather(*(one(item) for item in items)))
        if stage.fan_in == "merge":
            merged: dict[str, Any] = {}
            for out in outputs:
                if isinstance(out, dict):
                    merged.update(out)
            return merged
        if stage.fan_in == "first":
            return outputs[0] if outputs else None
        return outputs

    async def _file_text(self, stage: PlanStage, path: Any, variables: dict[str, Any]) -> str:
        """``inject_file_as``: the item read as a file path, through the file_read tool (so the
        safety rules and its workspace bounds apply); "" when it cannot be read, as in 0.7.0."""
        read = await self.tools.call(
            stage, "file_read", {"path": str(path)}, variables, render_args=False
        )
        output = read.output if read.ok and isinstance(read.output, dict) else {}
        return str(output.get("content", ""))

    def _check_judge(self, stage: PlanStage, output: Any) -> None:
        """A judge scoring below its ``block_below`` stops its dependents (and the run)."""
        if stage.block_below is None:
            return
        score = judge_score(output)
        if score is None or score < stage.block_below:
            shown = "no score" if score is None else f"score {score:.3g}"
            raise StageFailure(
                "judge_blocked",
                f"stage {stage.id!r}: judge gave {shown}, below block_below "
                f"{stage.block_below:g}; its dependents do not run",
            )

    def _failure_as_value(self, stage: PlanStage) -> None:
        """``fail_as_value``: a failed stage completes with ``{_failed, error, error_type}``
        and its dependents run. Run-level stops (limits, judge blocks) are never converted."""
        result = self.ctx.results[stage.id]
        if (
            stage.fail_as_value
            and result.status == "failed"
            and result.error_type not in ("limit_exceeded", "judge_blocked")
        ):
            output = failed_output(result.error or "failed", result.error_type)
            self.ctx.outputs[stage.id] = result.output = output
            result.status = "completed"

    # --- variables, conditions ------------------------------------------------------------------

    def _variables(self, stage: PlanStage, post_run: bool) -> dict[str, Any]:
        run = self.ctx
        visible = (
            [sid for sid in run.outputs if sid != stage.id]
            if post_run
            else ancestors(self.plan, stage.id)
        )
        # context_policy.never hides keys from everything the stage renders; signature.input
        # narrows only its prompt's context (validate keeps its prompt to those keys).
        never = set(stage.context_never)
        inputs = {k: v for k, v in run.inputs.items() if k not in never}
        visible = [s for s in visible if s not in never]
        run.context_keys[stage.id] = (list(inputs), [s for s in visible if s in run.outputs])
        prior = None
        if self.plan.continuation is not None:
            values = run.prior_run or {k: None for k in self.plan.continuation.carry_forward}
            prior = (self.plan.continuation.inject_as, values)
        extra: dict[str, Any] = {"run_id": run.run_id}
        if run.memory is not None and self.plan.memory is not None:
            extra[self.plan.memory.inject_as] = run.memory
            # Remembered values older than 30 days, named (as 0.7.0 did) so a prompt can say so.
            extra["_stale_memory_keys"] = list(self.memory.stale_keys)
        if self.plan.memory is not None and self.facts.wanted():
            extra[self.plan.memory.inject_knowledge_as] = self.facts.items
        if post_run:
            extra["_transcript"] = transcript(run.results)
            extra["_diagnostics"] = diagnostics(run.results)
        return stage_variables(
            inputs=inputs,
            outputs=run.outputs,
            visible=visible,
            mission=self.plan.mission,
            run={"id": run.run_id, "spec": self.plan.name, "spec_hash": self.plan.spec_hash},
            prior_run=prior,
            extra=extra,
        )

    def _should_skip(self, stage: PlanStage, variables: dict[str, Any]) -> bool:
        def holds(expression: str | None) -> bool | None:
            if expression is None:
                return None
            try:
                return truth(evaluate(expression, variables))
            except UndefinedError:
                if not workflow.patched(ABSENT_IS_EMPTY):
                    raise
                # a name the spec has nothing for (validate warned): empty, so false
                return truth(evaluate(expression, absent_as_empty(expression, variables)))

        try:
            if holds(stage.condition) is False:
                return True
            return holds(stage.skip_if) is True
        except Exception as exc:  # jinja raises many types; the stage fails with the reason
            raise StageFailure(
                "template_error", f"stage {stage.id!r}: condition could not be evaluated: {exc}"
            ) from exc
