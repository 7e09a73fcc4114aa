"""The spec interpreter: one Temporal workflow type that runs any compiled Plan.

Deterministic by construction: the Plan arrives in the input, time is ``workflow.now()``,
randomness is ``workflow.random()``, and every model or tool call is an activity. Stages start
the moment their dependencies finish; a failed stage cancels its running siblings (fail-fast),
marks the rest skipped and fails the run with the reason.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ChildWorkflowCancellationType

with workflow.unsafe.imports_passed_through():
    from jinja2 import TemplateSyntaxError

    from armature_temporal.errors import did_you_mean
    from armature_temporal.runtime.fanout import (
        consensus,
        merge_outputs,
        resolve_path,
        split_fairly,
    )
    from armature_temporal.runtime.models import (
        BanditRewardInput,
        BanditSelectInput,
        BanditSelectResult,
        GateDecision,
        GateInfo,
        LLMCallInput,
        LLMCallResult,
        PolicySet,
        PriorRunQuery,
        PriorRunResult,
        RunInput,
        RunResult,
        RunStatus,
        StageResult,
        ToolCallInput,
        ToolCallResult,
    )
    from armature_temporal.runtime.prompts import stage_variables
    from armature_temporal.runtime.search_attributes import WAITING_GATE
    from armature_temporal.runtime.traces import LOW_QUALITY_THRESHOLD, TraceBatch, TraceChain
    from armature_temporal.spec.compiler import Plan, PlanArm, PlanRole, PlanStage
    from armature_temporal.spec.templating import evaluate, referenced_names, render

__all__ = ["WORKFLOW_NAME", "RunSpecWorkflow", "StageFailure"]

WORKFLOW_NAME = "RunSpec"
LLM_TIMEOUT = timedelta(minutes=5)
TOOL_TIMEOUT = timedelta(minutes=2)
PROVIDER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=5,
)
HEARTBEAT = timedelta(seconds=10)
TOOL_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
FINISHED_OK = ("completed", "skipped")


class StageFailure(Exception):
    """A stage failed for a reason the failure taxonomy names."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


class _GateRejected(Exception):
    pass


@workflow.defn(name=WORKFLOW_NAME)
class RunSpecWorkflow:
    """Runs one Plan. Update ``resolve_gate`` / signal ``gate`` decide human gates; query
    ``status`` shows progress and pending gates."""

    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        self.plan: Plan = inp.plan
        self.inputs = inp.inputs
        self.prior_run = inp.prior_run
        self.prior_run_id: str | None = None
        self.outer_policies = list(inp.outer_policies)
        self.verification = inp.verification
        self.arm_choice: dict[str, tuple[str, str]] = {}
        self.rewarded: dict[str, tuple[float, str]] = {}
        self.last_quality: dict[str, float] = {}
        self.results: dict[str, StageResult] = {s.id: StageResult() for s in inp.plan.stages}
        self.outputs: dict[str, Any] = {}
        self.pending: dict[str, GateInfo] = {}
        self.decisions: dict[str, GateDecision] = {}
        self.state = "running"
        self.approval_seq: dict[str, int] = {}
        self.started = workflow.now()
        self.trace = TraceChain(
            workflow.info().workflow_id, inp.plan.name, inp.plan.spec_hash, inp.plan.policy_version
        )
        self.trace.add(
            "run_start",
            self.started.isoformat(),
            data={
                "spec_version": inp.plan.version,
                "inputs": inp.inputs,
                "parent_run_id": inp.parent_run_id,
                # Only when set, so ordinary runs' records (and their hashes) are unchanged.
                **({"verification": True} if inp.verification else {}),
            },
        )

    # --- handlers ------------------------------------------------------------------------------

    @workflow.update(name="resolve_gate")
    async def resolve_gate(self, decision: GateDecision) -> str:
        """Approve or reject a waiting gate. The validator rejects unknown or resolved gates."""
        self.decisions[decision.stage] = decision
        return f"{decision.stage}: {'approved' if decision.decision == 'approve' else 'rejected'}"

    @resolve_gate.validator
    def _validate_gate(self, decision: GateDecision) -> None:
        problem = self._gate_problem(decision.stage)
        if problem:
            raise ApplicationError(problem, type="gate_not_waiting", non_retryable=True)

    @workflow.signal(name="gate")
    def gate_signal(self, decision: GateDecision) -> None:
        """The same decision as a signal, for the Web UI and ``temporal workflow signal``."""
        problem = self._gate_problem(decision.stage)
        if problem:
            workflow.logger.warning("ignored gate signal: %s", problem)
            return
        self.decisions[decision.stage] = decision

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return RunStatus(
            run_id=workflow.info().workflow_id,
            spec_name=self.plan.name,
            spec_hash=self.plan.spec_hash,
            state=self.state,  # type: ignore[arg-type]
            stages=self.results,
            pending_gates=list(self.pending.values()),
        )

    def _gate_problem(self, gate_id: str) -> str | None:
        if gate_id in self.pending and gate_id not in self.decisions:
            return None
        waiting = [g for g in self.pending if g not in self.decisions]
        if gate_id not in self.results and "#" not in gate_id:
            return (
                f"unknown stage {gate_id!r} in run {workflow.info().workflow_id}; "
                f"stages: {list(self.results)}; waiting gates: {waiting or 'none'}"
                f"{did_you_mean(gate_id, waiting or list(self.results))}"
            )
        status = self.results[gate_id].status if gate_id in self.results else "not waiting"
        return (
            f"stage {gate_id!r} is not waiting for approval (status: {status}); "
            f"waiting gates: {waiting or 'none'}"
        )

    # --- the run ---------------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        reason: str | None = None
        if self.plan.continuation is not None and self.prior_run is None:
            try:
                prior = await workflow.execute_local_activity(
                    "load_prior_run",
                    PriorRunQuery(
                        spec_name=self.plan.name,
                        carry_forward=self.plan.continuation.carry_forward,
                        exclude_run_id=workflow.info().workflow_id,
                    ),
                    result_type=PriorRunResult,
                    start_to_close_timeout=timedelta(seconds=30),
                    summary="load carry_forward values from the previous run",
                )
                self.prior_run = prior.values
                self.prior_run_id = prior.run_id
            except (ActivityError, ApplicationError) as exc:
                # No store, no memory: run with empty carried values rather than not at all.
                workflow.logger.warning("prior run not loaded: %s", exc)
                self.prior_run = {k: None for k in self.plan.continuation.carry_forward}
        try:
            reason = await self._run_dag([s for s in self.plan.stages if not s.post_run])
        except asyncio.CancelledError:
            self.state = "cancelled"
            self._trace_end("run cancelled")
            await self._flush(final=True)
            raise
        post = [s for s in self.plan.stages if s.post_run]
        if post:
            await self._run_dag(post, post_run=True)
        if reason is None:
            self.state = "completed"
        elif self.state != "rejected":
            self.state = "failed"
        result = RunResult(
            run_id=workflow.info().workflow_id,
            spec_name=self.plan.name,
            spec_hash=self.plan.spec_hash,
            state=self.state,  # type: ignore[arg-type]
            reason=reason,
            stages=self.results,
            outputs=self.outputs,
        )
        self._trace_end(reason)
        await self._flush(final=True)
        if self.state == "failed":
            raise ApplicationError(
                reason or "run failed",
                result.model_dump(mode="json"),
                type="RunFailed",
                non_retryable=True,
            )
        return result

    # --- traces ---------------------------------------------------------------------------------

    def _trace_end(self, reason: str | None) -> None:
        elapsed = (workflow.now() - self.started).total_seconds() * 1000
        self.trace.add(
            "run_end",
            workflow.now().isoformat(),
            status=self.state,
            error=reason,
            output=self.outputs,
            latency_ms=elapsed,
            data={"prior_run_id": self.prior_run_id} if self.prior_run_id else {},
        )

    def _trace_stage(self, stage: PlanStage) -> None:
        result = self.results[stage.id]
        judge = None
        error_type = result.error_type
        if (
            stage.role is not None
            and stage.role.type == "judge"
            and isinstance(result.output, dict)
            and isinstance(result.output.get("score"), int | float)
        ):
            judge = float(result.output["score"])
            if result.status == "completed" and judge < LOW_QUALITY_THRESHOLD:
                error_type = "low_quality"
        self.trace.add(
            "stage",
            workflow.now().isoformat(),
            stage_id=stage.id,
            status=result.status,
            iteration=result.iterations,
            attempt=result.attempts,
            tier=result.tier,
            role=stage.role.name if stage.role else None,
            role_type=stage.role.type if stage.role else None,
            output=result.output,
            error_type=error_type,
            error=result.error,
            escalated=result.escalated,
            judge_score=judge,
            arm_id=self.arm_choice.get(stage.id, (None, None))[0],
            decision_id=self.arm_choice.get(stage.id, (None, None))[1],
            data={"kind": stage.kind},
        )

    async def _flush(self, *, final: bool = False) -> None:
        """Send buffered trace records to the store (idempotent, so retries are safe).

        If the store is down, an intermediate flush keeps the records for the next one (the
        run goes on); the final flush retries until the store is back, so nothing is lost.
        """
        batch = self.trace.take()
        if not batch:
            return
        try:
            await workflow.execute_local_activity(
                "record_traces",
                TraceBatch(records=batch),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(
                    maximum_attempts=0 if final else 3,
                    maximum_interval=timedelta(seconds=60 if final else 10),
                ),
            )
        except (ActivityError, ApplicationError) as exc:  # local activities raise the latter
            workflow.logger.warning(
                "trace store unavailable, keeping %d record(s): %s", len(batch), exc.cause or exc
            )
            self.trace.pending[:0] = batch

    async def _run_dag(self, stages: list[PlanStage], post_run: bool = False) -> str | None:
        """Run stages as their dependencies finish; return the failure reason, if any."""
        tasks: dict[str, asyncio.Task[None]] = {}
        reason: str | None = None
        try:
            while True:
                if reason is None:
                    for stage in stages:
                        result = self.results[stage.id]
                        ready = all(self.results[d].status in FINISHED_OK for d in stage.depends_on)
                        if result.status == "pending" and ready:
                            result.status = "running"
                            tasks[stage.id] = asyncio.create_task(self._run_stage(stage, post_run))
                if not tasks:
                    break
                await workflow.wait(list(tasks.values()), return_when=asyncio.FIRST_COMPLETED)
                if len(self.trace.pending) >= 25:
                    await self._flush()
                for sid in [sid for sid, task in tasks.items() if task.done()]:
                    # An unexpected exception is an interpreter bug: re-raise it so the
                    # workflow task fails and Temporal retries it (after a fix, on replay).
                    tasks.pop(sid).result()
                    result = self.results[sid]
                    if result.status in ("failed", "rejected") and reason is None:
                        reason = f"stage {sid!r} {result.status}: {result.error}"
                        if result.status == "rejected":
                            self.state = "rejected"
                        for other in tasks.values():
                            other.cancel()
        except asyncio.CancelledError:
            for task in tasks.values():
                task.cancel()
            raise
        for stage in stages:
            if self.results[stage.id].status == "pending":
                self.results[stage.id].status = "skipped"
                self.results[stage.id].error = "not run: " + (reason or "a dependency was skipped")
                self.results[stage.id].error_type = "dependency_failed" if reason else None
        return reason

    async def _run_stage(self, stage: PlanStage, post_run: bool) -> None:
        result = self.results[stage.id]
        result.started_at = workflow.now().isoformat()
        variables = self._variables(stage, post_run)
        evicted = False
        try:
            if self._should_skip(stage, variables):
                result.status = "skipped"
                result.error = "condition not met"
                return
            output: Any = None
            if stage.kind == "llm":
                output = await self._llm_stage(stage, variables)
            elif stage.kind == "tool":
                output = await self._tool_stage(stage, variables)
            elif stage.kind == "fan_out":
                output = await self._fan_out(stage, variables)
            if stage.gate is not None:
                decision = await self._wait_gate(
                    stage.id,
                    self._gate_message(stage, variables, output),
                    stage.gate.timeout_s,
                    stage.gate.on_timeout,
                    unattended="approve",
                )
                result.gate = decision
                if decision.decision == "reject":
                    raise _GateRejected(decision.comment or "rejected")
                if output is None:
                    output = {
                        "decision": decision.decision,
                        "comment": decision.comment,
                        "by": decision.by,
                    }
            self.outputs[stage.id] = output
            result.output = output
            result.status = "completed"
        except _GateRejected as exc:
            result.status, result.error_type = "rejected", "gate_rejected"
            result.error = f"rejected at the gate: {exc}"
        except StageFailure as exc:
            result.status, result.error_type, result.error = "failed", exc.error_type, str(exc)  # type: ignore[assignment]
        except ApplicationError as exc:  # a local activity's failure (bandit, prior run)
            result.status, result.error_type = "failed", "provider_error"
            result.error = f"stage {stage.id!r}: {exc.message}"
        except (ActivityError, ChildWorkflowError) as exc:
            result.error_type, result.error = _classify(exc)  # type: ignore[assignment]
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
                result.finished_at = workflow.now().isoformat()
                if result.status != "running":
                    self._trace_stage(stage)
        if self.arm_choice or (stage.role is not None and stage.role.type == "judge"):
            await self._auto_rewards(stage)

    # --- variables, conditions ------------------------------------------------------------------

    def _variables(self, stage: PlanStage, post_run: bool) -> dict[str, Any]:
        visible = (
            [sid for sid in self.outputs if sid != stage.id]
            if post_run
            else self._ancestors(stage.id)
        )
        prior = None
        if self.plan.continuation is not None:
            values = self.prior_run or {k: None for k in self.plan.continuation.carry_forward}
            prior = (self.plan.continuation.inject_as, values)
        extra: dict[str, Any] = {}
        if post_run:
            extra["_transcript"] = self._transcript()
            extra["_diagnostics"] = self._diagnostics()
        return stage_variables(
            inputs=self.inputs,
            outputs=self.outputs,
            visible=visible,
            mission=self.plan.mission,
            run={
                "id": workflow.info().workflow_id,
                "spec": self.plan.name,
                "spec_hash": self.plan.spec_hash,
            },
            prior_run=prior,
            extra=extra,
        )

    def _ancestors(self, stage_id: str) -> list[str]:
        deps = {s.id: s.depends_on for s in self.plan.stages}
        seen: list[str] = []
        todo = list(deps[stage_id])
        while todo:
            sid = todo.pop()
            if sid not in seen:
                seen.append(sid)
                todo.extend(deps.get(sid, []))
        return seen

    def _should_skip(self, stage: PlanStage, variables: dict[str, Any]) -> bool:
        try:
            if stage.condition is not None and not evaluate(stage.condition, variables):
                return True
            return stage.skip_if is not None and bool(evaluate(stage.skip_if, variables))
        except Exception as exc:  # jinja raises many types; the stage fails with the reason
            raise StageFailure(
                "output_invalid", f"stage {stage.id!r}: condition could not be evaluated: {exc}"
            ) from exc

    def _transcript(self) -> list[dict[str, Any]]:
        return [
            {
                "stage": sid,
                "status": r.status,
                "attempts": r.attempts,
                "tier": r.tier,
                "output": r.output,
                "error": r.error,
            }
            for sid, r in self.results.items()
            if r.status != "pending"
        ]

    def _diagnostics(self) -> list[dict[str, Any]]:
        return [
            {
                "stage": sid,
                "error_type": r.error_type,
                "error": r.error,
                "attempts": r.attempts,
                "escalated": r.escalated,
                "status": r.status,
            }
            for sid, r in self.results.items()
            if r.error_type is not None or r.attempts > 1 or r.escalated
        ]

    # --- LLM stages ---------------------------------------------------------------------------

    async def _llm_stage(self, stage: PlanStage, variables: dict[str, Any]) -> Any:
        assert stage.role is not None
        tier, prompt, params = stage.role.model_tier, stage.role.prompt, {}
        if stage.arms:
            arm = await self._select_arm(stage)
            tier, prompt, params = arm.model_tier, arm.prompt, dict(arm.params)
        ladder = [tier]
        if stage.escalate:
            ladder += self.plan.tier_ladder[self.plan.tier_ladder.index(tier) + 1 :]
        if stage.loop is None:
            return await self._attempts(stage, ladder, prompt, params, variables)
        loop = stage.loop
        carried: dict[str, Any] = {}
        output: Any = None
        for num in range(1, loop.max_iterations + 1):
            iteration = {
                "num": num,
                "is_first": num == 1,
                "is_last": num == loop.max_iterations,
                "carry_forward": carried,
            }
            iter_vars = {**variables, loop.iteration_var: iteration}
            output = await self._attempts(stage, ladder, prompt, params, iter_vars)
            self.results[stage.id].iterations = num
            if isinstance(output, dict):
                carried = {k: output.get(k) for k in loop.carry_forward}
            if loop.until is not None:
                try:
                    done = evaluate(loop.until, {**iter_vars, "output": output})
                except Exception as exc:  # jinja raises many types
                    raise StageFailure(
                        "output_invalid", f"stage {stage.id!r}: loop.until failed: {exc}"
                    ) from exc
                if done:
                    break
        return output

    # --- bandit arms ----------------------------------------------------------------------------

    def _bandit_name(self, stage: PlanStage) -> str:
        return f"{self.plan.name}:{stage.id}"

    async def _select_arm(self, stage: PlanStage) -> PlanArm:
        """Thompson-sample the stage's arm (a local activity; retries get the same answer)."""
        name = self._bandit_name(stage)
        decision_id = f"{name}@{workflow.info().workflow_id}"
        selected = await workflow.execute_local_activity(
            "bandit_select",
            BanditSelectInput(
                name=name,
                decision_id=decision_id,
                arms=[{"arm_id": a.arm_id, "params": a.params} for a in stage.arms],
            ),
            result_type=BanditSelectResult,
            start_to_close_timeout=timedelta(seconds=30),
        )
        self.arm_choice[stage.id] = (selected.arm_id, selected.decision_id)
        return next(a for a in stage.arms if a.arm_id == selected.arm_id)

    async def _reward(self, stage_id: str, reward: float, source: str) -> None:
        choice = self.arm_choice.get(stage_id)
        if choice is None or stage_id in self.rewarded or self.verification:
            return
        self.rewarded[stage_id] = (reward, source)
        try:
            await workflow.execute_local_activity(
                "bandit_reward",
                BanditRewardInput(
                    name=f"{self.plan.name}:{stage_id}",
                    decision_id=choice[1],
                    reward=max(0.0, min(1.0, reward)),
                ),
                start_to_close_timeout=timedelta(seconds=30),
            )
        except (ActivityError, ApplicationError) as exc:
            # A reward that cannot be stored never fails the run; the trace keeps the evidence.
            workflow.logger.warning("bandit reward for %s not stored: %s", stage_id, exc)

    async def _auto_rewards(self, stage: PlanStage) -> None:
        """Reward arms when the evidence arrives: a judge's score for the stages it judged,
        else the stage's own gate decision, else its output quality."""
        result = self.results[stage.id]
        if stage.role is not None and stage.role.type == "judge":
            score = result.output.get("score") if isinstance(result.output, dict) else None
            if isinstance(score, int | float):
                for dep in stage.depends_on:
                    if self.plan.stage(dep).reward == "auto":
                        await self._reward(dep, float(score), f"judge {stage.id}")
        if not stage.arms or stage.reward != "auto" or result.status == "running":
            return
        judged = any(
            stage.id in s.depends_on and s.role is not None and s.role.type == "judge"
            for s in self.plan.stages
        )
        if judged and result.status == "completed":
            return  # the judge's score will reward it
        if result.gate is not None:
            await self._reward(stage.id, 1.0 if result.gate.decision == "approve" else 0.0, "gate")
        elif result.status == "completed":
            quality = self.last_quality.get(stage.id)
            first_try = result.attempts <= 1 and not result.escalated
            await self._reward(
                stage.id,
                quality if quality is not None else (1.0 if first_try else 0.5),
                "simulated quality" if quality is not None else "validity",
            )
        elif result.status in ("failed", "rejected"):
            await self._reward(stage.id, 0.0, result.error_type or result.status)

    async def _attempts(
        self,
        stage: PlanStage,
        ladder: list[str],
        prompt: str,
        params: dict[str, Any],
        variables: dict[str, Any],
    ) -> Any:
        result = self.results[stage.id]
        last_error: str | None = None
        last_text: str | None = None
        for level, tier in enumerate(ladder):
            for attempt in range(1, stage.max_attempts + 1):
                if attempt > 1 and stage.backoff_s > 0:
                    delay = stage.backoff_s * 2 ** (attempt - 2)
                    if stage.backoff_max_s is not None:
                        delay = min(delay, stage.backoff_max_s)
                    await workflow.sleep(timedelta(seconds=delay))
                result.attempts += 1
                result.tier = tier
                result.escalated = level > 0
                call_vars = {
                    **variables,
                    "_retry_attempt": result.attempts - 1,
                    "_last_error": last_error,
                    "_last_result": last_text,
                }
                llm = await self._call_model(
                    stage, tier, prompt, params, call_vars, result.attempts
                )
                self._trace_attempt(stage, llm, call_vars, result, tier)
                if llm.simulated_quality is not None:
                    self.last_quality[stage.id] = llm.simulated_quality
                if llm.valid:
                    return llm.output
                last_error, last_text = llm.error, llm.text[:2000]
        raise StageFailure(
            "output_invalid",
            f"stage {stage.id!r}: output invalid after {result.attempts} attempt(s) on "
            f"tier(s) {ladder}: {last_error}",
        )

    def _trace_attempt(
        self,
        stage: PlanStage,
        llm: LLMCallResult,
        variables: dict[str, Any],
        result: StageResult,
        tier: str,
    ) -> None:
        assert stage.role is not None
        provenance = {k: "user_input" for k in variables.get("inputs", {})}
        provenance.update({k: f"stage:{k}" for k in self.outputs if k in variables})
        if self.plan.continuation is not None:
            provenance[self.plan.continuation.inject_as] = "prior_run"
        self.trace.add(
            "attempt",
            workflow.now().isoformat(),
            stage_id=stage.id,
            iteration=result.iterations + (1 if stage.loop is not None else 0),
            attempt=result.attempts,
            role=stage.role.name,
            role_type=stage.role.type,
            tier=tier,
            model=llm.model,
            arm_id=self.arm_choice.get(stage.id, (None, None))[0],
            decision_id=self.arm_choice.get(stage.id, (None, None))[1],
            inputs_hash=llm.inputs_hash,
            inputs_provenance=provenance,
            output=llm.output,
            output_valid=llm.valid,
            error_type=None if llm.valid else "output_invalid",
            error=llm.error,
            latency_ms=llm.latency_ms,
            prompt_tokens=llm.prompt_tokens,
            completion_tokens=llm.completion_tokens,
            cost_usd=llm.cost_usd,
            escalated=result.escalated,
            data={
                "messages": llm.messages,
                "simulated_quality": llm.simulated_quality,
                **({"finish_reason": llm.finish_reason} if llm.finish_reason else {}),
                # The raw reply of an invalid attempt (its output may be None): DPO's "rejected".
                **({} if llm.valid else {"text": llm.text[:20000]}),
            },
        )

    async def _call_model(
        self,
        stage: PlanStage,
        tier: str,
        prompt: str,
        params: dict[str, Any],
        variables: dict[str, Any],
        attempt: int,
    ) -> LLMCallResult:
        assert stage.role is not None
        transcript: list[dict[str, Any]] = []
        timeout = timedelta(seconds=stage.timeout_s) if stage.timeout_s else LLM_TIMEOUT
        approved = False
        turn = 0
        while turn < stage.role.max_turns:
            llm: LLMCallResult = await workflow.execute_activity(
                "llm_call",
                LLMCallInput(
                    run_id=workflow.info().workflow_id,
                    stage=stage,
                    tier=self.plan.tiers[tier],
                    prompt_template=prompt,
                    mission=self.plan.mission,
                    variables=_needed(variables, prompt),
                    attempt=attempt,
                    params=params,
                    tools=list(stage.role.tools),
                    transcript=transcript,
                    turn=turn,
                    spec_name=self.plan.name,
                    approved=approved,
                ),
                result_type=LLMCallResult,
                start_to_close_timeout=timeout,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=PROVIDER_RETRY,
                summary=f"{stage.id}: {stage.role.name} ({stage.role.type}, tier {tier}, "
                f"attempt {attempt}{f', turn {turn + 1}' if turn else ''})",
            )
            if llm.needs_approval is not None and not approved:
                seq = self.approval_seq.get(stage.id, 0) + 1
                self.approval_seq[stage.id] = seq
                decision = await self._wait_gate(
                    f"{stage.id}#{seq}",
                    f"a hook asks for approval: {llm.needs_approval}",
                    None,
                    "fail",
                )
                if decision.decision == "reject":
                    raise StageFailure(
                        "policy_blocked",
                        f"stage {stage.id!r}: the model call "
                        f"was refused at approval: {decision.comment or ''}",
                    )
                approved = True
                continue
            if not llm.tool_calls:
                return llm
            turn += 1
            transcript.append(
                {
                    "role": "assistant",
                    "content": llm.text or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {
                                "name": c["name"],
                                "arguments": json.dumps(c["arguments"]),
                            },
                        }
                        for c in llm.tool_calls
                    ],
                }
            )
            for call in llm.tool_calls:
                tool = await self._call_tool(
                    stage, call["name"], call["arguments"], variables, render_args=False
                )
                content = (
                    tool.output if tool.ok else {"error": tool.error, "error_type": tool.error_type}
                )
                transcript.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": json.dumps(content, default=str)[:20000],
                    }
                )
        raise StageFailure(
            "tool_error",
            f"stage {stage.id!r}: no final answer after "
            f"{stage.role.max_turns} turns (role.max_turns)",
        )

    # --- tools ----------------------------------------------------------------------------------

    async def _tool_stage(self, stage: PlanStage, variables: dict[str, Any]) -> Any:
        assert stage.tool is not None
        result = await self._call_tool(
            stage, stage.tool.name, stage.tool.args, variables, render_args=True
        )
        self.results[stage.id].attempts = 1
        if not result.ok:
            raise StageFailure(
                _TOOL_ERROR_TYPES.get(result.error_type or "", "tool_error"),
                f"stage {stage.id!r}: tool {stage.tool.name!r}: {result.error}",
            )
        return result.output

    async def _call_tool(
        self,
        stage: PlanStage,
        tool: str,
        args: dict[str, Any],
        variables: dict[str, Any],
        *,
        render_args: bool,
    ) -> ToolCallResult:
        approved = False
        timeout = timedelta(seconds=stage.timeout_s) if stage.timeout_s else TOOL_TIMEOUT
        while True:
            result: ToolCallResult = await workflow.execute_activity(
                "tool_call",
                ToolCallInput(
                    run_id=workflow.info().workflow_id,
                    stage_id=stage.id,
                    tool=tool,
                    args=args,
                    variables=_needed(variables, *_strings(args)) if render_args else {},
                    render_args=render_args,
                    safety_mode=self.plan.safety_mode,
                    safety_rules=[r.model_dump() for r in self.plan.safety_rules],
                    outer_policies=self.outer_policies,
                    http_allow_hosts=self.plan.http_allow_hosts,
                    approved=approved,
                    spec_name=self.plan.name,
                    verification=self.verification,
                ),
                result_type=ToolCallResult,
                start_to_close_timeout=timeout,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=TOOL_RETRY,
                summary=f"{stage.id}: tool {tool}",
            )
            self.trace.add(
                "tool",
                workflow.now().isoformat(),
                stage_id=stage.id,
                status="completed" if result.ok else "failed",
                output=result.output,
                error_type=None
                if result.ok
                else _TOOL_ERROR_TYPES.get(result.error_type or "", "tool_error"),
                error=result.error,
                data={
                    "tool": tool,
                    "policy_action": result.policy_action,
                    "policy_rule": result.policy_rule,
                    "policy_message": result.policy_message,
                    "tool_error_type": result.error_type,
                    "hooks": result.hooks,
                    "approved": approved,
                },
            )
            if result.policy_action != "require_approval" or approved:
                return result
            seq = self.approval_seq.get(stage.id, 0) + 1
            self.approval_seq[stage.id] = seq
            gate_id = stage.id if stage.kind == "tool" else f"{stage.id}#{seq}"
            decision = await self._wait_gate(
                gate_id,
                f"tool {tool} needs approval: {result.policy_message} — args: "
                f"{json.dumps(result.output.get('args', args), default=str)[:500]}",
                None,
                "fail",
            )
            if decision.decision == "reject":
                return ToolCallResult(
                    ok=False,
                    error_type="policy_blocked",
                    error=f"tool call rejected by {decision.by or 'a person'}: "
                    f"{decision.comment or 'no reason given'}",
                    policy_action="require_approval",
                )
            approved = True

    def _own_policy(self) -> PolicySet:
        return PolicySet(
            safety_mode=self.plan.safety_mode,
            safety_rules=[r.model_dump() for r in self.plan.safety_rules],
            http_allow_hosts=self.plan.http_allow_hosts,
        )

    # --- gates ----------------------------------------------------------------------------------

    def _gate_message(self, stage: PlanStage, variables: dict[str, Any], output: Any) -> str:
        assert stage.gate is not None
        if stage.gate.message is None:
            return f"approve stage {stage.id!r}?"
        try:
            return render(stage.gate.message, {**variables, "output": output})
        except Exception as exc:  # jinja raises many types; show the template, say why
            return f"{stage.gate.message} (could not render: {exc})"

    async def _wait_gate(
        self,
        gate_id: str,
        message: str,
        timeout_s: float | None,
        on_timeout: str,
        *,
        unattended: Literal["approve", "reject"] = "reject",
    ) -> GateDecision:
        """Wait durably for a person's decision on ``gate_id``. In a verification run nobody
        is asked: the gate takes its ``unattended`` decision at once."""
        if self.verification:
            self.decisions[gate_id] = GateDecision(
                stage=gate_id,
                decision=unattended,
                comment=f"decided automatically ({unattended}): a verification run",
                by="armature improve",
            )
        if gate_id in self.results:
            self.results[gate_id].status = "waiting_gate"
        await self._flush()  # a waiting run's trace so far is visible in the store
        self.pending[gate_id] = GateInfo(
            stage=gate_id,
            message=message,
            since=workflow.now().isoformat(),
            timeout_s=timeout_s,
            on_timeout=on_timeout,
        )
        self._mark_waiting()
        evicted = False
        try:
            await workflow.wait_condition(
                lambda: gate_id in self.decisions,
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
                timeout_summary=f"gate {gate_id} timeout",
            )
        except TimeoutError:
            if on_timeout == "fail":
                raise StageFailure(
                    "timeout",
                    f"gate {gate_id!r}: nobody decided within {timeout_s:g}s (on_timeout: fail)",
                ) from None
            self.decisions[gate_id] = GateDecision(
                stage=gate_id,
                decision=on_timeout,  # type: ignore[arg-type]
                comment=f"timed out after {timeout_s:g}s",
                by="timeout",
            )
        except GeneratorExit:  # evicted from the cache: see _run_stage
            evicted = True
            raise
        finally:
            if not evicted:
                self._after_gate(gate_id)
        return self.decisions[gate_id]

    def _after_gate(self, gate_id: str) -> None:
        """A gate stopped waiting: trace its decision, clear it from the status."""
        self.pending.pop(gate_id, None)
        decided = self.decisions.get(gate_id)
        if decided is not None:
            # Every decided gate — stage gates and tool-call approvals alike — is traced
            # with who decided, when, and why (gate_decisions table, armature report).
            self.trace.add(
                "gate",
                workflow.now().isoformat(),
                stage_id=gate_id,
                status=decided.decision,
                data=decided.model_dump(),
            )
        if gate_id in self.results and self.results[gate_id].status == "waiting_gate":
            self.results[gate_id].status = "running"
        self._mark_waiting()

    def _mark_waiting(self) -> None:
        waiting = bool(self.pending)
        self.state = "waiting_gate" if waiting else "running"
        workflow.upsert_search_attributes([WAITING_GATE.value_set(waiting)])

    # --- fan-out --------------------------------------------------------------------------------

    async def _fan_out(self, stage: PlanStage, variables: dict[str, Any]) -> Any:
        child_plan = self.plan.children[stage.id]
        count = stage.fan_out or 1
        if stage.partition_key is not None:
            try:
                items = resolve_path(variables, stage.partition_key)
            except KeyError as exc:
                raise StageFailure("output_invalid", f"stage {stage.id!r}: {exc}") from None
            if not isinstance(items, list):
                raise StageFailure(
                    "output_invalid",
                    f"stage {stage.id!r}: partition_key {stage.partition_key!r} "
                    f"is {type(items).__name__}, not a list",
                )
            chunks = split_fairly(items, count)
            if not chunks:
                workflow.logger.info("stage %s: partition list is empty; no child runs", stage.id)
                return [] if stage.fan_in in ("list", None) else None
            child_inputs = [
                {**self.inputs, "partition": c, "index": i, "count": len(chunks)}
                for i, c in enumerate(chunks)
            ]
        else:
            child_inputs = [{**self.inputs, "index": i, "count": count} for i in range(count)]
        run_id = workflow.info().workflow_id
        result = self.results[stage.id]
        result.attempts = len(child_inputs)

        async def start_child(i: int, attempt: int) -> Any:
            suffix = "" if attempt == 1 else f"~{attempt}"
            child_id = f"{run_id}/{stage.id}/{i}{suffix}"
            result.children[i] = {"id": child_id, "status": "running", "attempt": attempt}
            return await workflow.start_child_workflow(
                WORKFLOW_NAME,
                RunInput(
                    plan=child_plan,
                    inputs=child_inputs[i],
                    parent_run_id=run_id,
                    outer_policies=[*self.outer_policies, self._own_policy()],
                    verification=self.verification,
                ),
                id=child_id,
                result_type=RunResult,
                cancellation_type=ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
                static_summary=(
                    f"{stage.id} child {i + 1}/{len(child_inputs)}: {child_plan.name}"
                    + (f" (attempt {attempt})" if attempt > 1 else "")
                ),
            )

        result.children = [{} for _ in child_inputs]
        handles = [await start_child(i, 1) for i in range(len(child_inputs))]
        if stage.fan_in == "first":
            done, pending = await workflow.wait(handles, return_when=asyncio.FIRST_COMPLETED)
            for other in pending:
                other.cancel()
            # Wait until the losers have really stopped (their activities see the cancel).
            await asyncio.gather(*pending, return_exceptions=True)
            winner = next(iter(done))
            index = handles.index(winner)
            for k, child in enumerate(result.children):
                child["status"] = "completed" if k == index else "cancelled"
            return _child_output(child_plan, winner.result())
        # A failed child follows the stage's on_fail policy: it is started again (new id
        # <run>/<stage>/<i>~<attempt>) until on_fail.loop.max attempts are spent.
        outcomes: list[Any] = list(await asyncio.gather(*handles, return_exceptions=True))
        for attempt in range(2, stage.max_attempts + 2):
            failed = [i for i, o in enumerate(outcomes) if isinstance(o, BaseException)]
            for i, outcome in enumerate(outcomes):
                if not isinstance(outcome, BaseException):
                    result.children[i]["status"] = "completed"
            for i in failed:
                result.children[i]["status"] = "failed"
                result.children[i]["error"] = str(
                    getattr(outcomes[i], "cause", None) or outcomes[i]
                )[:500]
            if not failed:
                break
            if attempt > stage.max_attempts:
                first = result.children[failed[0]]
                raise StageFailure(
                    "dependency_failed",
                    f"stage {stage.id!r}: {len(failed)} of {len(outcomes)} child run(s) failed "
                    f"after {stage.max_attempts} attempt(s); first: {first['id']}: "
                    f"{first.get('error', '')}",
                )
            retried = await asyncio.gather(
                *[await start_child(i, attempt) for i in failed], return_exceptions=True
            )
            for i, outcome in zip(failed, retried, strict=True):
                outcomes[i] = outcome
        results = [o for o in outcomes if isinstance(o, RunResult)]
        outputs = [_child_output(child_plan, r) for r in results]
        if stage.fan_in == "merge":
            merged = merge_outputs(outputs)
            return (
                {**merged.merged, "_conflicts": merged.conflicts}
                if merged.conflicts
                else (merged.merged)
            )
        if stage.fan_in == "consensus":
            vote = consensus(outputs)
            verdict = {
                "value": vote.value,
                "agreement": vote.agreement,
                "votes": vote.votes,
                "majority": vote.majority,
                "children": len(outputs),
                "reconciled_by": None,
            }
            if not vote.majority:
                verdict.update(await self._reconcile(stage, outputs))
            return verdict
        return outputs

    async def _reconcile(self, stage: PlanStage, outputs: list[Any]) -> dict[str, Any]:
        """No majority: a judge-tier model picks the best-supported child output and says how
        much the children agree (a score the trace keeps)."""
        judge_tier = _judge_tier(self.plan)
        judge = PlanStage(
            id=f"{stage.id}__consensus",
            kind="llm",
            role=PlanRole(
                name="Consensus judge", type="judge", model_tier=judge_tier, prompt=CONSENSUS_PROMPT
            ),
            output_mode="json",
            output_schema={
                "type": "object",
                "properties": {
                    "choice": {"type": "integer", "minimum": 0, "maximum": len(outputs) - 1},
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "rationale": {"type": "string"},
                },
                "required": ["choice", "score", "rationale"],
            },
            max_attempts=3,
        )
        result = self.results[stage.id]
        for attempt in range(1, judge.max_attempts + 1):
            llm = await self._call_model(
                judge,
                judge_tier,
                CONSENSUS_PROMPT,
                {},
                {"outputs": outputs, "stage": stage.id},
                attempt,
            )
            self._trace_attempt(judge, llm, {}, result, judge_tier)
            if llm.valid and isinstance(llm.output, dict):
                choice = int(llm.output["choice"])
                return {
                    "value": outputs[choice],
                    "agreement": float(llm.output["score"]),
                    "reconciled_by": judge_tier,
                    "choice": choice,
                    "rationale": llm.output.get("rationale"),
                }
        raise StageFailure(
            "output_invalid",
            f"stage {stage.id!r}: the children disagree and "
            "the consensus judge gave no valid verdict",
        )


CONSENSUS_PROMPT = """\
Sub-agents answered the same task for stage {{ stage }} differently:
{% for o in outputs %}[{{ loop.index0 }}] {{ o | tojson_compact }}
{% endfor %}
Pick the answer best supported by the others (its index as choice) and score from 0 to 1 how
much the answers agree in substance."""


#: Tool failure kinds mapped onto the failure taxonomy (the trace keeps the tool's own kind).
_TOOL_ERROR_TYPES = {"timeout": "timeout", "policy_blocked": "policy_blocked"}


#: Variables the activities use besides those a template names.
_ALWAYS_SENT = ("_retry_attempt", "_last_error", "_last_result")


def _needed(variables: dict[str, Any], *templates: str) -> dict[str, Any]:
    """Only the variables the templates read: activity inputs (and history) stay small even
    when a stage has hundreds of upstream stages."""
    names: set[str] = set(_ALWAYS_SENT)
    for source in templates:
        try:
            names.update(referenced_names(source))
        except TemplateSyntaxError:
            return variables  # the activity reports the syntax error with its context
    return {k: v for k, v in variables.items() if k in names}


def _strings(value: Any) -> list[str]:
    """Every string inside a tool's args (templates among them)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _judge_tier(plan: Plan) -> str:
    """The tier judges default to: frontier, else the largest tier the spec has."""
    return "frontier" if "frontier" in plan.tiers else plan.tier_ladder[-1]


def _child_output(plan: Plan, result: RunResult) -> Any:
    """A child's output: its sink stage's output, or a dict of sink outputs if several."""
    depended = {d for s in plan.stages for d in s.depends_on}
    sinks = [s.id for s in plan.stages if not s.post_run and s.id not in depended]
    if len(sinks) == 1:
        return result.outputs.get(sinks[0])
    return {sid: result.outputs.get(sid) for sid in sinks}


def _classify(exc: ActivityError | ChildWorkflowError) -> tuple[str, str]:
    """(error_type, message) from an activity or child failure."""
    from temporalio.exceptions import CancelledError as TemporalCancelledError
    from temporalio.exceptions import TimeoutError as TemporalTimeoutError

    cause = exc.cause
    if isinstance(cause, TemporalCancelledError):
        return "cancelled", "cancelled (a sibling stage failed or the run was cancelled)"
    if isinstance(cause, TemporalTimeoutError):
        return "timeout", f"timed out ({cause.type.name if cause.type else 'timeout'})"
    if isinstance(cause, ApplicationError):
        kind = cause.type or ""
        if kind.startswith("provider_error"):
            return "provider_error", cause.message
        if kind == "RunFailed":
            return "dependency_failed", f"child run failed: {cause.message}"
        if kind == "template_error":
            return "output_invalid", cause.message
        if kind in ("policy_blocked", "payload_too_large"):
            return "policy_blocked" if kind == "policy_blocked" else "tool_error", cause.message
        return "tool_error", cause.message
    return "provider_error", str(cause or exc)
