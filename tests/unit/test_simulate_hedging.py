"""The simulator's declared hedging (tier ``hedge_rate``), stated confidence and logprobs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from armature_temporal.runtime.confidence import confidence_of, hedge_confidence
from armature_temporal.runtime.parsing import parse_output
from armature_temporal.runtime.simulate import simulate_completion
from armature_temporal.runtime.simulate._confidence import (
    HEDGE_PENALTY,
    LOGPROB_BASE,
    LOGPROB_SLOPE,
)

STATED = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["answer", "confidence"],
}
PROMPT = "Summarise the quarterly revenue of the northern warehouse for the board."


def sim(seed: str, **kwargs: Any) -> Any:
    args: dict[str, Any] = {
        "seed": seed,
        "prompt": PROMPT,
        "output_mode": "text",
        "output_schema": None,
        "role_type": "worker",
        "valid_rate": 1.0,
        "quality": 0.8,
    }
    return simulate_completion(**{**args, **kwargs})


def confidence(out: Any, schema: dict[str, Any] | None = None, mode: str = "text") -> Any:
    parsed = parse_output(out.text, mode, schema)  # type: ignore[arg-type]
    output = {"content": parsed.value} if mode == "text" else parsed.value
    return confidence_of(text=out.text, output=output, schema=schema, logprobs=out.logprobs)


def test_hedge_rate_zero_never_hedges_and_one_always_does() -> None:
    assert not any(sim(f"s{i}").hedged for i in range(50))
    assert all(sim(f"s{i}", hedge_rate=1.0).hedged for i in range(50))


def test_a_hedged_output_loses_the_declared_penalty_and_carries_hedging_language() -> None:
    for i in range(30):
        plain, hedged = sim(f"p{i}"), sim(f"p{i}", hedge_rate=1.0)
        assert hedged.quality == pytest.approx(max(0.0, plain.quality - HEDGE_PENALTY))
        assert hedged.text.startswith(plain.text.rstrip())  # the same answer, and a hedge
        assert len(hedged.text) > len(plain.text)


def test_hedging_shares_its_coin_across_rates() -> None:
    low = {i for i in range(200) if sim(f"c{i}", hedge_rate=0.2).hedged}
    high = {i for i in range(200) if sim(f"c{i}", hedge_rate=0.6).hedged}
    assert low <= high
    assert 20 <= len(low) <= 60 and 90 <= len(high) <= 150


def test_hedged_simulated_text_gets_lower_confidence() -> None:
    outs = [sim(f"h{i}", hedge_rate=0.5) for i in range(200)]
    hedged = [confidence(o).value for o in outs if o.hedged]
    plain = [confidence(o).value for o in outs if not o.hedged]
    assert {confidence(o).source for o in outs} == {"hedging"}
    # Every hedged text is read as less sure than every plain one.
    assert max(hedged) < min(plain)


def test_hedged_json_states_a_lower_confidence() -> None:
    for i in range(30):
        plain = sim(f"j{i}", output_mode="json", output_schema=STATED)
        hedged = sim(f"j{i}", output_mode="json", output_schema=STATED, hedge_rate=1.0)
        a = confidence(plain, STATED, "json")
        b = confidence(hedged, STATED, "json")
        assert a.source == b.source == "stated"
        assert b.value < a.value
        # ... and its answer reads as hedged.
        assert hedge_confidence(hedged.text) < hedge_confidence(plain.text)


def test_stated_confidence_tracks_latent_quality() -> None:
    outs = [
        sim(f"q{i}", output_mode="json", output_schema=STATED, quality=q)
        for i in range(40)
        for q in (0.3, 0.9)
    ]
    values = [(o.quality, confidence(o, STATED, "json").value) for o in outs]
    low = [v for q, v in values if q < 0.5]
    high = [v for q, v in values if q > 0.75]
    assert sum(low) / len(low) + 0.3 < sum(high) / len(high)


def test_simulated_logprobs_follow_latent_quality_and_drop_when_hedged() -> None:
    assert sim("l0").logprobs is None  # only on request (tier logprobs: true)
    for i in range(30):
        plain = sim(f"l{i}", logprobs=True)
        hedged = sim(f"l{i}", logprobs=True, hedge_rate=1.0)
        assert all(v <= 0 for v in plain.logprobs)
        got = confidence(plain)
        assert got.source == "logprobs"
        expected = LOGPROB_BASE + LOGPROB_SLOPE * plain.quality
        assert math.isclose(got.value, expected, abs_tol=0.2)
        assert confidence(hedged).value < got.value


SPEC = """\
name: hedgy
model_tiers:
  calm: {provider: simulate}
  shaky: {provider: simulate, hedge_rate: 1.0, logprobs: true}
stages:
  - id: s
    role: {name: S, description: "Describe the tides.", model_tier: calm}
"""


@pytest.mark.asyncio(loop_scope="session")
async def test_the_tier_fields_reach_the_simulator_through_the_plan() -> None:
    from armature_temporal.runtime.llm import complete
    from tests.fakes import plan_from

    plan = plan_from(SPEC)
    assert plan.tiers["shaky"].hedge_rate == 1.0 and plan.tiers["shaky"].logprobs is True
    args: dict[str, Any] = {
        "seed": "x/s/1",
        "role_type": "worker",
        "output_mode": "text",
        "output_schema": None,
    }
    messages = [{"role": "user", "content": PROMPT}]
    calm = await complete(plan.tiers["calm"], messages, **args)
    shaky = await complete(plan.tiers["shaky"], messages, **args)
    assert calm.logprobs is None and shaky.logprobs
    assert shaky.simulated_quality == pytest.approx(
        max(0.0, (calm.simulated_quality or 0.0) - HEDGE_PENALTY)
    )


def test_hedge_rate_is_a_simulate_only_field() -> None:
    from armature_temporal.errors import SpecError
    from tests.fakes import plan_from

    with pytest.raises(SpecError, match="hedge_rate only apply to provider 'simulate'"):
        plan_from(
            SPEC.replace("provider: simulate, hedge_rate", "provider: openai, model: m, hedge_rate")
        )
