"""One simulated completion: the validity coin, the latent quality and the output they shape."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.simulate._confidence import (
    HEDGE_PENALTY,
    hedge_sentence,
    hedges,
    simulated_logprobs,
    with_stated_confidence,
)
from armature_temporal.runtime.simulate._defects import invalid_text
from armature_temporal.runtime.simulate._output import render, text_answer, unfinished_reasoning
from armature_temporal.runtime.simulate._pitfalls import (
    falls_into,
    judge_noise_sd,
    missing_facts,
    simulated_citation,
    symptom_sentence,
    with_symptoms,
)
from armature_temporal.runtime.simulate._values import (
    ANY_OBJECT,
    Generator,
    with_criterion_scores,
    with_score,
)
from armature_temporal.runtime.simulate._words import rng_for, words_of
from armature_temporal.spec.simulation import NeededFact, Pitfall

__all__ = ["QUALITY_CONCENTRATION", "SimulatedCompletion", "simulate_completion"]

#: Beta concentration of per-output quality around a tier's ``quality`` knob.
QUALITY_CONCENTRATION = 20.0


class SimulatedCompletion(BaseModel):
    """One simulated model response.

    Attributes:
        text: The raw output, as a model would return it.
        intended_valid: Whether the simulator meant this output to parse and match the schema
            (it draws the invalid ones on purpose, at rate ``1 - valid_rate``).
        quality: The output's latent quality in [0, 1]: the tier's Beta draw less the
            penalties of the pitfalls hit. A judge's ``score`` repeats it, unless the judge
            was given the quality of the output it judges.
        prompt_tokens: A rough token count of the prompt (characters / 4).
        completion_tokens: A rough token count of ``text`` (characters / 4).
        pitfalls_hit: Ids of the declared pitfalls this output fell into.
        facts_missing: Ids of the declared needed facts its prompt lacked.
        hedged: Whether the output hedged (the tier's ``hedge_rate``), losing
            ``HEDGE_PENALTY`` of its quality.
        logprobs: Per-token logprobs, when asked for (``logprobs=True``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    intended_valid: bool
    quality: float = Field(ge=0.0, le=1.0)
    prompt_tokens: int = Field(ge=1)
    completion_tokens: int = Field(ge=1)
    pitfalls_hit: list[str] = Field(default_factory=list)
    facts_missing: list[str] = Field(default_factory=list)
    hedged: bool = False
    logprobs: list[float] | None = None


def simulate_completion(
    *,
    seed: str,
    prompt: str,
    output_mode: Literal["text", "json", "guided_json"],
    output_schema: dict[str, Any] | None,
    role_type: Literal["worker", "orchestrator", "judge", "researcher"],
    valid_rate: float,
    quality: float,
    judged_quality: float | None = None,
    pitfalls: Sequence[Pitfall] = (),
    facts: Sequence[NeededFact] = (),
    asked: str | None = None,
    hedge_rate: float = 0.0,
    logprobs: bool = False,
    reasoning_gain: float = 0.0,
) -> SimulatedCompletion:
    """Simulate one completion, deterministically in ``seed``.

    Args:
        seed: Identifies the call, e.g. ``f"{run_id}/{stage}/{attempt}/{tier}"``.
        prompt: The rendered prompt; its words make up the output's strings.
        output_mode: ``text`` gives ``[simulated] …`` sentences; the JSON modes give JSON.
        output_schema: The JSON Schema valid output must match; None means any object.
        role_type: A ``judge`` puts a score in its ``score`` property (text: ``Score: x.``).
        valid_rate: Probability in [0, 1] that the output is valid.
        quality: Mean in [0, 1] of the per-output quality (a Beta draw, concentration
            :data:`QUALITY_CONCENTRATION`).
        judged_quality: For a judge: the latent quality of the output it judges; its score
            is then ``clip(judged_quality + N(0, sd))`` with
            ``sd = 0.25 * (1 - quality) + 0.02``. None: the score is the judge's own quality.
        pitfalls: The stage's declared pitfalls; each one whose lesson the prompt lacks is
            fallen into at its ``rate``, costing its ``penalty`` and showing its ``symptom``.
        facts: The stage's declared needed facts; each one needed and missing from the prompt
            costs its ``penalty`` and shows its symptom.
        asked: What was asked (the prompt without retrieved passages or tool results), which
            decides whether a fact is needed; None: the prompt.
        hedge_rate: Probability in [0, 1] that the output hedges: it loses
            :data:`HEDGE_PENALTY` of quality and carries a hedging sentence.
        logprobs: Also return per-token logprobs, declared from the latent quality.
        reasoning_gain: For an answer whose prompt carries a reason_first call's private
            reasoning: added to the quality draw (clipped to 1) before the penalties.

    Returns:
        The text, whether it was meant to be valid, its latent quality, the pitfalls hit and
        rough token counts.

    Raises:
        ValueError: ``valid_rate``, ``quality``, ``judged_quality`` or ``reasoning_gain`` is
            outside [0, 1].
    """
    knobs = [
        ("valid_rate", valid_rate),
        ("quality", quality),
        ("hedge_rate", hedge_rate),
        ("reasoning_gain", reasoning_gain),
    ]
    if judged_quality is not None:
        knobs.append(("judged_quality", judged_quality))
    for name, knob in knobs:
        if not 0.0 <= knob <= 1.0:
            raise ValueError(
                f"{name} must be between 0 and 1, got {knob!r}; fix the simulate tier's {name}"
            )
    rng = rng_for(seed)
    intended_valid = rng.random() < valid_rate
    dress = rng.random()
    content = random.Random(rng.getrandbits(64))
    drawn = _draw_quality(random.Random(rng.getrandbits(64)), quality)
    drawn = min(1.0, drawn + reasoning_gain)
    hit = falls_into(seed, prompt, pitfalls)
    missed = missing_facts(prompt, facts, asked)
    hedged = hedges(seed, hedge_rate)
    penalty = (
        sum(p.penalty for p in hit)
        + sum(f.penalty for f in missed)
        + (HEDGE_PENALTY if hedged else 0.0)
    )
    latent = min(1.0, max(0.0, drawn - penalty))
    score = latent
    if role_type == "judge" and judged_quality is not None:
        noise = rng_for(f"{seed}/judge-noise").gauss(0.0, judge_noise_sd(quality))
        score = min(1.0, max(0.0, judged_quality + noise))
    symptoms = [p.symptom for p in hit] + [f.shown_symptom for f in missed]
    citation = simulated_citation(seed, prompt, quality)
    if citation is not None:
        symptoms.append(citation)
    words = words_of(prompt)
    if hedged:
        symptoms.append(hedge_sentence(seed, words))
    if output_mode == "text":
        text = (
            text_answer(
                content, words, role_type, score, dress, [symptom_sentence(s) for s in symptoms]
            )
            if intended_valid
            else unfinished_reasoning(content, words)
        )
    else:
        schema = output_schema if output_schema is not None else ANY_OBJECT
        gen = Generator(content, words, schema)
        value = gen.valid_root()
        if role_type == "judge":
            value = with_score(value, schema, score)
            if judged_quality is not None:
                value = with_criterion_scores(
                    value, schema, seed, judged_quality, judge_noise_sd(quality)
                )
        value = with_stated_confidence(value, schema, seed, latent)
        value = with_symptoms(value, schema, symptoms)
        if intended_valid:
            text = render(value, dress, content, words)
        else:
            text = invalid_text(value, output_mode, output_schema, dress, content, words)
    return SimulatedCompletion(
        text=text,
        intended_valid=intended_valid,
        quality=latent,
        prompt_tokens=max(1, len(prompt) // 4),
        completion_tokens=max(1, len(text) // 4),
        pitfalls_hit=[p.id for p in hit],
        facts_missing=[f.id for f in missed],
        hedged=hedged,
        logprobs=simulated_logprobs(seed, latent, len(text) // 4) if logprobs else None,
    )


def _draw_quality(rng: random.Random, mean: float) -> float:
    if mean <= 0.0 or mean >= 1.0:
        return mean
    drawn = rng.betavariate(mean * QUALITY_CONCENTRATION, (1.0 - mean) * QUALITY_CONCENTRATION)
    return min(1.0, max(0.0, drawn))
