"""Compiler: Spec -> frozen Plan with everything resolved."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from armature_temporal.spec.compiler import DEFAULT_JUDGE_SCHEMA, compile_spec, load_plan
from armature_temporal.spec.loader import load_spec, load_spec_text

SPECS = Path(__file__).resolve().parents[2] / "specs"


def plan_of(text: str):  # type: ignore[no-untyped-def]
    return compile_spec(load_spec_text(text, base_dir=SPECS))


def test_same_spec_gives_byte_identical_plan_json() -> None:
    first = load_plan(SPECS / "customer-triage.yaml").to_json()
    second = load_plan(SPECS / "customer-triage.yaml").to_json()
    assert first == second
    assert len(first) > 500


def test_comments_and_key_order_do_not_change_spec_hash_but_content_does() -> None:
    a = plan_of("name: h\nstages:\n  - id: a\n    role: {name: A, description: x}\n")
    b = plan_of("# c\nstages:\n  - role: {description: x, name: A}\n    id: a\nname: h\n")
    c = plan_of("name: h\nstages:\n  - id: a\n    role: {name: A, description: y}\n")
    assert a.spec_hash == b.spec_hash
    assert a.spec_hash != c.spec_hash


def test_policy_version_changes_only_with_safety_rules() -> None:
    base = "name: p\nstages:\n  - id: a\n    role: {name: A, description: x}\n"
    rules = base + "safety_rules:\n  - {tool: shell, action: block}\n"
    assert plan_of(base).policy_version == plan_of(base.replace("x}", "y}")).policy_version
    assert plan_of(base).policy_version != plan_of(rules).policy_version


def test_role_type_default_tiers() -> None:
    text = """\
name: tiers
stages:
  - {id: w, role: {name: W, type: worker, description: x}}
  - {id: o, role: {name: O, type: orchestrator, description: x}}
  - {id: j, role: {name: J, type: judge, description: x}}
  - {id: r, role: {name: R, type: researcher, description: x}}
"""
    plan = plan_of(text)
    tiers = {s.id: s.role.model_tier for s in plan.stages if s.role}
    assert tiers == {"w": "small", "o": "frontier", "j": "frontier", "r": "large"}


def test_role_type_defaults_override_and_tier_shorthand() -> None:
    text = """\
name: tiers
role_type_defaults:
  worker: medium
  judge: {model_tier: large, temperature: 0.0}
stages:
  - {id: w, role: {name: W, description: x}}
  - {id: j, role: {name: J, type: judge, description: x}}
  - {id: k, role: {name: K, description: x, model_tier: tiny}}
"""
    plan = plan_of(text)
    assert plan.stage("w").role.model_tier == "medium"  # type: ignore[union-attr]
    judge = plan.stage("j").role
    assert judge is not None and judge.model_tier == "large" and judge.temperature == 0.0
    assert plan.stage("k").role.model_tier == "tiny"  # type: ignore[union-attr]


def test_missing_standard_tier_falls_back_to_nearest_declared() -> None:
    text = """\
name: near
model_tiers:
  small: {}
  frontier: {}
stages:
  - {id: r, role: {name: R, type: researcher, description: x}}
"""
    assert plan_of(text).stage("r").role.model_tier == "frontier"  # type: ignore[union-attr]


def test_escalation_ladder_goes_only_upward() -> None:
    text = """\
name: esc
model_tiers: {tiny: {}, small: {}, large: {}}
stages:
  - id: a
    role: {name: A, description: x, model_tier: small}
    on_fail: {loop: {max: 1, backoff_s: 2s}, escalate: true}
"""
    stage = plan_of(text).stage("a")
    assert stage.escalation_ladder == ["large"]
    assert stage.max_attempts == 2 and stage.backoff_s == 2.0


def test_judge_gets_default_contract() -> None:
    stage = plan_of(
        "name: j\nstages:\n  - {id: j, role: {name: J, type: judge, description: x}}\n"
    ).stage("j")
    assert stage.output_mode == "json" and stage.output_schema == DEFAULT_JUDGE_SCHEMA


def test_topological_order_keeps_spec_order_for_ties_and_post_run_last() -> None:
    text = """\
name: topo
stages:
  - {id: z, post_run: true, role: {name: Z, description: x}}
  - {id: c, depends_on: [b], role: {name: C, description: x}}
  - {id: b, role: {name: B, description: x}}
  - {id: a, role: {name: A, description: x}}
"""
    assert [s.id for s in plan_of(text).stages] == ["b", "c", "a", "z"]


def test_subagent_plan_is_inlined_and_changes_parent_hash(tmp_path: Path) -> None:
    child = tmp_path / "child.yaml"
    child.write_text("name: child\nstages:\n  - {id: s, role: {name: S, description: x}}\n")
    parent = tmp_path / "parent.yaml"
    parent.write_text("name: parent\nstages:\n  - {id: f, subagent_spec: child.yaml, fan_out: 3}\n")
    plan = compile_spec(load_spec(parent))
    assert plan.children["f"].name == "child"
    stage = plan.stage("f")
    assert stage.kind == "fan_out" and stage.fan_out == 3 and stage.fan_in == "list"
    before = plan.spec_hash
    child.write_text("name: child\nstages:\n  - {id: s, role: {name: S, description: y}}\n")
    assert compile_spec(load_spec(parent)).spec_hash != before


def test_default_tiers_are_simulate_ladder() -> None:
    plan = plan_of("name: d\nstages:\n  - {id: a, role: {name: A, description: x}}\n")
    assert plan.tier_ladder == ["tiny", "small", "medium", "large", "frontier"]
    assert {t.provider for t in plan.tiers.values()} == {"simulate"}
    assert plan.tiers["tiny"].valid_rate < plan.tiers["frontier"].valid_rate


def test_plan_is_frozen() -> None:
    plan = plan_of("name: d\nstages:\n  - {id: a, role: {name: A, description: x}}\n")
    with pytest.raises(ValidationError):
        plan.name = "other"  # type: ignore[misc]


def test_arms_inherit_stage_tier_and_prompt() -> None:
    text = """\
name: arms
stages:
  - id: a
    role: {name: A, description: base prompt, model_tier: small}
    arms:
      - {arm_id: cheap}
      - {arm_id: strong, model_tier: frontier, description: other prompt,
         params: {temperature: 0.2}}
"""
    arms = plan_of(text).stage("a").arms
    assert [(a.arm_id, a.model_tier, a.prompt) for a in arms] == [
        ("cheap", "small", "base prompt"),
        ("strong", "frontier", "other prompt"),
    ]
    assert arms[1].params == {"temperature": 0.2}


def test_every_example_spec_compiles() -> None:
    specs = sorted(SPECS.glob("*.yaml"))
    assert len(specs) >= 5
    for path in specs:
        plan = load_plan(path)
        assert plan.stages, path
