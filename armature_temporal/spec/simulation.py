"""The world the ``simulate`` provider plays out for a stage: its pitfalls and the facts a good
answer needs.

A pitfall is a mistake a simulated model makes on this stage unless its prompt carries the
pitfall's lesson. Falling in lowers the output's latent quality by ``penalty`` and leaves
``symptom`` in the output, which is what a critic or a distiller can notice. Real providers
ignore this section, so a spec keeps it when it moves from simulate tiers to real ones.

A needed fact is knowledge the simulated model does not have: an answer whose prompt lacks the
fact's text (from a retrieved passage, a document, a lesson or the description itself) loses
``penalty`` of latent quality and says what it missed, which is what enrichment reads.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from armature_temporal.spec.fields import IDENTIFIER, StrList, _Model

__all__ = ["SIMULATE_DESCRIPTION", "NeededFact", "Pitfall", "StageSimulation"]

#: The description of ``Stage.simulate`` (kept here so the stage model stays short).
SIMULATE_DESCRIPTION = (
    "simulate provider only (real providers ignore it): the pitfalls a simulated model falls "
    "into on this stage unless the prompt carries their lesson; each hit lowers the output's "
    "latent quality and shows its symptom in the output; the facts a good answer needs, "
    "which cost quality when the prompt lacks them; and how much reasoning before acting "
    "(reason_first) raises it."
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
        description="The instruction that avoids the pitfall: present anywhere in the stage's "
        "prompt (its description, or a lesson compiled in; case-insensitive, whitespace "
        "normalised, verbatim: a paraphrase does not count).",
    )
    rate: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Chance that a run whose prompt lacks the lesson falls in.",
    )


class NeededFact(_Model):
    """A fact a good answer on this stage needs, and the inputs it is needed for."""

    id: str = Field(
        ..., pattern=IDENTIFIER.pattern, description="Identifier, unique within the stage."
    )
    fact: str = Field(
        ...,
        min_length=1,
        description="The fact's text; present in the prompt (case-insensitive, whitespace "
        "normalised), the answer knows it.",
    )
    when: StrList = Field(
        default_factory=list,
        description="Needed only when what was asked (the prompt's task and context, not "
        "the passages it was shown) has a word starting with one of these phrases; empty: "
        "always needed.",
    )
    penalty: float = Field(
        0.3,
        gt=0,
        le=1,
        description="Subtracted from the output's latent quality when the fact is needed and "
        "missing.",
    )
    symptom: str | None = Field(
        None,
        min_length=1,
        description="Text the output shows when it misses the fact (default: 'Missing "
        "information: <id in words>').",
    )

    @property
    def shown_symptom(self) -> str:
        return self.symptom or f"Missing information: {self.id.replace('_', ' ')}"


class StageSimulation(_Model):
    """``simulate:`` on a stage: the simulator's declared world for it."""

    pitfalls: list[Pitfall] = Field(
        default_factory=list,
        description="Mistakes the simulated model makes here unless the prompt has the lesson.",
    )
    facts: list[NeededFact] = Field(
        default_factory=list,
        description="Facts a good answer needs (retrieval puts them in the prompt); each one "
        "needed and missing costs its penalty and shows its symptom.",
    )
    reasoning_gain: float = Field(
        0.0,
        ge=0,
        le=1,
        description="How much reasoning before acting helps here: an answer whose prompt "
        "carries the private reasoning of a reason_first call has its latent quality raised by "
        "this much (clipped to 1), before pitfall and fact penalties; 0 (default): reasoning "
        "only costs (its call's tokens and latency).",
    )

    @model_serializer(mode="wrap")
    def _without_unused(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a stage without facts or reasoning_gain keeps its spec and plan hashes
        data: dict[str, Any] = handler(self)
        for unused in ("facts", "reasoning_gain"):
            if not data.get(unused):
                data.pop(unused, None)
        return data

    @model_validator(mode="after")
    def _unique_ids(self) -> StageSimulation:
        seen: set[str] = set()
        ids = [("pitfall", p.id) for p in self.pitfalls] + [("fact", f.id) for f in self.facts]
        for kind, id_ in ids:
            if id_ in seen:
                raise ValueError(
                    f"{kind} id {id_!r} appears twice; give each pitfall and fact its own id"
                )
            seen.add(id_)
        return self
