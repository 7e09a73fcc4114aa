"""Wording under the simulator's ground truth: a pitfall is avoided when the stage's prompt
carries the instruction its lesson states, whether a lesson or the stage's own description
puts it there, and the simulated refiner states that instruction only when shown the symptom."""

from __future__ import annotations

import json
from typing import Any

from armature_temporal.runtime.prompts import build_messages
from armature_temporal.runtime.simulate import REFINER_MARKER, simulate_completion, simulate_refiner
from armature_temporal.runtime.simulate._refiner import FACTS_CLOSE, FACTS_OPEN, GENERIC_WORDINGS
from armature_temporal.spec.simulation import Pitfall

UNITS = Pitfall(
    id="units",
    penalty=0.3,
    rate=1.0,
    symptom="The answer gives no units.",
    lesson="State the units of every number.",
)
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def _prompt(description: str, lessons: tuple[str, ...] = ()) -> str:
    messages = build_messages(
        role_type="worker",
        role_name="Drafter",
        prompt_template=description,
        variables={"question": "the pump's flow"},
        mission="",
        output_mode="json",
        output_schema=SCHEMA,
        lessons=lessons,
    )
    return "\n".join(str(m["content"]) for m in messages)  # what runtime/llm.py passes


def _hit(prompt: str, seed: str = "s") -> list[str]:
    return simulate_completion(
        seed=seed,
        prompt=prompt,
        output_mode="json",
        output_schema=SCHEMA,
        role_type="worker",
        valid_rate=1.0,
        quality=0.8,
        pitfalls=[UNITS],
    ).pitfalls_hit


def test_a_lesson_in_the_description_avoids_the_pitfall_as_a_compiled_lesson_does() -> None:
    plain = "Answer {{ question }}."
    assert _hit(_prompt(plain)) == ["units"]
    assert _hit(_prompt(plain, lessons=(UNITS.lesson,))) == []  # heuristics memory's lesson
    worded = "Answer {{ question }}.\nstate the units of   every number."  # case, spaces aside
    assert _hit(_prompt(worded)) == []


def test_a_paraphrase_or_a_generic_rewording_does_not_avoid_the_pitfall() -> None:
    for text in ["Always give units for numbers.", *GENERIC_WORDINGS]:
        assert _hit(_prompt(f"Answer {{{{ question }}}}.\n{text}")) == ["units"], text


def test_the_description_fix_differs_from_the_plain_prompt_only_where_the_lesson_acts() -> None:
    rate = UNITS.model_copy(update={"rate": 0.5})
    for i in range(20):
        args: dict[str, Any] = {
            "seed": f"s{i}",
            "output_mode": "json",
            "output_schema": SCHEMA,
            "role_type": "worker",
            "valid_rate": 0.9,
            "quality": 0.8,
            "pitfalls": [rate],
        }
        before = simulate_completion(prompt=_prompt("Answer {{ question }}."), **args)
        after = simulate_completion(
            prompt=_prompt("Answer {{ question }}.\n" + UNITS.lesson), **args
        )
        assert after.intended_valid == before.intended_valid
        assert after.pitfalls_hit == []
        if before.pitfalls_hit:  # only where the lesson acts, and by the declared penalty
            expected = min(1.0, before.quality + UNITS.penalty)
            assert abs(after.quality - expected) < 1e-9 or before.quality == 0.0
        else:
            assert after.quality == before.quality


def _refiner_prompt(draft_output: str, *, judge: float = 0.5, description: str = "Answer.") -> str:
    facts = {
        "k": 3,
        "ladder": ["frontier"],
        "surfaces": {
            "draft.description": description,
            "draft.model_tier": "frontier",
            "polish.description": "Polish.",
        },
        "stages": [
            {"stage": "draft", "runs": 10, "judge_score": judge, "first_try_rate": 1.0},
            {"stage": "polish", "runs": 10, "judge_score": judge, "first_try_rate": 1.0},
        ],
        "failures": ["low_judge:draft", "low_judge:polish"] if judge < 0.7 else [],
        "avoid": [],
    }
    return "\n".join(
        [
            f"{REFINER_MARKER} system",
            f"{FACTS_OPEN}{json.dumps(facts)}{FACTS_CLOSE}",
            "Worst runs:",
            "run r1: completed, HQS 0.40",
            f"  draft [frontier] completed output: {draft_output}",
            '  polish [frontier] completed output: {"text": "[simulated] fine."}',
        ]
    )


def _proposals(prompt: str, pitfalls: list[Pitfall]) -> dict[str, Any]:
    reply = json.loads(simulate_refiner(seed="r", prompt=prompt, quality=1.0, pitfalls=pitfalls))
    return {f"{p['stage']}.{p['surface']}": p["value"] for p in reply["proposals"]}


def test_the_simulated_refiner_states_the_lesson_in_the_description_when_shown_the_symptom() -> (
    None
):
    shown = _proposals(_refiner_prompt('{"answer": "x. The answer gives no units."}'), [UNITS])
    assert shown["draft.description"] == "Answer.\n" + UNITS.lesson + "\n"
    # polish is judged low too but shows no symptom: a generic rewording, no lesson
    assert shown["polish.description"].removeprefix("Polish.\n").strip() in GENERIC_WORDINGS
    assert UNITS.lesson not in shown["polish.description"]


def test_the_simulated_refiner_never_states_a_lesson_whose_symptom_it_was_not_shown() -> None:
    unseen = _proposals(_refiner_prompt('{"answer": "x."}'), [UNITS])
    assert all(UNITS.lesson not in str(v) for v in unseen.values())
    assert unseen["draft.description"].removeprefix("Answer.\n").strip() in GENERIC_WORDINGS
    # the symptom on another stage's line is that stage's evidence, not draft's
    elsewhere = _refiner_prompt('{"answer": "x."}').replace(
        '"fine.', '"fine. The answer gives no units.'
    )
    assert UNITS.lesson not in _proposals(elsewhere, [UNITS])["draft.description"]
    # no pitfalls handed over (a real spec's world unknown): nothing to state
    blind = _proposals(_refiner_prompt('{"answer": "The answer gives no units."}'), [])
    assert UNITS.lesson not in str(blind)


def test_the_simulated_refiner_does_not_repeat_a_lesson_the_description_carries() -> None:
    carried = _proposals(
        _refiner_prompt('{"answer": "The answer gives no units."}', description=UNITS.lesson),
        [UNITS],
    )
    assert carried["draft.description"].lower().count(UNITS.lesson.lower()) == 1
