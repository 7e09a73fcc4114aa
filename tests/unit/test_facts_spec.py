"""The spec side of the facts that outlive a run (issue #30 item 8): 0.7.0's memory fields act
now and leave specs that set none of the newer ones hashed as before; the navigation tools need
memory.navigation_tools; the interpreter's tool names are the navigation module's."""

from __future__ import annotations

import hashlib

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.knowledge.facts import LEGACY_TOOL_NAMES, NAVIGATION_TOOLS
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.tool_checks import FACT_TOOLS

#: A 0.7.0-style memory section, and its hashes computed before the facts acted (2dc9ecb).
PINNED = """\
name: mem-pinned
memory:
  capture: [{stage: a, key: x}]
  extract_knowledge: true
stages:
  - id: a
    role: {description: "A."}
"""


def test_a_memory_spec_keeps_its_spec_hash_and_plan_bytes() -> None:
    plan = compile_spec(load_spec_text(PINNED, "t.yaml"))
    assert plan.spec_hash == "c01b92ca75aeca561de177e748d8752810351122c4f451253783982977359488"
    digest = hashlib.sha256(plan.to_json().encode()).hexdigest()
    assert digest == "a0848f70ba9562d758e65c024c8eb8f00f3ef4f0f0c185d7083c2363d8abbed0"
    assert plan.memory is not None and plan.memory.keeps_facts
    assert (plan.memory.staleness_days, plan.memory.budget_chars) == (30.0, 2000)
    set_ = PINNED.replace("  extract_knowledge: true\n", "  staleness_threshold_days: 7\n")
    tuned = compile_spec(load_spec_text(set_, "t.yaml"))
    assert tuned.memory is not None and tuned.memory.staleness_days == 7
    assert tuned.spec_hash != plan.spec_hash


def test_the_facts_fields_act_and_only_reconcile_llm_is_warned() -> None:
    text = PINNED.replace(
        "  extract_knowledge: true\n",
        "  extract_knowledge: true\n  navigation_tools: true\n  reconcile_llm: true\n",
    )
    loaded = load_spec_text(text, "t.yaml")
    warned = [str(w) for w in loaded.warnings if "accepted but not used" in str(w)]
    assert len(warned) == 1 and "memory.reconcile_llm" in warned[0], warned


def test_the_navigation_tools_need_navigation_tools_on() -> None:
    text = """\
name: nav
memory: {extract_knowledge: true}
stages:
  - id: look
    role: {description: "Look.", tools: [facts_search]}
"""
    with pytest.raises(SpecError) as caught:
        compile_spec(load_spec_text(text, "t.yaml"))
    (issue,) = caught.value.issues
    assert "stages[0].role.tools[0]" in str(issue) and "navigation_tools: true" in str(issue)
    on = text.replace("{extract_knowledge: true}", "{navigation_tools: true}")
    assert compile_spec(load_spec_text(on, "t.yaml")).stage("look").role is not None


def test_the_interpreters_tool_names_are_the_navigation_modules() -> None:
    assert {t["name"] for t in NAVIGATION_TOOLS} | set(LEGACY_TOOL_NAMES) == FACT_TOOLS
