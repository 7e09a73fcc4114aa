"""Run inputs read from the command line by their declared type, checked against the declared
names; ARMATURE_* settings validated with one-line errors (issue 13)."""

from __future__ import annotations

from typing import Any

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.service.client import InputError, coerce_input, prepare_inputs
from armature_temporal.settings import (
    SettingError,
    check_settings,
    dev_port,
    strict_sandbox,
    tool_output_cap,
)
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "text": {"type": "string"},
        "items": {"type": "array"},
        "either": {"type": ["integer", "string"]},
        "maybe": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
        "choice": {"enum": [1, 2, "three"]},
        "free": {},
    },
}


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("n", "5", 5),
        ("n", "-3", -3),
        ("n", "abc", "abc"),  # left for the schema to refuse, in its own words
        ("x", "1.5", 1.5),
        ("x", "-2", -2),
        ("x", "nan", "nan"),
        ("flag", "true", True),
        ("flag", "No", False),
        ("text", "5", "5"),
        ("text", '{"a": 1}', '{"a": 1}'),
        ("items", "[1, 2]", [1, 2]),
        ("either", "7", 7),
        ("either", "seven", "seven"),
        ("maybe", "null", None),
        ("maybe", "4", 4),
        ("choice", "2", 2),
        ("choice", "three", "three"),
        ("free", "5", 5),
        ("free", "kelp forests", "kelp forests"),
        ("undeclared", '["a"]', ["a"]),
    ],
)
def test_coerce_input_reads_the_declared_type_then_json_then_text(
    name: str, raw: str, expected: Any
) -> None:
    value = coerce_input(SCHEMA, name, raw)
    assert value == expected and type(value) is type(expected)


def _plan(inputs: str) -> Any:
    text = (
        f"name: ins\n{inputs}model_tiers: {{s: {{provider: simulate}}}}\n"
        "stages:\n  - id: a\n    role: {name: A, description: hi}\n"
    )
    return compile_spec(load_spec_text(text))


def test_prepare_inputs_refuses_unknown_names_with_the_known_ones() -> None:
    plan = _plan("inputs: [question]\n")
    with pytest.raises(InputError) as caught:
        prepare_inputs(plan, {"questoin": "q", "question": "q"})
    assert "questoin: unknown input (did you mean 'question'?)" in str(caught.value)
    assert "Inputs of this spec: ['question']" in str(caught.value)


def test_prepare_inputs_of_a_spec_without_inputs_accepts_any() -> None:
    assert prepare_inputs(_plan(""), {"anything": 1}) == {"anything": 1}


def test_prepare_inputs_leaves_additional_properties_to_the_schema() -> None:
    plan = _plan(
        "inputs: {type: object, properties: {k: {}}, additionalProperties: {type: string}}\n"
    )
    assert prepare_inputs(plan, {"b": "x"}) == {"b": "x"}
    with pytest.raises(InputError, match="1 is not of type 'string'"):
        prepare_inputs(plan, {"b": 1})


def _spec(description: str, inputs: str = "") -> str:
    return (
        "name: t\n"
        + (inputs or "inputs:\n  type: object\n  properties: {q: {}, opt: {}}\n  required: [q]\n")
        + "model_tiers: {s: {provider: simulate}}\n"
        + f"stages:\n  - id: a\n    role: {{name: A, description: {description!r}}}\n"
    )


def test_a_template_reading_an_undeclared_input_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(_spec("{{ inputs.qq }} {{ inputs['opt'] | default(1) }}"))
    text = str(caught.value)
    assert "reads inputs.qq, but the spec declares no input 'qq'" in text
    assert "declared inputs: ['q', 'opt'] (did you mean 'q'?)" in text


@pytest.mark.parametrize(
    "description",
    [
        "{{ inputs.q }}",
        "{{ inputs.get('zz') }} {{ inputs.items() | list }}",
        "{{ inputs.opt | default('') }}",
        "{{ inputs['opt'] | d('') }}",
        "{% if inputs.opt is defined %}{{ inputs.opt }}{% endif %}",
        "{{ opt | default('x') }}",
        "{% for opt in [1] %}{{ opt }}{% endfor %}",
    ],
)
def test_guarded_or_declared_reads_pass_without_warnings(description: str) -> None:
    loaded = load_spec_text(_spec(description))
    assert not [w for w in loaded.warnings if "optional input" in str(w)]


@pytest.mark.parametrize("description", ["{{ inputs.opt }}", "{{ inputs['opt'] }}", "{{ opt }}"])
def test_an_optional_input_read_without_a_default_is_a_warning(description: str) -> None:
    loaded = load_spec_text(_spec(description))
    said = [str(w) for w in loaded.warnings if "optional input" in str(w)]
    assert len(said) == 1 and "reads optional input 'opt' (not required, no default)" in said[0]


def test_open_input_schemas_are_not_checked_by_name() -> None:
    spec = _spec(
        "{{ inputs.anything }}",
        inputs="inputs: {type: object, properties: {q: {}}, additionalProperties: true}\n",
    )
    load_spec_text(spec)


@pytest.mark.parametrize(
    ("variable", "value", "read"),
    [
        ("ARMATURE_DEV_PORT", "abc", dev_port),
        ("ARMATURE_DEV_PORT", "0", dev_port),
        ("ARMATURE_DEV_PORT", "65536", dev_port),
        ("ARMATURE_TOOL_OUTPUT_CAP", "-1", tool_output_cap),
        ("ARMATURE_STRICT_SANDBOX", "sometimes", strict_sandbox),
    ],
)
def test_a_bad_setting_raises_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, read: Any
) -> None:
    monkeypatch.setenv(variable, value)
    for call in (read, check_settings):
        with pytest.raises(SettingError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f"{variable}={value!r} ") and "\n" not in message


def test_good_settings_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARMATURE_DEV_PORT", " 17233 ")
    monkeypatch.setenv("ARMATURE_UI_PORT", "")
    monkeypatch.setenv("ARMATURE_STRICT_SANDBOX", "Off")
    check_settings()
    assert dev_port() == 17233 and strict_sandbox() is False


def test_inputs_over_the_size_limit_are_refused_saying_the_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 60 MB input was accepted and one run wrote 502 MB of payloads (issue 26)."""
    plan = _plan("inputs: [topic, note]\n")
    with pytest.raises(InputError) as caught:
        prepare_inputs(plan, {"topic": "x" * (2 * 1024 * 1024), "note": "small"})
    message = str(caught.value)
    assert "are 2.0 MiB of JSON (2,097,1" in message and "the largest is 'topic'" in message
    assert "over the 1.0 MiB limit" in message and "ARMATURE_MAX_INPUT_BYTES" in message
    monkeypatch.setenv("ARMATURE_MAX_INPUT_BYTES", str(4 * 1024 * 1024))
    assert prepare_inputs(plan, {"topic": "x" * (2 * 1024 * 1024), "note": "n"})["note"] == "n"
    monkeypatch.setenv("ARMATURE_MAX_INPUT_BYTES", "10")
    with pytest.raises(InputError, match=r"are 32 bytes of JSON \(the largest is 'topic'\)"):
        prepare_inputs(plan, {"topic": "abcdef", "note": "n"})


@pytest.mark.parametrize(
    ("given", "where"),
    [
        ({"topic": "ok \ud800 then"}, "topic: has a lone surrogate (U+D800) at character 3"),
        ({"topic": "bad byte \udcff"}, "topic: has a lone surrogate (U+DCFF)"),
        ({"topic": ["a", {"k": "\udfff"}]}, "topic/1/k: has a lone surrogate"),
        ({"topic": {"\ud83d": 1}}, "topic (a key): has a lone surrogate"),
    ],
)
def test_text_that_is_not_unicode_is_an_input_error_naming_where(
    given: dict[str, Any], where: str
) -> None:
    """A lone surrogate gave a serialization traceback (CLI) or a fatal error (library)."""
    with pytest.raises(InputError) as caught:
        prepare_inputs(_plan(""), given)
    assert where in str(caught.value) and "not valid Unicode text" in str(caught.value)


def test_max_input_bytes_is_a_checked_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARMATURE_MAX_INPUT_BYTES", "lots")
    with pytest.raises(SettingError, match="ARMATURE_MAX_INPUT_BYTES='lots'"):
        check_settings()
