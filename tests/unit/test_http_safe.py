"""The spec's ``http_safe``: which requests it marks safe, how they compile into the Plan, and
that a spec without marks keeps its version (spec_hash), policy version and Plan bytes."""

from __future__ import annotations

import json

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.spec.compiler import Plan
from armature_temporal.spec.safety import HttpSafe
from tests.fakes import plan_from

BASE = """\
name: fetcher
http_allow_hosts: [api.example.com]
stages:
  - {id: get, tool: {name: http_request, args: {url: "https://api.example.com/v1"}}}
"""


def test_a_spec_without_marks_keeps_its_hashes_and_plan_bytes() -> None:
    plain = plan_from(BASE)
    empty = plan_from(BASE + "http_safe: []\n")
    assert (plain.spec_hash, plain.policy_version) == (empty.spec_hash, empty.policy_version)
    assert plain.to_json() == empty.to_json()
    assert "http_safe" not in json.loads(plain.to_json())
    assert "http_safe" not in plain.model_dump(mode="json")  # nor in what Temporal carries
    assert Plan.model_validate_json(plain.to_json()) == plain


def test_marks_compile_into_the_plan_and_change_both_hashes() -> None:
    plain = plan_from(BASE)
    marked = plan_from(BASE + "http_safe:\n  - {host: API.Example.com., methods: [GET, HEAD]}\n")
    assert marked.http_safe == [HttpSafe(host="api.example.com", methods=["GET", "HEAD"])]
    assert marked.spec_hash != plain.spec_hash
    assert marked.policy_version != plain.policy_version  # a policy change is a new version
    assert Plan.model_validate_json(marked.to_json()) == marked
    assert json.loads(marked.to_json())["http_safe"] == [
        {"host": "api.example.com", "methods": ["GET", "HEAD"]}
    ]


@pytest.mark.parametrize(
    ("mark", "words"),
    [
        ("{host: api.example.com, methods: []}", "methods"),
        ("{host: api.example.com, methods: [FETCH]}", "FETCH"),
        ("{host: '', methods: [GET]}", "host"),
        ("{host: api.example.com}", "methods"),
        ("{host: api.example.com, methods: [GET], safe: true}", "safe"),
    ],
)
def test_a_malformed_mark_is_a_spec_error_naming_the_field(mark: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        plan_from(BASE + f"http_safe:\n  - {mark}\n")
    assert "http_safe" in str(caught.value) and words in str(caught.value)


RULED = BASE.replace(
    "stages:",
    "safety_rules:\n"
    "  - {tool: '*', condition: {field: _tool_reversibility, op: equals, value: full},"
    " action: allow}\nsafety_mode: strict\nstages:",
)


def test_validate_warns_where_a_reversibility_rule_now_sees_every_request_as_none() -> None:
    """A strict spec that allowed fully reversible calls let its GETs through before; now
    they are none unless marked, and validate says which mark to add."""
    from armature_temporal.spec.loader import load_spec_text
    from armature_temporal.spec.warnings import spec_warnings

    def warned(text: str) -> list[str]:
        return [m for path, m in spec_warnings(load_spec_text(text).spec) if "http_safe" in m]

    (message,) = warned(RULED)
    assert "reversibility 'none'" in message and "http_safe: [{host:" in message
    assert warned(RULED + "http_safe: [{host: api.example.com, methods: [GET]}]\n") == []
    assert warned(BASE) == []  # no rule on reversibility: nothing changes for it
