"""``Arms``: the stage configurations a bandit chooses between, and the rewards that teach it."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.runtime.models import (
    BanditRewardInput,
    BanditSelectInput,
    BanditSelectResult,
)
from armature_temporal.spec.compiler import PlanArm, PlanStage
from workflows.interpreter.evidence import cost_penalty, stage_evidence
from workflows.interpreter.state import RunContext

__all__ = ["Arms"]


class Arms:
    """Thompson-sampled arm choice per stage (a local activity) and rewards from the evidence:
    a judge's score, a gate decision, or the output's quality."""

    def __init__(self, run: RunContext) -> None:
        self.run = run

    def bandit_name(self, stage_id: str) -> str:
        return f"{self.run.plan.name}:{stage_id}"

    async def select(self, stage: PlanStage) -> PlanArm:
        """Thompson-sample the stage's arm (a local activity; retries get the same answer)."""
        name = self.bandit_name(stage.id)
        decision_id = f"{name}@{self.run.run_id}"
        context = stage.bandit.context if stage.bandit is not None else None
        embedding = context.embedding if context is not None else None
        selected = await workflow.execute_local_activity(
            "bandit_select",
            BanditSelectInput(
                name=name,
                decision_id=decision_id,
                arms=[{"arm_id": a.arm_id, "params": a.params} for a in stage.arms],
                context=context.features(self.run.inputs) if context is not None else None,
                embed_text=str(self.run.inputs.get(embedding.input, "") or "")
                if embedding is not None
                else None,
                context_embed=embedding.input if embedding is not None else None,
                buckets=embedding.buckets if embedding is not None else 0,
            ),
            result_type=BanditSelectResult,
            start_to_close_timeout=timedelta(seconds=30),
        )
        self.run.arm_choice[stage.id] = (selected.arm_id, selected.decision_id)
        declared = next((a for a in stage.arms if a.arm_id == selected.arm_id), None)
        if declared is not None:
            return declared
        if selected.arm is None:
            raise ApplicationError(
                f"stage {stage.id!r}: the bandit chose arm {selected.arm_id!r}, which the spec "
                "does not declare and which was not bred by evolution; reset the bandit or add "
                "the arm to the spec",
                type="unknown_arm",
                non_retryable=True,
            )
        # Bred by evolution (bandit.evolve): its definition came with the selection.
        return PlanArm(arm_id=selected.arm_id, **selected.arm)

    async def reward(self, stage_id: str, reward: float, source: str) -> None:
        """Reward the stage's chosen arm once (never in a verification run)."""
        run = self.run
        choice = run.arm_choice.get(stage_id)
        if choice is None or stage_id in run.rewarded or run.verification:
            return
        run.rewarded[stage_id] = (reward, source)
        try:
            await workflow.execute_local_activity(
                "bandit_reward",
                BanditRewardInput(
                    name=self.bandit_name(stage_id),
                    decision_id=choice[1],
                    reward=max(0.0, min(1.0, reward)),
                    policy=next(
                        (s.bandit for s in run.plan.stages if s.id == stage_id and s.bandit),
                        None,
                    ),
                ),
                start_to_close_timeout=timedelta(seconds=30),
            )
        except (ActivityError, ApplicationError) as exc:
            # A reward that cannot be stored never fails the run; the trace keeps the evidence.
            workflow.logger.warning("bandit reward for %s not stored: %s", stage_id, exc)

    def wanted(self, stage: PlanStage) -> bool:
        """Whether a finished stage may carry evidence for some arm."""
        return bool(self.run.arm_choice) or (stage.role is not None and stage.role.type == "judge")

    async def after_stage(self, stage: PlanStage) -> None:
        """Reward arms when the evidence arrives: a judge's score for the stages it judged,
        else the stage's own gate decision, else its output quality."""
        for stage_id, reward, why in stage_evidence(self.run, stage):
            if stage_id == stage.id and not stage.arms:
                continue  # nothing was chosen for the stage itself
            await self.reward(stage_id, reward - cost_penalty(self.run, stage_id), why)
