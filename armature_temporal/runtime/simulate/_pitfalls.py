"""The simulator's declared world beyond one tier's knobs: pitfalls, their symptoms, and the
noise of a judge that scores the output it judges.

A prompt's words act on an output's latent quality here and only here (:func:`falls_into`:
a prompt carrying a pitfall's lesson avoids the pitfall; :func:`missing_facts`: a prompt
lacking a needed fact costs its penalty), and a judge's score reads the latent
quality of what it judges plus :func:`judge_noise_sd` noise, never words: text addressed to a
judge, in any prompt or output, moves neither (the README's "Judges read quality, not
words")."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from armature_temporal.runtime.simulate._values import SENTENCE_KEYS, conforms
from armature_temporal.runtime.simulate._words import rng_for
from armature_temporal.spec.simulation import NeededFact, Pitfall

__all__ = [
    "falls_into",
    "judge_noise_sd",
    "lesson_present",
    "missing_facts",
    "normalised",
    "simulated_citation",
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
    """Whether the prompt carries the lesson: a verbatim substring once both are lower-cased
    and whitespace-collapsed (:func:`normalised`). ``prompt`` is every message of the call
    joined, so the stage's own description counts as much as a compiled lesson; a paraphrase
    does not."""
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


def missing_facts(
    prompt: str, facts: Sequence[NeededFact], asked: str | None = None
) -> list[NeededFact]:
    """The facts this call needs and its prompt lacks. A fact is needed when what was asked
    (``asked``: the prompt's user messages less the passages they were shown; None: the
    prompt) has a word starting with one of its ``when`` phrases (or it has none), and known
    when the prompt
    carries its text; both read text alone (no coin), so paired runs differ only where one
    prompt carries a fact the other lacks — a passage that merely mentions a topic does not
    make its fact needed."""
    text = normalised(prompt)
    question = text if asked is None else normalised(asked)
    return [
        fact
        for fact in facts
        if (not fact.when or any(_mentions(question, w) for w in fact.when))
        and normalised(fact.fact) not in text
    ]


def _mentions(text: str, phrase: str) -> bool:
    """Whether ``text`` (normalised) has ``phrase`` at the start of a word: ``ship`` in
    "shipping", not in "relationship"."""
    return re.search(r"\b" + re.escape(normalised(phrase)), text) is not None


#: A passage's reference as the Knowledge block lists it.
_LISTED_REF = re.compile(r"^\[(knowledge:[^\]\n]+#\d+)\]", re.M)


def simulated_citation(seed: str, prompt: str, quality: float) -> str | None:
    """The citation a simulated answer makes when its prompt asks for citations (None when it
    does not): the best listed passage, or — with probability ``(1 - quality) / 2``, its own
    coin keyed by the seed — a made-up reference to a passage it was not shown (the same
    source, a chunk number past the listed ones), the failure a citation check catches."""
    from armature_temporal.knowledge.citing import CITE_INSTRUCTION

    if CITE_INSTRUCTION not in prompt:
        return None
    listed = _LISTED_REF.findall(prompt)
    if not listed:
        return None
    if rng_for(f"{seed}/cite").random() < (1.0 - quality) / 2:
        source = listed[0].rsplit("#", 1)[0]
        return f"Source: [{source}#{1000 + len(listed)}]"
    return f"Source: [{listed[0]}]"


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
