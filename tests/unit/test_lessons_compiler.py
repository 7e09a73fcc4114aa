"""The prompt compiler of the heuristics memory (select_lessons, lessons_section), the Lessons
block build_messages puts in the system message, and the spec's ``experience:`` section."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.experience.compiler import (
    LESSONS_HEADING,
    lessons_section,
    section_tokens,
    select_lessons,
)
from armature_temporal.experience.models import Heuristic
from armature_temporal.runtime.prompts import build_messages
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text

NOW = "2026-12-01T00:00:00+00:00"


def lesson(hid: str, text: str | None = None, **fields: Any) -> Heuristic:
    values: dict[str, Any] = {
        "id": hid,
        "spec_name": "demo",
        "stage_id": "answer",
        "kind": "strategic",
        "text": text or f"Lesson {hid}: check the units before answering.",
        "status": "promoted",
        "source": "distilled",
        "provenance": ["run-1"],
        "created_at": NOW,
        "updated_at": NOW,
    }
    values.update(fields)
    return Heuristic(**values)


def pick(candidates: list[Heuristic], vector: list[float] | None = None, **kw: Any) -> list[str]:
    kw.setdefault("top_k", 3)
    kw.setdefault("token_budget", 300)
    kw.setdefault("rng", random.Random("seed"))
    return [h.id for h in select_lessons(candidates, vector, **kw)]


def test_only_promoted_lessons_are_selected() -> None:
    statuses = ["candidate", "quarantined", "promoted", "rejected", "retired"]
    found = pick([lesson(f"h-{s}", status=s) for s in statuses], top_k=5)
    assert found == ["h-promoted"]


def test_top_k_bounds_the_lessons() -> None:
    many = [lesson(f"h-{n}") for n in range(10)]
    assert len(pick(many, top_k=2)) == 2
    assert len(pick(many, top_k=7, token_budget=8000)) == 7


def test_token_budget_bounds_the_block_and_a_shorter_lesson_fills_the_room() -> None:
    long = lesson("h-long", "x" * 400, alpha=50.0, beta=1.0)  # sampled best: ranks first
    short = [lesson(f"h-s{n}", f"Short lesson {n}.", alpha=1.0, beta=50.0) for n in range(3)]
    found = pick([long, *short], token_budget=40)
    assert "h-long" not in found  # 400 characters do not fit in 40 tokens
    assert found and set(found) <= {"h-s0", "h-s1", "h-s2"}
    texts = [
        h.text
        for h in select_lessons(
            [long, *short], None, top_k=3, token_budget=40, rng=random.Random(1)
        )
    ]
    assert section_tokens(texts) <= 40
    assert pick([long, *short], token_budget=8000)[0] == "h-long"


def test_relevance_orders_lessons_like_the_task_first() -> None:
    near = lesson("h-near", embedding=[1.0, 0.0], alpha=5.0, beta=5.0)
    far = lesson("h-far", embedding=[0.0, 1.0], alpha=5.0, beta=5.0)
    firsts = Counter(
        pick([far, near], [0.98, 0.2], top_k=1, rng=random.Random(n))[0] for n in range(50)
    )
    assert firsts["h-near"] == 50
    # Without a task vector relevance is 1.0 for both: utility alone decides, sometimes each.
    unvectored = Counter(
        pick([far, near], None, top_k=1, rng=random.Random(n))[0] for n in range(50)
    )
    assert unvectored["h-near"] < 50 and unvectored["h-far"] > 0


def test_sampled_utility_favours_lessons_that_earned_it() -> None:
    good = lesson("h-good", alpha=30.0, beta=3.0)
    bad = lesson("h-bad", alpha=3.0, beta=30.0)
    firsts = Counter(pick([bad, good], top_k=1, rng=random.Random(n))[0] for n in range(100))
    assert firsts["h-good"] >= 95


def test_the_same_seed_gives_the_same_choice_whatever_the_candidates_order() -> None:
    many = [lesson(f"h-{n}", alpha=2.0, beta=2.0) for n in range(8)]
    first = pick(many, rng=random.Random("run-1/answer/1"))
    assert pick(list(reversed(many)), rng=random.Random("run-1/answer/1")) == first
    seeds = {tuple(pick(many, rng=random.Random(f"run-{n}"))) for n in range(20)}
    assert len(seeds) > 1  # the utility is sampled, not sorted


def test_lessons_section_lists_the_lessons_under_its_heading() -> None:
    assert lessons_section([]) == ""
    block = lessons_section(["Check the units.", "Quote  the\nsource."])
    assert block.splitlines() == [LESSONS_HEADING, "- Check the units.", "- Quote the source."]


def test_build_messages_puts_lessons_in_the_system_message() -> None:
    common: dict[str, Any] = {
        "role_type": "worker",
        "role_name": "A",
        "prompt_template": "Answer {{ q }}",
        "variables": {"q": "why"},
        "mission": "",
        "output_mode": "text",
        "output_schema": None,
    }
    plain = build_messages(**common)
    taught = build_messages(**common, lessons=["Check the units."])
    assert LESSONS_HEADING not in plain[0]["content"]
    assert taught[0]["content"].endswith(lessons_section(["Check the units."]))
    assert taught[1] == plain[1]  # the task itself is unchanged


SPEC = """\
name: demo
model_tiers:
  small: {provider: simulate}
  big: {provider: simulate}
stages:
  - id: answer
    role: {name: A, description: answer}
"""


def test_experience_compiles_with_the_distiller_tier_resolved() -> None:
    plan = compile_spec(load_spec_text(SPEC + "experience: {top_k: 5}\n"))
    assert plan.experience is not None
    assert plan.experience.top_k == 5 and plan.experience.distiller_tier == "big"
    assert plan.experience.critic_for("big", plan.tier_ladder) == "small"
    assert compile_spec(load_spec_text(SPEC)).experience is None


@pytest.mark.parametrize("field", ["distiller_tier", "critic_tier"])
def test_experience_tiers_must_be_defined(field: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(SPEC + f"experience: {{{field}: bgi}}\n", "spec.yaml")
    text = str(info.value)
    assert f"experience.{field}" in text and "unknown tier 'bgi'" in text
    assert "['small', 'big']" in text and "did you mean 'big'" in text


def test_experience_bounds_and_schedule_are_checked() -> None:
    with pytest.raises(SpecError, match="top_k"):
        load_spec_text(SPEC + "experience: {top_k: 0}\n", "spec.yaml")
    with pytest.raises(SpecError, match=r"experience\.schedule"):
        load_spec_text(SPEC + "experience: {schedule: 'every day'}\n", "spec.yaml")
