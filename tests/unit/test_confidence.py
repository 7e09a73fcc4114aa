"""Confidence extraction: logprobs, stated confidence in its scales, and the hedge detector."""

from __future__ import annotations

import math

import pytest

from armature_temporal.runtime import confidence as conf
from armature_temporal.runtime.confidence import (
    Confidence,
    confidence_of,
    from_logprobs,
    hedge_confidence,
    stated_confidence,
)


def test_confidence_package_exports() -> None:
    assert sorted(conf.__all__) == [
        "Confidence",
        "ConfidenceSource",
        "confidence_of",
        "from_logprobs",
        "hedge_confidence",
        "stated_confidence",
    ]


def test_logprobs_give_the_geometric_mean_token_probability() -> None:
    got = confidence_of(text="Paris.", output=None, schema=None, logprobs=[-0.1, -0.3])
    assert got.source == "logprobs"
    assert got.value == pytest.approx(math.exp(-0.2))
    assert isinstance(got, Confidence)
    assert from_logprobs([]) is None
    assert from_logprobs(None) is None
    assert from_logprobs([float("-inf"), -0.5]) == pytest.approx(math.exp(-0.5))


def test_logprobs_win_over_a_stated_confidence() -> None:
    got = confidence_of(text="", output={"confidence": 0.1}, schema=None, logprobs=[-0.01])
    assert got.source == "logprobs"


@pytest.mark.parametrize(
    ("value", "sub", "expected"),
    [
        (0.7, {"type": "number", "minimum": 0, "maximum": 1}, 0.7),
        (7, {"type": "integer", "minimum": 0, "maximum": 10}, 0.7),
        (70, {"type": "integer", "minimum": 0, "maximum": 100}, 0.7),
        (4, {"type": "integer", "minimum": 1, "maximum": 5}, 0.75),
        (0.7, {"type": "number"}, 0.7),
        (7, {"type": "number"}, 0.7),
        (70, {"type": "number"}, 0.7),
        ("70%", {"type": "string"}, 0.7),
    ],
)
def test_stated_confidence_in_its_scale(
    value: object, sub: dict[str, object], expected: float
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}, "confidence": sub}}
    got = confidence_of(
        text="{}", output={"answer": "x", "confidence": value}, schema=schema, logprobs=None
    )
    assert got.source == "stated"
    assert got.value == pytest.approx(expected)


def test_certainty_is_a_stated_confidence_too() -> None:
    assert stated_confidence({"certainty": 9}, None) == pytest.approx(0.9)


@pytest.mark.parametrize("value", [True, "high", 250, -1, float("nan")])
def test_what_is_not_a_stated_confidence(value: object) -> None:
    assert stated_confidence({"confidence": value}, None) is None


def test_without_logprobs_or_a_stated_number_the_text_is_read() -> None:
    got = confidence_of(
        text="The answer is 42.",
        output={"content": "The answer is 42."},
        schema=None,
        logprobs=None,
    )
    assert got.source == "hedging"
    assert 0.0 <= got.value <= 1.0


def test_hedged_text_is_less_confident_than_a_committed_answer() -> None:
    committed = "The invoice total is $1,240, due on March 3."
    hedged = (
        "I'm not entirely sure, but the total might be around $1,240? It could also be "
        "different; you may want to double-check with accounting."
    )
    assert hedge_confidence(hedged) < 0.5 < hedge_confidence(committed)


def test_think_blocks_and_the_stated_fields_are_not_read_as_the_answer() -> None:
    musing = "<think>Maybe, perhaps, I am not sure?</think>The capital of France is Paris."
    assert confidence_of(text=musing, output=None, schema=None, logprobs=None).value == (
        pytest.approx(hedge_confidence("The capital of France is Paris."))
    )
