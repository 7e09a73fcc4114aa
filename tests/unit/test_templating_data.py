"""Templates read the data: a field named like a dict method is the field, errors inside a
template are template errors, and values print as a model reads data (JSON)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from armature_temporal.runtime.prompts import build_messages
from armature_temporal.spec.loader import load_spec
from armature_temporal.spec.templating import TemplateRuntimeError, evaluate, render


@pytest.mark.parametrize("name", ["items", "keys", "values", "get", "update", "pop", "copy"])
def test_a_field_named_like_a_dict_method_is_the_field(name: str) -> None:
    variables = {"inputs": {name: "the data"}, "plan": {name: ["a", "b"]}}
    assert render("{{ inputs." + name + " }}", variables) == "the data"
    loop = "{% for t in plan." + name + " %}[{{ t }}]{% endfor %}"
    assert render(loop, variables) == "[a][b]"
    assert evaluate("plan." + name + " | length", variables) == 2


def test_a_mapping_without_the_field_keeps_its_methods() -> None:
    text = "{% for k, v in inputs.items() %}{{ k }}={{ v }};{% endfor %}"
    assert render(text, {"inputs": {"a": 1, "b": 2}}) == "a=1;b=2;"


def test_a_template_that_raises_is_a_template_error_naming_what_python_said() -> None:
    with pytest.raises(TemplateRuntimeError, match="ZeroDivisionError: division by zero"):
        render("{{ inputs.topic / 0 }}", {"inputs": {"topic": 3}})
    with pytest.raises(jinja2.TemplateError, match="TypeError"):
        evaluate("inputs.topic + 1", {"inputs": {"topic": "x"}})


def test_booleans_null_and_containers_print_as_json() -> None:
    variables = {"ok": False, "yes": True, "none": None, "d": {"a": True, "b": None}, "l": [1]}
    text = "{{ ok }} {{ yes }} {{ none }} {{ d }} {{ l }}"
    assert render(text, variables) == 'false true null {"a": true, "b": null} [1]'
    # Conditions still see the Python values.
    assert evaluate("ok", variables) is False


def test_a_prompt_reading_items_validates_and_renders_the_data(tmp_path: Path) -> None:
    spec = tmp_path / "items.yaml"
    spec.write_text(
        """\
name: items-fields
inputs: [items]
stages:
  - id: plan
    output_mode: json
    output_schema:
      type: object
      properties: {items: {type: array, items: {type: string}}, keys: {type: string}}
      required: [items, keys]
    role: {name: Planner, description: "Plan {{ inputs.items }}"}
  - id: write
    role:
      name: Writer
      description: "{% for t in plan.items %}- {{ t }}\\n{% endfor %}keys: {{ plan.keys }}"
"""
    )
    loaded = load_spec(spec)  # validate passes it ...
    stage = loaded.spec.stages[1]
    assert stage.role is not None
    messages = build_messages(  # ... and the run renders the data, not a method
        role_type="worker",
        role_name="Writer",
        prompt_template=stage.role.description,
        variables={"inputs": {"items": "x"}, "plan": {"items": ["one", "two"], "keys": "k"}},
        mission="",
        output_mode="text",
        output_schema=None,
        guidance="",
        context=None,
        lessons=(),
    )
    text = "\n".join(str(m["content"]) for m in messages)
    assert "- one\n- two\nkeys: k" in text
    assert "built-in method" not in text
