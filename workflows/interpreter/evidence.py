"""The evidence a finished stage brings for the choices made for it (bandit arms, lessons):
a judge's score for the stages it judged, else the stage's own gate decision, else its output
quality (simulated, or validity: 1 on the first try, 0.5 after retries); 0 when it failed or
was rejected. Stages with ``reward: external`` are rewarded from outside, never here. An arm's
reward is this evidence less the stage's token cost (:func:`cost_penalty`, with
``reward_cost_per_1k_tokens``); a lesson's is the evidence alone."""

from __future__ import annotations

from armature_temporal.runtime.outputs import judge_score
from armature_temporal.spec.compiler import PlanStage
from workflows.interpreter.state import RunContext

__all__ = ["cost_penalty", "stage_evidence"]


def stage_evidence(run: RunContext, stage: PlanStage) -> list[tuple[str, float, str]]:
    """``(stage id, reward, why)`` for each stage this finished one brings evidence for, in
    order: the stages a judge judged first, then the stage itself."""
    found: list[tuple[str, float, str]] = []
    result = run.results[stage.id]
    if stage.role is not None and stage.role.type == "judge":
        score = judge_score(result.output)
        if score is not None:
            for dep in stage.depends_on:
                if run.plan.stage(dep).reward == "auto":
                    found.append((dep, float(score), f"judge {stage.id}"))
    if stage.reward != "auto" or result.status == "running":
        return found
    judged = any(
        stage.id in s.depends_on and s.role is not None and s.role.type == "judge"
        for s in run.plan.stages
    )
    if judged and result.status == "completed":
        return found  # the judge's score will reward it
    if result.gate is not None:
        found.append((stage.id, 1.0 if result.gate.decision == "approve" else 0.0, "gate"))
    elif result.status == "completed":
        quality = run.last_quality.get(stage.id)
        first_try = result.attempts <= 1 and not result.escalated
        if quality is not None:
            found.append((stage.id, quality, "simulated quality"))
        else:
            found.append((stage.id, 1.0 if first_try else 0.5, "validity"))
    elif result.status in ("failed", "rejected"):
        found.append((stage.id, 0.0, result.error_type or result.status))
    return found


def cost_penalty(run: RunContext, stage_id: str) -> float:
    """What the stage's ``reward_cost_per_1k_tokens`` takes off its arm's auto reward: that
    much per 1,000 tokens its model calls spent in this run (0 when it declares none)."""
    per_1k = run.plan.stage(stage_id).reward_cost_per_1k_tokens
    return per_1k * run.spent_tokens.get(stage_id, 0) / 1000 if per_1k else 0.0
