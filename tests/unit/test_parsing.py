"""Unit tests for :mod:`armature_temporal.runtime.parsing`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from armature_temporal.runtime import parsing
from armature_temporal.runtime.parsing import ParsedOutput, parse_output, schema_errors
from armature_temporal.spec.compiler import DEFAULT_JUDGE_SCHEMA

POINTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "points": {"type": "array", "items": {"type": "integer"}, "minItems": 3},
        "label": {"enum": ["bug", "feature"]},
        "title": {"type": "string", "maxLength": 5},
    },
    "required": ["points", "label"],
    "additionalProperties": False,
}

JUDGE_JSON = '{"score": 0.75, "rationale": "clear and correct"}'
JUDGE_VALUE = {"score": 0.75, "rationale": "clear and correct"}


def test_all_is_pinned() -> None:
    assert sorted(parsing.__all__) == ["ParsedOutput", "parse_output", "schema_errors"]


def test_parsed_output_is_frozen() -> None:
    parsed = parse_output("hi", "text", None)
    with pytest.raises(ValueError):
        parsed.valid = False  # type: ignore[misc]


# --- text mode ---------------------------------------------------------------------------------


def test_text_mode_strips_think_block_and_whitespace() -> None:
    parsed = parse_output("<think>\nplan it\n</think>\n\n  The answer.  \n", "text", None)
    assert parsed == ParsedOutput(value="The answer.", valid=True, error=None)


def test_text_mode_keeps_text_without_reasoning_untouched_but_stripped() -> None:
    assert parse_output("  a <b>tag</b> stays ", "text", None).value == "a <b>tag</b> stays"


def test_text_mode_empty_output_is_invalid_and_says_no_text() -> None:
    parsed = parse_output("   \n", "text", None)
    assert not parsed.valid
    assert parsed.value == ""
    assert parsed.error is not None and "returned no text" in parsed.error


def test_text_mode_only_reasoning_is_invalid_and_says_so() -> None:
    parsed = parse_output("<think>I am still thinking", "text", None)
    assert not parsed.valid
    assert parsed.error is not None and "<think>" in parsed.error and "</think>" in parsed.error


def test_text_mode_orphan_closing_tag_drops_template_reasoning() -> None:
    parsed = parse_output("reasoning from the template</think>Final words.", "text", None)
    assert parsed.value == "Final words."


# --- finding JSON ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        JUDGE_JSON,
        f"```json\n{JUDGE_JSON}\n```",
        f"```\n{JUDGE_JSON}\n```",
        f'<think>draft {{"score": 0.1}}</think>\n```json\n{JUDGE_JSON}\n```',
        f"<THINK>a</THINK><think>b</think>{JUDGE_JSON}",
        f'template reasoning {{"score": 0}} </think>\n{JUDGE_JSON}',
        f"Sure! Here is the result: {JUDGE_JSON} Let me know if you need more.",
        f"I used {{braces}} in prose first. {JUDGE_JSON}",
        f"\ufeff{JUDGE_JSON}",
        'score = 0.75\nrationale = "clear and correct"',
        '```toml\nscore = 0.75\nrationale = "clear and correct"\n```',
    ],
    ids=[
        "bare",
        "json-fence",
        "plain-fence",
        "think-then-fence",
        "two-think-blocks",
        "orphan-close",
        "prose-around",
        "braces-in-prose",
        "bom",
        "toml",
        "toml-fence",
    ],
)
def test_json_mode_finds_the_answer(text: str) -> None:
    assert parse_output(text, "json", DEFAULT_JUDGE_SCHEMA) == ParsedOutput(
        value=JUDGE_VALUE, valid=True
    )


def test_guided_json_mode_parses_like_json_mode() -> None:
    text = f"```json\n{JUDGE_JSON}\n```"
    assert parse_output(text, "guided_json", DEFAULT_JUDGE_SCHEMA) == parse_output(
        text, "json", DEFAULT_JUDGE_SCHEMA
    )


def test_json_mode_toml_dates_become_iso_strings() -> None:
    parsed = parse_output("when = 2024-05-01\n", "json", None)
    assert parsed.value == {"when": "2024-05-01"}


def test_json_mode_unclosed_think_gives_reasoning_only_error() -> None:
    parsed = parse_output(
        '<think>maybe {"score": 1, "rationale": "x"}', "json", DEFAULT_JUDGE_SCHEMA
    )
    assert not parsed.valid and parsed.value is None
    assert parsed.error is not None and "only a <think>" in parsed.error


def test_json_mode_prose_error_quotes_start_and_names_expected_kind() -> None:
    parsed = parse_output(
        "I'm sorry, I cannot help with that request today.", "json", DEFAULT_JUDGE_SCHEMA
    )
    assert not parsed.valid
    assert parsed.error is not None
    assert "expected a JSON object" in parsed.error
    assert "`I'm sorry, I cannot help" in parsed.error
    assert "reply with only the JSON" in parsed.error


def test_json_mode_long_prose_is_quoted_shortened() -> None:
    parsed = parse_output("word " * 500, "json", None)
    assert parsed.error is not None and len(parsed.error) < 250


def test_json_mode_truncated_output_says_cut_off() -> None:
    parsed = parse_output(
        '```json\n{"score": 0.5, "rationale": "the answ', "json", DEFAULT_JUDGE_SCHEMA
    )
    assert not parsed.valid
    assert parsed.error is not None and "cut off" in parsed.error


def test_json_mode_truncated_output_does_not_salvage_inner_object() -> None:
    parsed = parse_output('{"outer": {"score": 1, "rationale": "x"}, "more": [1, 2', "json", None)
    assert not parsed.valid and parsed.value is None


def test_json_mode_does_not_salvage_object_nested_in_broken_json() -> None:
    parsed = parse_output(
        '{"wrapper": {"score": 1, "rationale": "x"}, oops}', "json", DEFAULT_JUDGE_SCHEMA
    )
    assert not parsed.valid and parsed.value is None


def test_json_mode_syntax_error_is_reported_with_position() -> None:
    parsed = parse_output('{"score": 0.5, "rationale": "x",}', "json", DEFAULT_JUDGE_SCHEMA)
    assert parsed.error is not None
    assert "invalid JSON: Expecting property name" in parsed.error
    assert "column 33" in parsed.error


def test_json_mode_rejects_nan_constant() -> None:
    parsed = parse_output('{"score": NaN, "rationale": "x"}', "json", DEFAULT_JUDGE_SCHEMA)
    assert not parsed.valid
    assert parsed.error is not None and "NaN is not valid JSON" in parsed.error


def test_json_mode_without_schema_accepts_object_and_array() -> None:
    assert parse_output('{"a": 1}', "json", None).valid
    assert parse_output("[1, 2]", "json", None).valid


def test_json_mode_without_schema_rejects_scalar_and_says_how_to_fix() -> None:
    parsed = parse_output('"just a string"', "json", None)
    assert not parsed.valid and parsed.value == "just a string"
    assert parsed.error is not None
    assert "expected a JSON object or array, got string" in parsed.error
    assert "wrap the answer in an object" in parsed.error


def test_json_mode_scalar_root_is_valid_when_the_schema_asks_for_it() -> None:
    assert parse_output("42", "json", {"type": "integer"}).value == 42


# --- schema errors -----------------------------------------------------------------------------


def test_schema_errors_are_all_reported_sorted_by_path() -> None:
    text = '{"title": "far too long", "points": [1, "two"], "label": "idea", "extra": 1}'
    parsed = parse_output(text, "json", POINTS_SCHEMA)
    assert not parsed.valid
    assert parsed.value == json.loads(text)  # kept for logs
    assert parsed.error is not None
    lines = parsed.error.splitlines()
    assert lines[0].startswith("the JSON does not match the schema")
    assert lines[1:] == [
        'at /: unexpected property "extra"; allowed: "points", "label", "title"',
        'at /label: "idea" is not one of "bug", "feature"',
        'at /points: [1, "two"] is too short; give at least 3 items',
        'at /points/1: expected integer, got string "two"',
        'at /title: "far too long" is too long; give at most 5 characters',
    ]


def test_schema_errors_sort_array_indices_numerically() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    errors = schema_errors(["x"] * 11, schema)
    assert [e.split(":")[0] for e in errors[:3]] == ["at /0", "at /1", "at /2"]
    assert errors[-1].startswith("at /10:")


def test_schema_errors_missing_required_names_every_missing_property_once() -> None:
    assert schema_errors({}, POINTS_SCHEMA) == [
        'at /: missing required properties "points", "label"'
    ]


def test_schema_errors_bounds_and_const_say_the_limit() -> None:
    schema = {
        "type": "object",
        "properties": {
            "low": {"type": "number", "minimum": 0},
            "high": {"type": "integer", "exclusiveMaximum": 10},
            "kind": {"const": "report"},
        },
    }
    assert schema_errors({"low": -1, "high": 10, "kind": "memo"}, schema) == [
        "at /high: 10 is out of range; it must be less than 10",
        'at /kind: must be "report", got "memo"',
        "at /low: -1 is out of range; it must be at least 0",
    ]


def test_schema_errors_escape_json_pointer_tokens() -> None:
    schema = {"type": "object", "properties": {"a/b": {"type": "string"}}}
    assert schema_errors({"a/b": 1}, schema) == ["at /a~1b: expected string, got integer 1"]


def test_schema_errors_shorten_long_values() -> None:
    errors = schema_errors(
        {"points": list(range(100)), "label": "bug"},
        {
            **POINTS_SCHEMA,
            "properties": {
                **POINTS_SCHEMA["properties"],
                "points": {"type": "array", "maxItems": 2},
            },
        },
    )
    assert len(errors) == 1
    assert "..." in errors[0] and len(errors[0]) < 120


def test_schema_errors_any_of_names_the_closest_branch() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    (error,) = schema_errors(1.5, schema)
    assert error.startswith("at /: 1.5 matches none of the allowed alternatives; closest:")


def test_schema_errors_one_of_with_two_matches_says_match_exactly_one() -> None:
    schema = {"oneOf": [{"type": "number"}, {"type": "integer"}]}
    (error,) = schema_errors(3, schema)
    assert "match exactly one" in error


def test_schema_error_list_is_capped() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    parsed = parse_output(json.dumps(list(range(30))), "json", schema)
    assert parsed.error is not None
    lines = parsed.error.splitlines()
    assert len(lines) == 1 + parsing.MAX_LISTED_ERRORS + 1
    assert lines[-1] == f"(and {30 - parsing.MAX_LISTED_ERRORS} more)"


# --- robustness --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "[" * 5_000 + "]" * 5_000,
        "[}" * 50_000,
        '"' * 10_000,
        "x = [" * 2_000,
        "{" * 3 + "<think>" * 3,
        "```",
        "```json\n",
        "</think>",
        "<think></think>",
    ],
    ids=[
        "deep-open",
        "deep-closed",
        "mismatched",
        "quotes",
        "toml-deep",
        "mixed",
        "fence",
        "empty-fence",
        "orphan-only",
        "empty-think",
    ],
)
def test_json_mode_pathological_text_is_invalid_not_an_exception(text: str) -> None:
    parsed = parse_output(text, "json", DEFAULT_JUDGE_SCHEMA)
    assert parsed.valid is False
    assert parsed.error


MODES = st.sampled_from(["text", "json", "guided_json"])
SCHEMAS = st.sampled_from([None, DEFAULT_JUDGE_SCHEMA, POINTS_SCHEMA, {"type": "string"}])
FRAGMENTS = st.sampled_from(
    [
        "<think>",
        "</think>",
        "```json\n",
        "```",
        "{",
        "}",
        "[",
        "]",
        '"',
        "\\",
        ":",
        ",",
        "= ",
        "\n",
        "NaN",
        "1",
        "[a]\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text() | st.lists(FRAGMENTS | st.text(max_size=5)).map("".join),
    mode=MODES,
    schema=SCHEMAS,
)
def test_parse_output_never_raises_on_any_text(text: str, mode: Any, schema: Any) -> None:
    parsed = parse_output(text, mode, schema)
    assert parsed.valid is (parsed.error is None)


# --- round trip --------------------------------------------------------------------------------


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
CONTAINERS = st.lists(JSON_VALUES, max_size=4) | st.dictionaries(
    st.text(max_size=8), JSON_VALUES, max_size=4
)


def schema_for(value: Any) -> dict[str, Any]:
    """A strict schema that ``value`` satisfies (each type, every key required)."""
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {k: schema_for(v) for k, v in value.items()},
            "required": list(value),
            "additionalProperties": False,
        }
    if isinstance(value, list):
        return {
            "type": "array",
            "prefixItems": [schema_for(v) for v in value],
            "minItems": len(value),
            "maxItems": len(value),
        }
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"const": value}
    if isinstance(value, int | float):
        return {"type": "number", "minimum": value, "maximum": value}
    return {"type": "string", "minLength": len(value), "maxLength": len(value)}


WRAPPERS = st.sampled_from(
    [
        "{body}",
        "```json\n{body}\n```",
        "```JSON\n{body}\n```\n",
        '<think>\nThe user wants JSON. {{"draft": true}}\n</think>\n{body}',
        "<think>x</think>\n```json\n{body}\n```",
        "Here is the JSON you asked for:\n\n{body}\n\nAnything else?",
        "done thinking</think>\n{body}",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=CONTAINERS,
    wrapper=WRAPPERS,
    indent=st.sampled_from([None, 2]),
    mode=st.sampled_from(["json", "guided_json"]),
)
def test_valid_json_wrapped_in_fences_or_think_parses_back_equal(
    value: Any, wrapper: str, indent: int | None, mode: Any
) -> None:
    schema = schema_for(value)
    assert Draft202012Validator(schema).is_valid(value)  # the test's own premise
    text = wrapper.format(body=json.dumps(value, indent=indent, ensure_ascii=False))
    parsed = parse_output(text, mode, schema)
    assert parsed.error is None
    assert parsed.valid
    assert parsed.value == value
