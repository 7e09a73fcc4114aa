"""Escalation on low confidence: a valid output whose confidence is below the stage's
``min_confidence`` counts as a failed attempt (``error_type: low_confidence``), which the
attempt loop retries and escalates up the tier ladder as ``on_fail`` says, like an output that
failed its schema. When the attempts run out, the most confident valid output stands.

Runs started before this change never compared confidences: it is behind the
:data:`LOW_CONFIDENCE_ESCALATION` patch, asked only by stages that set a threshold.
"""

from __future__ import annotations

from temporalio import workflow

from armature_temporal.runtime.models import LLMCallResult
from armature_temporal.spec.compiler import PlanStage

__all__ = ["LOW_CONFIDENCE_ESCALATION", "confidence_shortfall", "more_confident"]

#: workflow.patched id: outputs below a stage's min_confidence are retried and escalated.
LOW_CONFIDENCE_ESCALATION = "low-confidence-escalation"


def confidence_shortfall(stage: PlanStage, llm: LLMCallResult) -> str | None:
    """Why a valid output is not accepted for its confidence (the attempt's error), or None
    when it is: the stage sets no threshold, the call carries no confidence, or it is enough."""
    threshold = stage.min_confidence
    if threshold is None or not llm.valid:
        return None
    confidence = llm.confidence
    if confidence is None:
        return None
    if not workflow.patched(LOW_CONFIDENCE_ESCALATION):
        return None
    if confidence.value >= threshold:
        return None
    return (
        f"the output's confidence {confidence.value:.3f} (from {confidence.source}) is below "
        f"the stage's min_confidence {threshold:g}; answer only what you are sure of, plainly"
    )


def more_confident(best: LLMCallResult | None, llm: LLMCallResult) -> LLMCallResult:
    """The more confident of two valid outputs; the earlier one on a tie."""
    if best is None or best.confidence is None:
        return llm
    if llm.confidence is not None and llm.confidence.value > best.confidence.value:
        return llm
    return best
