"""The simulator's distiller and critic: what a learning loop can learn from simulated runs.

Both play by the declared world of :mod:`armature_temporal.spec.simulation`. The distiller
states a pitfall's lesson only when it was shown the pitfall's symptom in a trajectory (it
cannot know of a mistake it never saw), and sometimes adds a harmless lesson that helps
nothing, so a replay test has something to reject. The critic scores an output near its
latent quality, with the same declared noise as a simulated judge, and quotes its evidence
from the output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.simulate._pitfalls import judge_noise_sd, normalised
from armature_temporal.runtime.simulate._words import rng_for
from armature_temporal.spec.simulation import Pitfall

__all__ = [
    "USELESS_LESSONS",
    "USELESS_LESSON_RATE",
    "SimulatedCritique",
    "SimulatedLesson",
    "simulate_critique",
    "simulate_lessons",
]

#: Probability that a simulated distillation also states a generic lesson that helps nothing.
USELESS_LESSON_RATE = 0.3
#: The harmless, useless lessons it draws from (no pitfall is avoided by them).
USELESS_LESSONS = (
    "Re-read the task before answering.",
    "Keep the answer focused on what was asked.",
    "Double-check the wording of the final answer.",
)
_SPAN = 80  # characters of output a critique quotes when it finds no symptom


class SimulatedLesson(BaseModel):
    """One lesson a simulated distiller states.

    Attributes:
        text: The lesson, as it would go into a prompt.
        kind: ``procedural`` for a pitfall's lesson, ``strategic`` for a generic one.
        pitfall_id: The pitfall the lesson avoids; None for a useless one.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    kind: Literal["strategic", "procedural", "tool_tip"]
    pitfall_id: str | None = None


class SimulatedCritique(BaseModel):
    """A simulated critic's verdict on one output.

    Attributes:
        score: 0 (worthless) to 10 (perfect).
        evidence: Quotes from the output (substrings of it) that the score rests on.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    score: float = Field(ge=0.0, le=10.0)
    evidence: list[str] = Field(default_factory=list)


def _check_quality(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(
            f"{name} must be between 0 and 1, got {value!r}; pass the simulate tier's quality"
        )


def simulate_lessons(
    *,
    seed: str,
    trajectories: Sequence[str],
    pitfalls: Sequence[Pitfall],
    distiller_quality: float,
) -> list[SimulatedLesson]:
    """Distil lessons from trajectories, deterministically in ``seed``.

    A pitfall's lesson is stated only if its symptom occurs (case-insensitive, whitespace
    normalised) in at least one trajectory; a distiller of quality q notices a shown symptom
    with probability ``min(1, 0.5 + q)``. With probability :data:`USELESS_LESSON_RATE` a
    generic lesson that avoids no pitfall comes too.

    Args:
        seed: Identifies the distillation (e.g. the learning round and stage).
        trajectories: Output texts of earlier runs of the stage.
        pitfalls: The stage's declared pitfalls (``simulate.pitfalls``).
        distiller_quality: The distiller tier's ``quality`` in [0, 1].

    Returns:
        The lessons, pitfall lessons first in declaration order.

    Raises:
        ValueError: ``distiller_quality`` is outside [0, 1].
    """
    _check_quality("distiller_quality", distiller_quality)
    shown = [normalised(t) for t in trajectories]
    notice = min(1.0, 0.5 + distiller_quality)
    lessons: list[SimulatedLesson] = []
    for pitfall in pitfalls:
        symptom = normalised(pitfall.symptom)
        if not any(symptom in t for t in shown):
            continue
        if rng_for(f"{seed}/notice/{pitfall.id}").random() < notice:
            lessons.append(
                SimulatedLesson(text=pitfall.lesson, kind="procedural", pitfall_id=pitfall.id)
            )
    useless = rng_for(f"{seed}/useless")
    if useless.random() < USELESS_LESSON_RATE:
        lessons.append(SimulatedLesson(text=useless.choice(USELESS_LESSONS), kind="strategic"))
    return lessons


def simulate_critique(
    *,
    seed: str,
    output_text: str,
    latent_quality: float | None,
    pitfalls: Sequence[Pitfall],
    critic_quality: float,
) -> SimulatedCritique:
    """Score one output 0–10 with evidence, deterministically in ``seed``.

    ``score = 10 * clip(latent + N(0, sd))`` with the judge noise
    ``sd = 0.25 * (1 - critic_quality) + 0.02``. Without a latent quality (a real tier's
    output) the critic starts from 0.8 less the penalties of the symptoms it sees. The
    evidence quotes each symptom found in the output, else a short span of the output.

    Raises:
        ValueError: ``critic_quality`` or ``latent_quality`` is outside [0, 1].
    """
    _check_quality("critic_quality", critic_quality)
    if latent_quality is not None:
        _check_quality("latent_quality", latent_quality)
    quotes = [q for q in (_quote(output_text, p.symptom) for p in pitfalls) if q is not None]
    if latent_quality is None:
        seen = [p for p in pitfalls if _quote(output_text, p.symptom) is not None]
        base = 0.8 - sum(p.penalty for p in seen)
    else:
        base = latent_quality
    noisy = base + rng_for(f"{seed}/critic").gauss(0.0, judge_noise_sd(critic_quality))
    score = round(10.0 * min(1.0, max(0.0, noisy)), 3)
    if not quotes and output_text.strip():
        span = output_text.strip()[:_SPAN]
        quotes = [span]
    return SimulatedCritique(score=score, evidence=quotes)


def _quote(text: str, symptom: str) -> str | None:
    """The span of ``text`` that is ``symptom`` (case and whitespace aside), or None."""
    words = symptom.split()
    if not words:
        return None
    pattern = r"\s+".join(re.escape(w) for w in words)
    found = re.search(pattern, text, re.IGNORECASE)
    return found.group(0) if found else None
