"""Property test: whatever text or mapping reaches the loader, only SpecError comes out."""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from armature_temporal.errors import SpecError
from armature_temporal.spec.loader import load_spec_text

SPEC_KEYS = [
    "name",
    "version",
    "stages",
    "inputs",
    "model_tiers",
    "safety_rules",
    "id",
    "role",
    "description",
    "depends_on",
    "gate",
    "loop",
    "on_fail",
    "tool",
    "fan_out",
    "fan_in",
    "subagent_spec",
    "output_mode",
    "output_schema",
    "type",
    "model_tier",
    "until",
    "max_iterations",
    "condition",
    "arms",
    "continuation",
    "triggers",
    "schedule",
]
SNIPPETS = [
    "{{ a.b }}",
    "{% for x in y %}",
    "human",
    "worker",
    "judge",
    "json",
    "-",
    ":",
    "[",
    "]",
    "{",
    "}",
    "&a",
    "*a",
    "!!set",
    "!!python/object:os.system",
    "'",
    '"',
    "\t",
    "\n",
    "  ",
    "? ",
    "%YAML 1.2",
    "---",
    "...",
    "|",
    ">",
    "#",
    "0x1F",
    "1e999",
    "~",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(SPEC_KEYS),
    st.sampled_from(SNIPPETS),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(SPEC_KEYS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


def _check(text: str) -> None:
    try:
        load_spec_text(text, "fuzz.yaml")
    except SpecError as exc:
        assert exc.issues, "a SpecError must carry at least one issue"
        for issue in exc.issues:
            assert issue.message


@settings(max_examples=6000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(SNIPPETS) | st.text(max_size=12), max_size=25))
def test_random_yaml_text_raises_only_spec_error(parts: list[str]) -> None:
    _check("".join(parts))


@settings(max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(SPEC_KEYS), values, max_size=6))
def test_random_mappings_raise_only_spec_error(doc: dict[str, object]) -> None:
    buf = io.StringIO()
    YAML(typ="safe").dump(doc, buf)
    _check(buf.getvalue())


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(values, min_size=1, max_size=4))
def test_random_stage_lists_raise_only_spec_error(stages: list[object]) -> None:
    buf = io.StringIO()
    YAML(typ="safe").dump({"name": "fuzz", "stages": stages}, buf)
    _check(buf.getvalue())
