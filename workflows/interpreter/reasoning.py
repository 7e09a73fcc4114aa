"""Reason before acting (``reason_first``): an attempt's private reasoning call, and its cost
counted in the answer's (runtime/reasoning.py says where the reasoning goes in the prompt)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from armature_temporal.runtime.loop_state import LoopState
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.plan import PlanReasoning
from workflows.interpreter.retries import call_llm
from workflows.interpreter.tool_loop import LLM_TIMEOUT

if TYPE_CHECKING:
    from workflows.interpreter.llm import LLMStages

__all__ = ["counted", "reason"]


async def reason(
    stages: LLMStages, stage: PlanStage, reasoning: PlanReasoning, state: LoopState
) -> LLMCallResult:
    """The private reasoning call before ``state``'s answer: the stage's prompt (task, context,
    lessons, passages, facts) and the reasoning request, as text, without tools or the
    stage's simulated pitfalls (its quality is not the stage's). Raises ProviderFailure when
    its provider's budget is spent, which fails the attempt like an answer's."""
    assert stage.role is not None
    run = stages.run
    tier = reasoning.tier or state.tier
    # The reasoning call is a text call: no schema, no tools, no simulated pitfalls or facts.
    thinker = stage.model_copy(
        update={
            "output_mode": "text",
            "output_schema": None,
            "simulate": None,
            "role": stage.role.model_copy(update={"tools": [], "reasoning": None}),
        }
    )
    run.count_llm_call(stage.id)
    timeout = timedelta(seconds=stage.timeout_s) if stage.timeout_s else LLM_TIMEOUT
    return await call_llm(
        LLMCallInput(
            run_id=run.run_id,
            stage=thinker,
            tier=run.plan.tiers[tier],
            prompt_template=state.prompt,
            mission=run.plan.mission,
            variables=state.variables,
            attempt=state.attempt,
            params=state.params if tier == state.tier else {},
            spec_name=run.plan.name,
            context=state.context,
            sim_seed=f"{state.sim_seed or run.run_id}/reasoning",
            lessons=state.lessons,
            knowledge=state.knowledge,
            facts=state.facts,
            reasoning_request=reasoning.prompt,
        ),
        start_to_close=timeout,
        summary=f"{stage.id}: {stage.role.name} reasons first (private; tier {tier}, "
        f"attempt {state.attempt})",
        what=stage.id,
    )


def counted(answer: LLMCallResult, reasoned: LLMCallResult) -> LLMCallResult:
    """The answer with the reasoning call's tokens, cost and latency added to its own, and the
    reasoning kept for the stage's trace (``reasoning``), never in its output."""
    usage: dict[str, Any] = {
        "prompt_tokens": reasoned.prompt_tokens,
        "completion_tokens": reasoned.completion_tokens,
        "cost_usd": reasoned.cost_usd,
        "latency_ms": reasoned.latency_ms,
    }
    return answer.model_copy(
        update={
            **{k: getattr(answer, k) + v for k, v in usage.items()},
            "reasoning": {
                "text": reasoned.text,
                "tier": reasoned.tier,
                "model": reasoned.model,
                **usage,
            },
        }
    )
