"""Reason before acting (``reason_first``), the pure parts: the spec fields and what they
compile to, where the private reasoning goes in a call's messages, and the simulator's
declared ``reasoning_gain``."""

from __future__ import annotations

import asyncio

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.runtime.llm import complete
from armature_temporal.runtime.reasoning import (
    REASONING_OPEN,
    with_reasoning,
    without_reasoning,
)
from armature_temporal.runtime.simulate import simulate_completion
from armature_temporal.spec.compiler import canonical_json
from armature_temporal.spec.roles import DEFAULT_REASONING_PROMPT
from armature_temporal.spec.simulation import Pitfall
from tests.fakes import plan_from

SPEC = """\
name: rlp
model_tiers:
  small: {provider: simulate}
  large: {provider: simulate}
stages:
  - id: s
    role: {name: S, description: "Do it.", model_tier: small ROLE}
    arms:
      - {arm_id: plain, reason_first: false}
      - {arm_id: inherit}
      - {arm_id: deep, reason_first: true, reasoning_tier: large, reasoning_prompt: "Think."}
"""


def _arms(role_extra: str = "") -> dict[str, object]:
    plan = plan_from(SPEC.replace(" ROLE", role_extra))
    return {a.arm_id: a.reasoning for a in plan.stage("s").arms}


def test_an_arm_reasons_first_or_inherits_the_roles_choice() -> None:
    arms = _arms()
    assert arms["plain"] is None and arms["inherit"] is None
    deep = arms["deep"]
    assert deep is not None and (deep.tier, deep.prompt) == ("large", "Think.")
    arms = _arms(", reason_first: true, reasoning_tier: small")
    inherited = arms["inherit"]
    assert inherited is not None and inherited.tier == "small"
    assert inherited.prompt == DEFAULT_REASONING_PROMPT
    assert arms["plain"] is None  # an arm's false overrides the role's true


def test_a_plan_without_reasoning_keeps_its_bytes() -> None:
    plan = plan_from(
        SPEC.replace(" ROLE", "").replace(
            "      - {arm_id: deep, reason_first: true, reasoning_tier: large, reasoning_prompt: "
            '"Think."}\n',
            "",
        )
    )
    assert "reasoning" not in canonical_json(plan.model_dump(mode="json"))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("reasoning_tier: large", "reasoning_tier: lage", "unknown tier 'lage'"),
        ("reason_first: true, ", "", "add reason_first: true or remove reasoning_tier"),
        ("small ROLE", "small, reasoning_prompt: Hm", "add reason_first: true or remove"),
    ],
)
def test_reasoning_fields_are_checked(old: str, new: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        plan_from(SPEC.replace(old, new).replace(" ROLE", ""))


def test_reward_cost_needs_arms_rewarded_auto() -> None:
    spec = """\
name: c
stages:
  - id: s
    role: {name: S, description: "Do it."}
    reward_cost_per_1k_tokens: 0.5
"""
    with pytest.raises(SpecError, match="reward_cost_per_1k_tokens lowers the auto reward"):
        plan_from(spec)


def test_the_reasoning_follows_the_task_and_is_taken_out_whole() -> None:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Task."}]
    asked = with_reasoning(messages, request="Think first.")
    assert asked[-1]["content"] == "Task.\n\nThink first." and messages[-1]["content"] == "Task."
    answered = with_reasoning(messages, reasoning="step 1, step 2")
    assert REASONING_OPEN in answered[-1]["content"]
    assert without_reasoning(answered[-1]["content"]) == "Task."
    assert with_reasoning(messages) is messages


def _sim(prompt: str, gain: float, pitfalls: tuple[Pitfall, ...] = ()) -> float:
    return simulate_completion(
        seed="x/1",
        prompt=prompt,
        output_mode="text",
        output_schema=None,
        role_type="worker",
        valid_rate=1.0,
        quality=0.5,
        pitfalls=pitfalls,
        reasoning_gain=gain,
    ).quality


def test_reasoning_gain_raises_the_same_draw_by_the_gain() -> None:
    assert _sim("Task.", 0.2) - _sim("Task.", 0.0) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="reasoning_gain must be between 0 and 1"):
        _sim("Task.", 1.5)


def test_reasoning_text_carries_no_lesson_and_costs_its_tokens() -> None:
    """A reasoning section that happens to state a pitfall's lesson does not avoid it: only
    reasoning_gain acts; its words still count as prompt tokens."""
    tier = plan_from("name: t\nstages:\n  - id: s\n    role: {name: S, description: x}\n").tiers[
        "small"
    ]
    pitfall = Pitfall(id="tax", penalty=0.3, symptom="No tax.", lesson="Add the tax.", rate=1.0)
    plain = [{"role": "user", "content": "Total it."}]
    reasoned = with_reasoning(plain, reasoning="I must remember: add the tax. " * 20)

    def call(messages: list[dict[str, str]], gain: float) -> tuple[float, int, list[str]]:
        done = asyncio.run(
            complete(
                tier,
                messages,
                seed="s",
                role_type="worker",
                output_mode="text",
                output_schema=None,
                pitfalls=(pitfall,),
                reasoning_gain=gain,
            )
        )
        assert done.simulated_quality is not None
        return done.simulated_quality, done.prompt_tokens, done.pitfalls_hit

    q0, t0, hit0 = call(plain, 0.0)
    q1, t1, hit1 = call(reasoned, 0.1)
    assert hit0 == hit1 == ["tax"]
    assert q1 - q0 == pytest.approx(0.1)
    assert t1 > t0 + 100
