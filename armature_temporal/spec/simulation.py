"""The world the ``simulate`` provider plays out for a stage: its pitfalls.

A pitfall is a mistake a simulated model makes on this stage unless its prompt carries the
pitfall's lesson. Falling in lowers the output's latent quality by ``penalty`` and leaves
``symptom`` in the output, which is what a critic or a distiller can notice. Real providers
ignore this section, so a spec keeps it when it moves from simulate tiers to real ones.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from armature_temporal.spec.fields import IDENTIFIER, _Model

__all__ = ["SIMULATE_DESCRIPTION", "Pitfall", "StageSimulation"]

#: The description of ``Stage.simulate`` (kept here so the stage model stays short).
SIMULATE_DESCRIPTION = (
    "simulate provider only (real providers ignore it): the pitfalls a simulated model falls "
    "into on this stage unless the prompt carries their lesson; each hit lowers the output's "
    "latent quality and shows its symptom in the output."
)


class Pitfall(_Model):
    """A mistake the simulator makes on a stage, and the lesson that avoids it."""

    id: str = Field(
        ..., pattern=IDENTIFIER.pattern, description="Identifier, unique within the stage."
    )
    penalty: float = Field(
        ...,
        gt=0,
        le=1,
        description="Subtracted from the output's latent quality (0..1) when the run falls in.",
    )
    symptom: str = Field(
        ..., min_length=1, description="Text the output shows when the run falls into it."
    )
    lesson: str = Field(
        ...,
        min_length=1,
        description="Text which, present in the prompt (case-insensitive, whitespace "
        "normalised), avoids the pitfall.",
    )
    rate: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Chance that a run whose prompt lacks the lesson falls in.",
    )


class StageSimulation(_Model):
    """``simulate:`` on a stage: the simulator's declared world for it."""

    pitfalls: list[Pitfall] = Field(
        default_factory=list,
        description="Mistakes the simulated model makes here unless the prompt has the lesson.",
    )

    @model_validator(mode="after")
    def _unique_ids(self) -> StageSimulation:
        seen: set[str] = set()
        for pitfall in self.pitfalls:
            if pitfall.id in seen:
                raise ValueError(
                    f"pitfall id {pitfall.id!r} appears twice; give each pitfall its own id"
                )
            seen.add(pitfall.id)
        return self
