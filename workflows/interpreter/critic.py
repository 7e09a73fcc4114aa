"""``Critic``: after the DAG, each completed LLM stage (not judges) scored 0–10 with evidence.

Only when the spec's ``experience:`` is enabled and the run is not a verification run. One
``critique`` activity per stage, all at once, on the critic tier
(:func:`~armature_temporal.experience.critic.critic_tier`: never the actor's own tier when the
spec has another); it is shown the stage's task and its output without self-assessment
fields. Each verdict is a ``critique`` record in the run's trace chain (``data``: ``score``,
``evidence``, ``critic_tier``), which distillation reads. A critique that fails is recorded as
failed; it never fails the run, and it changes neither the outputs nor the HQS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.exceptions import CancelledError as TemporalCancelledError

from armature_temporal.experience.critic import CritiqueInput, CritiqueResult, critic_tier
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.templating import render
from workflows.interpreter.failures import classify
from workflows.interpreter.llm import LLM_TIMEOUT
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["CRITIC_PATCH", "Critic"]

#: workflow.patched id: runs with experience enabled critique their stages after the DAG.
CRITIC_PATCH = "experience-critic"
CRITIC_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


class Critic:
    """Critiques the run's completed LLM stages (see the module docstring)."""

    def __init__(
        self, run: RunContext, tracer: Tracer, variables: Callable[[PlanStage], dict[str, Any]]
    ) -> None:
        self.ctx = run
        self.tracer = tracer
        self.variables = variables

    def due(self) -> list[PlanStage]:
        run = self.ctx
        config = run.plan.experience
        if config is None or not config.enabled or run.verification:
            return []
        return [
            s
            for s in run.plan.stages
            if s.kind == "llm"
            and s.role is not None
            and s.role.type != "judge"
            and run.results[s.id].status == "completed"
        ]

    async def run(self) -> None:
        """Critique every due stage (none due: no command, no patch marker)."""
        due = self.due()
        if due and workflow.patched(CRITIC_PATCH):
            await asyncio.gather(*(self._critique(stage) for stage in due))

    def _task(self, stage: PlanStage) -> str:
        assert stage.role is not None
        try:
            return render(stage.role.prompt, self.variables(stage))
        except Exception:  # jinja raises many types; the template itself still says the task
            return stage.role.prompt

    async def _critique(self, stage: PlanStage) -> None:
        run = self.ctx
        result = run.results[stage.id]
        actor = result.tier or (stage.role.model_tier if stage.role else "")
        tier = critic_tier(run.plan, actor)
        simulate = stage.simulate
        verdict: CritiqueResult | None = None
        error: str | None = None
        try:
            verdict = await workflow.execute_activity(
                "critique",
                CritiqueInput(
                    run_id=run.run_id,
                    spec_name=run.plan.name,
                    stage_id=stage.id,
                    task=self._task(stage),
                    output=result.output,
                    tier=run.plan.tiers[tier],
                    seed=f"{run.run_id}/{stage.id}/critic/{tier}",
                    latent_quality=run.last_quality.get(stage.id),
                    pitfalls=list(simulate.pitfalls) if simulate is not None else [],
                ),
                result_type=CritiqueResult,
                start_to_close_timeout=LLM_TIMEOUT,
                retry_policy=CRITIC_RETRY,
                summary=f"{stage.id}: critique (tier {tier})",
            )
        except ActivityError as exc:
            if isinstance(exc.cause, TemporalCancelledError):
                raise
            error = classify(exc)[1]
        self.tracer.chain.add(
            "critique",
            workflow.now().isoformat(),
            stage_id=stage.id,
            status="failed" if verdict is None else "completed",
            role_type="critic",
            tier=tier,
            model=verdict.model if verdict else None,
            output={"score": verdict.score, "evidence": verdict.evidence} if verdict else None,
            error=f"critique failed: {error}" if error else None,
            prompt_tokens=verdict.prompt_tokens if verdict else 0,
            completion_tokens=verdict.completion_tokens if verdict else 0,
            cost_usd=verdict.cost_usd if verdict else 0.0,
            latency_ms=verdict.latency_ms if verdict else 0.0,
            data={
                "score": verdict.score if verdict else None,
                "evidence": verdict.evidence if verdict else [],
                "critic_tier": tier,
                "actor_tier": actor,
            },
        )
