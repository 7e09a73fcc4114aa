"""Confidence thresholds: the least confidence an LLM stage's output must carry to be accepted.

``Stage.min_confidence`` sets it for one stage, ``confidence: {min: {worker: 0.6}}`` for every
stage whose role has that type. An output below it is treated like one that failed its schema:
retried and escalated up the tier ladder as the stage's ``on_fail`` says, traced
``error_type: low_confidence``. The confidence itself (0..1, from token logprobs, a stated
confidence field or the hedging detector) comes from ``armature_temporal.runtime.confidence``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from armature_temporal.spec.fields import RoleType, _Model

if TYPE_CHECKING:
    from armature_temporal.spec.models import Spec, Stage

__all__ = [
    "CONFIDENCE_DESCRIPTION",
    "MIN_CONFIDENCE_DESCRIPTION",
    "ConfidenceConfig",
    "stage_min_confidence",
]

Unit = Annotated[float, Field(ge=0, le=1)]

#: The description of ``Stage.min_confidence`` (kept here so the stage model stays short).
MIN_CONFIDENCE_DESCRIPTION = (
    "LLM stages: the least confidence (0..1) an output must carry; below it the attempt counts "
    "as failed (error_type low_confidence) and is retried and escalated as on_fail says. When "
    "retries run out, the most confident valid output stands. Overrides confidence.min."
)
#: The description of ``Spec.confidence``.
CONFIDENCE_DESCRIPTION = "Confidence thresholds per role type (a stage's min_confidence wins)."


class ConfidenceConfig(_Model):
    """Spec-level confidence defaults."""

    min: dict[RoleType, Unit] = Field(
        default_factory=dict,
        description="Per role type, the min_confidence of its stages that set none, e.g. "
        "{worker: 0.6}.",
    )


def stage_min_confidence(spec: Spec, stage: Stage) -> float | None:
    """The stage's own ``min_confidence``, else its role type's ``confidence.min``; None for
    stages without a role or a threshold."""
    if stage.role is None:
        return None
    if stage.min_confidence is not None:
        return stage.min_confidence
    if spec.confidence is None:
        return None
    return spec.confidence.min.get(stage.role.type)
