"""``Evaluations``: after the run, each completed stage's ``evaluate`` criteria, judged.

One ``llm_call`` per stage on the judge tier (:func:`~armature_temporal.runtime.progress.
judge_tier`, as a fan-out's consensus judge uses), all stages at once. The verdict goes on the
stage's result (``StageResult.evaluation``) and into the trace (an ``evaluation`` record, which
``armature report`` shows). An evaluation that fails — the provider, or no valid answer — is
recorded as the evaluation's error; it never fails the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.exceptions import CancelledError as TemporalCancelledError

from armature_temporal.runtime.evaluation import (
    EVALUATION_PROMPT,
    evaluation_judge,
    evaluation_verdict,
    judged_output,
)
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult
from armature_temporal.runtime.progress import judge_tier
from armature_temporal.spec.compiler import PlanStage
from workflows.interpreter.failures import classify
from workflows.interpreter.llm import LLM_TIMEOUT, LLMStages
from workflows.interpreter.retries import ProviderFailure, call_llm
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["Evaluations"]


class Evaluations:
    """Judges the run's completed stages against their ``evaluate`` criteria."""

    def __init__(self, run: RunContext, tracer: Tracer, llm: LLMStages | None = None) -> None:
        self.ctx = run  # not ``run``: that is the method
        self.tracer = tracer
        self.llm = llm  # the run's simulate seed, and the latent quality of what is judged

    async def run(self) -> None:
        """Evaluate every completed stage that has criteria (none: no call at all)."""
        results = self.ctx.results
        due = [
            s for s in self.ctx.plan.stages if s.evaluate and results[s.id].status == "completed"
        ]
        if due:
            await asyncio.gather(*(self._evaluate(stage) for stage in due))

    async def _evaluate(self, stage: PlanStage) -> None:
        run = self.ctx
        plan = run.plan
        tier = judge_tier(plan)
        judge = evaluation_judge(stage.id, stage.evaluate, tier)
        variables: dict[str, Any] = {
            "stage": stage.id,
            "criteria": list(dict.fromkeys(stage.evaluate)),
            "output": judged_output(run.results[stage.id].output),
        }
        spent = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "latency_ms": 0.0}
        llm: LLMCallResult | None = None
        error: str | None = None
        attempt = 0
        while attempt < judge.max_attempts:
            attempt += 1
            try:
                llm = await call_llm(
                    LLMCallInput(
                        run_id=run.run_id,
                        stage=judge,
                        tier=plan.tiers[tier],
                        prompt_template=EVALUATION_PROMPT,
                        mission=plan.mission,
                        variables={
                            **variables,
                            "_retry_attempt": attempt - 1,
                            "_last_error": error,
                            "_last_result": llm.text[:2000] if llm else None,
                        },
                        attempt=attempt,
                        spec_name=plan.name,
                        sim_seed=self.llm.sim_seed() if self.llm else None,
                        judged_quality=self.llm.evaluated_quality(stage) if self.llm else None,
                    ),
                    start_to_close=LLM_TIMEOUT,
                    summary=f"{stage.id}: evaluate {len(variables['criteria'])} criteria "
                    f"(tier {tier}, attempt {attempt})",
                    what=f"{stage.id}: evaluate",
                )
            except ActivityError as exc:
                if isinstance(exc.cause, TemporalCancelledError):
                    raise
                error = classify(exc)[1]
                break
            except ProviderFailure as exc:
                error = str(exc)
                break
            for key in ("prompt_tokens", "completion_tokens", "cost_usd", "latency_ms"):
                spent[key] += getattr(llm, key)
            if llm.valid and isinstance(llm.output, dict):
                error = None
                break
            error = llm.error or "the answer is not a JSON object"
        if error is None and llm is not None:
            evaluation = evaluation_verdict(stage.evaluate, llm.output, tier)
        else:
            evaluation = {
                "error": f"evaluation failed after {attempt} attempt(s): {error}",
                "tier": tier,
            }
        run.results[stage.id].evaluation = evaluation
        self.tracer.chain.add(
            "evaluation",
            workflow.now().isoformat(),
            stage_id=stage.id,
            status="failed" if "error" in evaluation else "completed",
            attempt=attempt,
            role=judge.role.name if judge.role else None,
            role_type="judge",
            tier=tier,
            model=llm.model if llm else None,
            output=evaluation,
            error=evaluation.get("error"),
            judge_score=evaluation.get("mean"),
            prompt_tokens=int(spent["prompt_tokens"]),
            completion_tokens=int(spent["completion_tokens"]),
            cost_usd=spent["cost_usd"],
            latency_ms=spent["latency_ms"],
            data={
                "criteria": variables["criteria"],
                "messages": llm.messages if llm else [],
                "simulated_quality": llm.simulated_quality if llm else None,
            },
        )
