"""The heuristics-memory activities of the interpreter: ``load_lessons`` picks the lessons one
LLM stage execution carries (the prompt compiler over the stage's promoted heuristics, or exactly
the ids a run was given), ``reward_lessons`` credits them with the stage's outcome and retires
those that do not earn their place. Both are local activities (short database calls) and both
are idempotent under retry (a reward counts once per lesson and key)."""

from __future__ import annotations

import asyncio
import random
from functools import lru_cache

from temporalio import activity

from activities.traces import store_for
from armature_temporal.experience.compiler import select_lessons
from armature_temporal.experience.embeddings import Embedder, get_embedder
from armature_temporal.experience.gate import prompt_lessons
from armature_temporal.experience.models import Heuristic, HeuristicError
from armature_temporal.runtime.models import Lessons, LessonsQuery, LessonsReward
from armature_temporal.store.engine import database_url

__all__ = ["load_lessons", "reward_lessons"]

#: The characters of the task text that are embedded (the start of the rendered prompt).
TASK_CHARS = 4000


@lru_cache(maxsize=4)
def _embedder(model: str | None) -> Embedder:
    """One embedder per model name per worker process (a local model loads once)."""
    return get_embedder(model)


def _in_scope(h: Heuristic, query: LessonsQuery) -> bool:
    return h.spec_name == query.spec_name and h.stage_id in (None, query.stage_id)


def _choose(query: LessonsQuery, candidates: list[Heuristic]) -> Lessons:
    """The prompt compiler's choice among the stage's promoted heuristics."""
    embedder = _embedder(query.embedding_model)
    # Vectors from another model do not compare: embed those lessons again (not stored).
    stale = [h for h in candidates if h.embedding is None or h.embedding_model != embedder.name]
    vectors = embedder.embed([query.task_text[:TASK_CHARS], *(h.text for h in stale)])
    fresh = {h.id: v for h, v in zip(stale, vectors[1:], strict=True)}
    candidates = [
        h.model_copy(update={"embedding": fresh[h.id]}) if h.id in fresh else h for h in candidates
    ]
    chosen = select_lessons(
        candidates,
        vectors[0],
        top_k=query.top_k,
        token_budget=query.token_budget,
        rng=random.Random(query.seed),
    )
    return Lessons(
        ids=[h.id for h in chosen], texts=[h.text for h in chosen], embedder=embedder.name
    )


def _load(query: LessonsQuery) -> Lessons:
    store = store_for(database_url())
    if query.only_ids is not None:
        found = {i: store.heuristic(i) for i in dict.fromkeys(query.only_ids)}
        asked = [h for h in found.values() if h is not None and _in_scope(h, query)]
        given, refused = prompt_lessons(asked, verification=query.verification, judge=query.judge)
        return Lessons(
            ids=[h.id for h in given],
            texts=[h.text for h in given],
            missing=[i for i, h in found.items() if h is None],
            refused=[f"{r.heuristic_id}: {r.reason}" for r in refused],
        )
    if query.judge:
        return Lessons()
    candidates, refused = prompt_lessons(
        [
            h
            for h in store.heuristics(query.spec_name, stage_id=query.stage_id, status="promoted")
            if _in_scope(h, query)
        ],
        verification=query.verification,
        judge=False,
    )
    noted = [f"{r.heuristic_id}: {r.reason}" for r in refused]
    if not candidates:
        return Lessons(refused=noted)
    return _choose(query, candidates).model_copy(update={"refused": noted})


@activity.defn(name="load_lessons")
async def load_lessons(query: LessonsQuery) -> Lessons:
    """The lessons of one LLM stage execution, in prompt order: with ``only_ids`` those of them
    scoped to the spec and stage that :func:`prompt_lessons` lets in (unknown ids listed as
    missing, the others as refused), else at most ``top_k`` promoted ones within
    ``token_budget`` (:func:`select_lessons`); none for a judge stage."""
    return await asyncio.to_thread(_load, query)  # the store and the embedder may block


def _reward(reward: LessonsReward) -> int:
    store = store_for(database_url())
    ids = list(dict.fromkeys(reward.ids))
    new = store.reward_heuristics(ids, reward.reward, key=reward.key, at=reward.at)
    for lesson_id in ids:
        h = store.heuristic(lesson_id)
        if h is None or h.status != "promoted" or h.uses < reward.min_uses:
            continue
        mean = h.utility
        if mean >= reward.retire_below:
            continue
        try:
            store.set_heuristic_status(
                lesson_id,
                "retired",
                by="utility",
                reason=f"posterior mean utility {mean:.3f} is under retire_below "
                f"{reward.retire_below:g} after {h.uses} uses",
                figures={"alpha": h.alpha, "beta": h.beta, "uses": h.uses, "mean": mean},
            )
        except HeuristicError:
            # Another run (or a person) changed its status first: nothing left to retire.
            again = store.heuristic(lesson_id)
            if again is None or again.status == "promoted":
                raise
    return new


@activity.defn(name="reward_lessons")
async def reward_lessons(reward: LessonsReward) -> int:
    """Reward the lessons a stage carried (alpha += r, beta += 1 - r, once per lesson and key)
    and retire a promoted one whose posterior mean is under ``retire_below`` after
    ``min_uses`` uses (by ``utility``, figures alpha/beta/uses). Returns how many were new."""
    return await asyncio.to_thread(_reward, reward)
