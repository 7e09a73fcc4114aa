"""Unit tests for :mod:`armature_temporal.runtime.simulate`."""

from __future__ import annotations

import json
import re
from statistics import mean
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from armature_temporal.runtime import simulate
from armature_temporal.runtime.parsing import parse_output
from armature_temporal.runtime.simulate import (
    SimulatedCompletion,
    simulate_completion,
    simulate_tool_turn,
)
from armature_temporal.spec.compiler import DEFAULT_JUDGE_SCHEMA

PROMPT = (
    "Triage this customer ticket: the checkout page crashes when applying a discount "
    "code on mobile Safari."
)
PROMPT_WORDS = {
    "triage",
    "customer",
    "ticket",
    "checkout",
    "page",
    "crashes",
    "applying",
    "discount",
    "code",
    "mobile",
    "safari",
}

TICKET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {"enum": ["bug", "feature", "question"]},
        "title": {"type": "string", "maxLength": 60},
        "summary": {"type": "string"},
        "points": {
            "type": "array",
            "items": {"type": "integer", "minimum": 1, "maximum": 8},
            "minItems": 1,
            "maxItems": 4,
        },
        "owner": {"$ref": "#/$defs/person"},
    },
    "required": ["label", "title", "points", "owner"],
    "additionalProperties": False,
    "$defs": {
        "person": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "exclusiveMinimum": 17},
            },
            "required": ["name", "age"],
            "additionalProperties": False,
        }
    },
}


def run(seed: str = "run-1/triage/0/small", **overrides: Any) -> SimulatedCompletion:
    args: dict[str, Any] = {
        "seed": seed,
        "prompt": PROMPT,
        "output_mode": "json",
        "output_schema": TICKET_SCHEMA,
        "role_type": "worker",
        "valid_rate": 1.0,
        "quality": 0.7,
    }
    args.update(overrides)
    return simulate_completion(**args)


def test_all_is_pinned() -> None:
    assert sorted(simulate.__all__) == [
        "SimulatedCompletion",
        "SimulatedCritique",
        "SimulatedLesson",
        "simulate_completion",
        "simulate_critique",
        "simulate_lessons",
        "simulate_refiner",
        "simulate_tool_turn",
    ]


def test_module_docstring_says_it_is_a_simulator() -> None:
    assert simulate.__doc__ is not None
    assert "simulator, not a language model" in simulate.__doc__


# --- determinism -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["text", "json", "guided_json"])
def test_same_arguments_give_identical_output(mode: str) -> None:
    for i in range(20):
        first = run(f"r/s/{i}", output_mode=mode, valid_rate=0.5)
        assert run(f"r/s/{i}", output_mode=mode, valid_rate=0.5) == first


def test_different_seeds_give_different_outputs() -> None:
    texts = {run(f"r/s/{i}").text for i in range(20)}
    assert len(texts) == 20


def test_validity_is_coupled_across_valid_rates_for_one_seed() -> None:
    for i in range(300):
        low = run(f"r/s/{i}", valid_rate=0.5)
        high = run(f"r/s/{i}", valid_rate=0.9, quality=0.95)
        assert not low.intended_valid or high.intended_valid


def test_bad_knob_raises_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"valid_rate must be between 0 and 1, got 1\.5; fix"):
        run(valid_rate=1.5)
    with pytest.raises(ValueError, match="quality must be between 0 and 1"):
        run(quality=-0.1)


# --- valid and invalid JSON --------------------------------------------------------------------


def test_valid_outputs_parse_and_match_the_schema() -> None:
    validator = Draft202012Validator(TICKET_SCHEMA)
    for i in range(200):
        completion = run(f"r/s/{i}")
        parsed = parse_output(completion.text, "json", TICKET_SCHEMA)
        assert completion.intended_valid
        assert parsed.valid, (completion.text, parsed.error)
        assert validator.is_valid(parsed.value)


def test_invalid_outputs_fail_to_parse_or_validate() -> None:
    for i in range(200):
        completion = run(f"r/s/{i}", valid_rate=0.0)
        assert not completion.intended_valid
        assert not parse_output(completion.text, "json", TICKET_SCHEMA).valid, completion.text


def test_invalid_outputs_show_each_kind_of_defect() -> None:
    errors = [
        parse_output(run(f"r/s/{i}", valid_rate=0.0).text, "json", TICKET_SCHEMA).error or ""
        for i in range(300)
    ]
    assert any("missing required property" in e for e in errors)
    assert any("expected " in e and ", got " in e for e in errors)
    assert any("is not one of" in e for e in errors)
    assert any("cut off" in e for e in errors)


@pytest.mark.parametrize("rate", [0.5, 0.9])
def test_empirical_valid_rate_is_close_to_valid_rate(rate: float) -> None:
    valid = [
        parse_output(run(f"bench/{i}", valid_rate=rate).text, "json", TICKET_SCHEMA).valid
        for i in range(2000)
    ]
    assert abs(mean(valid) - rate) <= 0.04


def test_about_a_fifth_of_json_outputs_are_fenced_or_start_with_reasoning() -> None:
    texts = [run(f"r/s/{i}").text for i in range(600)]
    fenced = sum(t.startswith("```json\n") for t in texts)
    thinking = sum(t.startswith("<think>\n[simulated]") for t in texts)
    assert fenced > 20 and thinking > 20
    assert abs((fenced + thinking) / len(texts) - simulate.DRESSED_SHARE) < 0.06


def test_json_strings_are_built_from_prompt_words() -> None:
    for i in range(50):
        value = parse_output(run(f"r/s/{i}").text, "json", TICKET_SCHEMA).value
        for text in (value["title"], value["owner"]["name"]):
            assert set(re.findall(r"\w+", text.lower())) <= PROMPT_WORDS, text


def test_free_text_fields_are_marked_simulated() -> None:
    summaries = [
        parse_output(run(f"r/s/{i}").text, "json", TICKET_SCHEMA).value.get("summary")
        for i in range(30)
    ]
    present = [s for s in summaries if s is not None]
    assert present and all(s.startswith("[simulated] ") for s in present)


def test_without_schema_json_mode_gives_an_object() -> None:
    for i in range(30):
        parsed = parse_output(run(f"r/s/{i}", output_schema=None).text, "json", None)
        assert parsed.valid and isinstance(parsed.value, dict) and parsed.value


def test_without_schema_invalid_outputs_fail() -> None:
    for i in range(50):
        text = run(f"r/s/{i}", output_schema=None, valid_rate=0.0).text
        assert not parse_output(text, "json", None).valid, text


# --- quality and judges ------------------------------------------------------------------------


@pytest.mark.parametrize("knob", [0.3, 0.7, 0.92])
def test_quality_is_drawn_around_the_knob(knob: float) -> None:
    drawn = [run(f"r/s/{i}", quality=knob).quality for i in range(1000)]
    assert all(0.0 <= q <= 1.0 for q in drawn)
    assert abs(mean(drawn) - knob) < 0.02
    assert len(set(drawn)) > 900  # drawn per output, not a constant


@pytest.mark.parametrize("knob", [0.0, 1.0])
def test_quality_at_the_ends_is_exact(knob: float) -> None:
    assert {run(f"r/s/{i}", quality=knob).quality for i in range(10)} == {knob}


def test_judge_score_is_the_rounded_quality() -> None:
    for i in range(100):
        completion = run(
            f"r/j/{i}", role_type="judge", output_schema=DEFAULT_JUDGE_SCHEMA, quality=0.8
        )
        parsed = parse_output(completion.text, "json", DEFAULT_JUDGE_SCHEMA)
        assert parsed.valid
        assert parsed.value["score"] == round(completion.quality, 3)


def test_judge_score_is_scaled_to_an_integer_range() -> None:
    schema = {
        "type": "object",
        "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}},
        "required": ["score"],
    }
    for i in range(50):
        completion = run(f"r/j/{i}", role_type="judge", output_schema=schema, quality=0.6)
        value = parse_output(completion.text, "json", schema).value
        assert value["score"] == round(1 + completion.quality * 9)


def test_worker_score_property_is_not_forced_to_quality() -> None:
    scores = {
        parse_output(
            run(f"r/w/{i}", output_schema=DEFAULT_JUDGE_SCHEMA).text, "json", DEFAULT_JUDGE_SCHEMA
        ).value["score"]
        for i in range(50)
    }
    qualities = {
        round(run(f"r/w/{i}", output_schema=DEFAULT_JUDGE_SCHEMA).quality, 3) for i in range(50)
    }
    assert scores != qualities


# --- text mode and tokens ----------------------------------------------------------------------


def test_text_mode_starts_simulated_and_mentions_prompt_words() -> None:
    for i in range(50):
        completion = run(f"r/t/{i}", output_mode="text", output_schema=None)
        parsed = parse_output(completion.text, "text", None)
        assert parsed.valid
        assert parsed.value.startswith("[simulated] ")
        assert set(re.findall(r"[a-z]+", parsed.value.lower())) & PROMPT_WORDS


def test_text_mode_invalid_output_is_unfinished_reasoning() -> None:
    for i in range(20):
        completion = run(f"r/t/{i}", output_mode="text", output_schema=None, valid_rate=0.0)
        parsed = parse_output(completion.text, "text", None)
        assert not parsed.valid
        assert parsed.error is not None and "<think>" in parsed.error


def test_token_counts_are_a_quarter_of_the_characters() -> None:
    completion = run()
    assert completion.prompt_tokens == len(PROMPT) // 4
    assert completion.completion_tokens == len(completion.text) // 4
    assert run(prompt="hi").prompt_tokens == 1


# --- schema coverage ---------------------------------------------------------------------------


def valid_value(schema: dict[str, Any], seed: str = "s") -> Any:
    parsed = parse_output(run(seed, output_schema=schema).text, "json", schema)
    assert parsed.valid, parsed.error
    return parsed.value


def test_recursive_ref_schema_terminates_and_validates() -> None:
    schema = {
        "$ref": "#/$defs/node",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["name"],
            }
        },
    }
    for i in range(30):
        valid_value(schema, f"tree/{i}")


def test_one_of_picks_the_first_satisfiable_branch() -> None:
    schema = {
        "oneOf": [
            {"type": "string", "minLength": 5, "maxLength": 2},
            {"type": "integer", "minimum": 3, "maximum": 3},
            {"type": "boolean"},
        ]
    }
    assert all(valid_value(schema, f"o/{i}") == 3 for i in range(10))


def test_type_list_prefers_the_non_null_type() -> None:
    schema = {"type": ["null", "integer"], "minimum": 5, "maximum": 6}
    assert all(valid_value(schema, f"n/{i}") in (5, 6) for i in range(10))


def test_all_of_is_merged() -> None:
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"const": "x"}}, "required": ["b"]},
        ]
    }
    value = valid_value(schema)
    assert isinstance(value["a"], int) and value["b"] == "x"


def test_unique_items_are_unique() -> None:
    schema = {"type": "array", "items": {"enum": [1, 2, 3, 4]}, "minItems": 3, "uniqueItems": True}
    for i in range(20):
        value = valid_value(schema, f"u/{i}")
        assert len(set(value)) == len(value) >= 3


def test_exclusive_bounds_are_respected_for_tight_ranges() -> None:
    schema = {
        "type": "object",
        "properties": {
            "i": {"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 6},
            "f": {"type": "number", "exclusiveMinimum": 0.001, "exclusiveMaximum": 0.002},
        },
        "required": ["i", "f"],
    }
    for k in range(10):
        value = valid_value(schema, f"b/{k}")
        assert value["i"] == 5 and 0.001 < value["f"] < 0.002


def test_string_lengths_are_respected() -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "minLength": 30, "maxLength": 31},
            "tiny": {"type": "string", "maxLength": 1},
            "summary": {"type": "string", "maxLength": 12},
        },
        "required": ["code", "tiny", "summary"],
    }
    for k in range(20):
        value = valid_value(schema, f"l/{k}")
        assert 30 <= len(value["code"]) <= 31 and len(value["tiny"]) <= 1
        assert len(value["summary"]) <= 12


def leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    def bounded(kind: str) -> st.SearchStrategy[dict[str, Any]]:
        return st.tuples(
            st.integers(-50, 50), st.integers(2, 60), st.booleans(), st.booleans()
        ).map(
            lambda t: {
                "type": kind,
                ("exclusiveMinimum" if t[2] else "minimum"): t[0],
                ("exclusiveMaximum" if t[3] else "maximum"): t[0] + t[1],
            }
        )

    lengths = st.tuples(st.integers(0, 12), st.integers(0, 30)).map(
        lambda t: {"type": "string", "minLength": t[0], "maxLength": t[0] + t[1]}
    )
    scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6)
    return st.one_of(
        st.just({"type": "string"}),
        lengths,
        bounded("integer"),
        bounded("number"),
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.lists(scalars, min_size=1, max_size=4, unique_by=json.dumps).map(lambda e: {"enum": e}),
        scalars.map(lambda c: {"const": c}),
        st.just({"type": ["string", "null"], "maxLength": 8}),
    )


NAMES = st.sampled_from(["title", "summary", "count", "items", "owner", "tags", "score", "x"])


def containers(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    obj = st.builds(
        lambda props, required_mask, closed: {
            "type": "object",
            "properties": props,
            "required": [n for n, keep in zip(props, required_mask, strict=False) if keep],
            **({"additionalProperties": False} if closed else {}),
        },
        st.dictionaries(NAMES, inner, max_size=4),
        st.lists(st.booleans(), max_size=4),
        st.booleans(),
    )
    arrays = st.tuples(inner, st.integers(0, 3), st.integers(0, 4)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]}
    )
    one_of = st.lists(
        st.sampled_from(["string", "integer", "boolean", "null"]),
        min_size=1,
        max_size=3,
        unique=True,
    ).map(lambda kinds: {"oneOf": [{"type": k} for k in kinds]})
    any_of = st.lists(inner, min_size=1, max_size=3).map(lambda bs: {"anyOf": bs})
    return obj | arrays | one_of | any_of


SCHEMAS = st.recursive(leaf_schemas(), containers, max_leaves=8)
ROOTS = st.one_of(
    SCHEMAS,
    SCHEMAS.map(
        lambda s: {
            "$defs": {"part": s},
            "type": "object",
            "properties": {"part": {"$ref": "#/$defs/part"}},
            "required": ["part"],
        }
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=ROOTS, seed=st.text(max_size=8))
def test_valid_outputs_satisfy_random_schemas(schema: dict[str, Any], seed: str) -> None:
    Draft202012Validator.check_schema(schema)
    completion = run(seed, output_schema=schema)
    parsed = parse_output(completion.text, "json", schema)
    assert parsed.valid, (schema, completion.text, parsed.error)
    assert Draft202012Validator(schema).is_valid(parsed.value)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=ROOTS, seed=st.text(max_size=8))
def test_invalid_outputs_fail_random_schemas(schema: dict[str, Any], seed: str) -> None:
    completion = run(seed, output_schema=schema, valid_rate=0.0)
    assert not parse_output(completion.text, "json", schema).valid, completion.text


# --- tool turns --------------------------------------------------------------------------------


TOOLS: list[dict[str, Any]] = [
    {
        "name": "search_docs",
        "description": "Search the product documentation",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    {
        "name": "get_ticket",
        "description": "Fetch a ticket by id",
        "parameters": {
            "type": "object",
            "properties": {"ticket_id": {"type": "integer"}},
            "required": ["ticket_id"],
        },
    },
]


def conversation(seed: str, max_turns: int = 6) -> list[list[dict[str, Any]] | None]:
    return [
        simulate_tool_turn(seed=seed, turn=t, max_turns=max_turns, tools=TOOLS)
        for t in range(max_turns)
    ]


def test_tool_calls_come_on_the_first_one_or_two_turns_then_none() -> None:
    tool_turns = set()
    for i in range(100):
        turns = conversation(f"agent/{i}")
        used = [t for t in turns if t is not None]
        assert turns[: len(used)] == used  # calls first, then only None
        tool_turns.add(len(used))
    assert tool_turns == {1, 2}


def test_tool_call_ids_are_sequential_across_turns() -> None:
    for i in range(50):
        calls = [c for turn in conversation(f"agent/{i}") if turn for c in turn]
        assert [c["id"] for c in calls] == [f"call_{n}" for n in range(1, len(calls) + 1)]


def test_tool_call_arguments_match_the_parameters_schema() -> None:
    by_name = {t["name"]: Draft202012Validator(t["parameters"]) for t in TOOLS}
    names = set()
    for i in range(100):
        for turn in conversation(f"agent/{i}"):
            for call in turn or []:
                names.add(call["name"])
                assert by_name[call["name"]].is_valid(call["arguments"]), call
    assert names == set(by_name)


def test_tool_turns_are_deterministic() -> None:
    assert [conversation(f"agent/{i}") for i in range(20)] == [
        conversation(f"agent/{i}") for i in range(20)
    ]


def test_no_tool_calls_on_the_last_turn_or_without_tools() -> None:
    for i in range(50):
        assert simulate_tool_turn(seed=f"a/{i}", turn=0, max_turns=1, tools=TOOLS) is None
        assert simulate_tool_turn(seed=f"a/{i}", turn=1, max_turns=2, tools=TOOLS) is None
        assert simulate_tool_turn(seed=f"a/{i}", turn=0, max_turns=5, tools=[]) is None
    assert any(
        simulate_tool_turn(seed=f"a/{i}", turn=0, max_turns=2, tools=TOOLS) for i in range(10)
    )


@pytest.mark.parametrize("parameters", [None, {"type": "object"}])
def test_tool_without_parameters_gets_empty_arguments(parameters: Any) -> None:
    tool = {"name": "ping", "description": "Check the service", "parameters": parameters}
    calls = simulate_tool_turn(seed="a", turn=0, max_turns=3, tools=[tool])
    assert calls
    assert [(c["name"], c["arguments"]) for c in calls] == [("ping", {})] * len(calls)


def test_tool_turn_rejects_bad_input_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"tools\[0\] has no 'name'"):
        simulate_tool_turn(seed="a", turn=0, max_turns=3, tools=[{"description": "x"}])
    with pytest.raises(ValueError, match="0-based"):
        simulate_tool_turn(seed="a", turn=-1, max_turns=3, tools=TOOLS)
