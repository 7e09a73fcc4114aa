"""The simulator's declared world beyond one tier's knobs: pitfalls, their symptoms, and the
noise of a judge that scores the output it judges.

A prompt's words act on an output's latent quality here and only here (:func:`falls_into`:
a prompt carrying a pitfall's lesson avoids the pitfall), and a judge's score reads the latent
quality of what it judges plus :func:`judge_noise_sd` noise, never words: text addressed to a
judge, in any prompt or output, moves neither (the README's "Judges read quality, not
words")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from armature_temporal.runtime.simulate._values import SENTENCE_KEYS, conforms
from armature_temporal.runtime.simulate._words import rng_for
from armature_temporal.spec.simulation import Pitfall

__all__ = [
    "falls_into",
    "judge_noise_sd",
    "lesson_present",
    "normalised",
    "symptom_sentence",
    "with_symptoms",
]


def judge_noise_sd(judge_quality: float) -> float:
    """The declared noise of a simulated judge (or critic) of tier quality q:
    ``0.25 * (1 - q) + 0.02`` — a frontier judge is nearly exact, a weak one is not."""
    return 0.25 * (1.0 - judge_quality) + 0.02


def normalised(text: str) -> str:
    """Lower case, runs of whitespace made one space: the form lessons and symptoms match in."""
    return " ".join(text.split()).lower()


def lesson_present(lesson: str, prompt: str) -> bool:
    """Whether the prompt carries the lesson (case-insensitive, whitespace normalised)."""
    return normalised(lesson) in normalised(prompt)


def falls_into(seed: str, prompt: str, pitfalls: Sequence[Pitfall]) -> list[Pitfall]:
    """The pitfalls this call falls into. Each has its own coin, from a stream keyed by the seed
    and the pitfall id (never by the prompt), so two calls with one seed share every coin and
    differ only where one prompt carries a lesson the other lacks."""
    hit = []
    for pitfall in pitfalls:
        coin = rng_for(f"{seed}/pitfall/{pitfall.id}").random()
        if coin < pitfall.rate and not lesson_present(pitfall.lesson, prompt):
            hit.append(pitfall)
    return hit


def symptom_sentence(symptom: str) -> str:
    """A symptom as a sentence of text output."""
    text = symptom.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."


def with_symptoms(value: Any, schema: Any, symptoms: Sequence[str]) -> Any:
    """``value`` with each symptom appended to one of its strings, keeping it schema-valid:
    a free-text field (``rationale``, ``summary``, …) first, else the first string that takes
    it. A symptom no string can take (lengths, enums) is left out of the value."""
    for symptom in symptoms:
        for path in sorted(_string_paths(value, ()), key=lambda p: not _free_text(p)):
            candidate = _appended(value, path, symptom_sentence(symptom))
            if conforms(candidate, schema):
                value = candidate
                break
    return value


def _free_text(path: tuple[Any, ...]) -> bool:
    keys = [k for k in path if isinstance(k, str)]
    return bool(keys) and SENTENCE_KEYS.search(keys[-1]) is not None


def _string_paths(value: Any, path: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    if isinstance(value, str):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _string_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _string_paths(v, (*path, i))]
    return []


def _appended(value: Any, path: tuple[Any, ...], sentence: str) -> Any:
    copied = json.loads(json.dumps(value))
    if not path:
        return f"{copied} {sentence}".strip()
    target = copied
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = f"{target[path[-1]]} {sentence}".strip()
    return copied
