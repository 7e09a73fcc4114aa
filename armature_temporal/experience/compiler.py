"""The prompt compiler of the heuristics memory: which lessons a stage's prompt carries, and the
block they go in.

:func:`select_lessons` ranks the promoted lessons of a stage by relevance (cosine similarity of
the lesson's embedding to the task's) × trust × a sample of the lesson's utility posterior
(Beta(alpha, beta): the rewards of the stages it was in, as the bandits sample their arms), and
takes them greedily, best first, while the block stays within the token budget. Pure: the
randomness comes in as ``rng``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from armature_temporal.experience.embeddings import cosine
from armature_temporal.experience.models import Heuristic

__all__ = [
    "LESSONS_HEADING",
    "RELEVANCE_FLOOR",
    "lesson_score",
    "lessons_section",
    "section_tokens",
    "select_lessons",
]

#: The first line of the Lessons block in the system message.
LESSONS_HEADING = "Lessons learned from earlier runs (apply those that fit this task):"
#: The least relevance a lesson counts with: one worded unlike the task ranks below those worded
#: like it, but its utility still decides among its peers.
RELEVANCE_FLOOR = 0.05


def lessons_section(lessons: Sequence[str]) -> str:
    """The Lessons block for these lesson texts ("" when there are none)."""
    if not lessons:
        return ""
    return "\n".join([LESSONS_HEADING, *(f"- {' '.join(text.split())}" for text in lessons)])


def section_tokens(lessons: Sequence[str]) -> int:
    """The size of the block in tokens, counted as characters / 4 (rounded up)."""
    return math.ceil(len(lessons_section(lessons)) / 4)


def lesson_score(
    lesson: Heuristic, task_vector: Sequence[float] | None, rng: random.Random
) -> float:
    """relevance × trust × a Beta(alpha, beta) sample of the lesson's utility. Relevance is
    the cosine of the two embeddings (at least :data:`RELEVANCE_FLOOR`), 1.0 when either is
    missing or they differ in size."""
    relevance = 1.0
    vector = lesson.embedding
    if task_vector is not None and vector is not None and len(vector) == len(task_vector):
        relevance = max(RELEVANCE_FLOOR, min(1.0, cosine(task_vector, vector)))
    return relevance * lesson.trust * rng.betavariate(lesson.alpha, lesson.beta)


def select_lessons(
    candidates: Sequence[Heuristic],
    task_vector: list[float] | None,
    *,
    top_k: int,
    token_budget: int,
    rng: random.Random,
) -> list[Heuristic]:
    """The lessons a prompt carries, best first: at most ``top_k`` promoted ones, chosen greedily
    by :func:`lesson_score` while :func:`lessons_section` of those chosen stays within
    ``token_budget`` tokens (one that does not fit is passed over for a shorter one). The same
    ``rng`` state gives the same choice: candidates are sampled in id order."""
    promoted = sorted((h for h in candidates if h.status == "promoted"), key=lambda h: h.id)
    scored = [(lesson_score(h, task_vector, rng), h) for h in promoted]
    scored.sort(key=lambda pair: (-pair[0], pair[1].id))
    chosen: list[Heuristic] = []
    for _, lesson in scored:
        if len(chosen) >= top_k:
            break
        if section_tokens([*(h.text for h in chosen), lesson.text]) <= token_budget:
            chosen.append(lesson)
    return chosen
