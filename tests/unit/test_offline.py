"""Offline trials (`--simulate`): a compiled plan with every tier on the simulate provider."""

from __future__ import annotations

import tempfile
from pathlib import Path

from armature_temporal.spec.compiler import DEFAULT_SIMULATE_TIERS, Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.offline import real_tiers, simulated, simulated_hash

REAL_CHILD = """\
name: child
inputs: [partition]
model_tiers:
  small: {provider: anthropic, model: claude-3-5-haiku, api_key_env: MY_KEY, temperature: 0.1}
stages:
  - id: look
    role: {name: Looker, model_tier: small, description: "{{ inputs.partition }}"}
"""

REAL_PARENT = """\
name: parent
inputs: [items]
model_tiers:
  small: {provider: openai, model: gpt-4o-mini, max_tokens: 300, params: {top_p: 0.9}}
  house: {provider: openrouter, model: x/y, api_base: "http://models.internal", temperature: 0.3}
  frontier: {provider: simulate, valid_rate: 0.5, quality: 0.4, latency_ms: 7}
stages:
  - id: draft
    role: {name: Drafter, model_tier: small, description: "{{ inputs.items }}"}
    on_fail: {escalate: true, loop: {max: 2}}
  - id: fan
    depends_on: [draft]
    subagent_spec: child.yaml
    fan_out: 2
    partition_key: inputs.items
"""


def compiled(text: str, children: dict[str, str] | None = None) -> Plan:
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in (children or {}).items():
            (Path(tmp) / name).write_text(body)
        return compile_spec(load_spec_text(text, "test.yaml", base_dir=Path(tmp)))


def test_every_tier_of_the_plan_and_its_children_goes_on_simulate() -> None:
    plan = compiled(REAL_PARENT, {"child.yaml": REAL_CHILD})
    offline = simulated(plan)
    assert {t.provider for t in offline.tiers.values()} == {"simulate"}
    assert {t.provider for t in offline.children["fan"].tiers.values()} == {"simulate"}
    assert real_tiers(offline) == []
    assert [(owner, t.name) for owner, t in real_tiers(plan)] == [
        ("parent", "small"),
        ("parent", "house"),
        ("child", "small"),
    ]
    # The input plan is untouched (plans are frozen; this is a copy).
    assert plan.tiers["small"].provider == "openai"


def test_tier_names_and_ladder_stay_and_provider_fields_go() -> None:
    plan = compiled(REAL_PARENT, {"child.yaml": REAL_CHILD})
    offline = simulated(plan)
    assert list(offline.tiers) == list(plan.tiers)
    assert offline.tier_ladder == plan.tier_ladder
    assert offline.stage("draft") == plan.stage("draft")  # escalation ladder included
    small = offline.tiers["small"]
    assert (small.model, small.api_base, small.api_key_env, small.params, small.adapter) == (
        None,
        None,
        None,
        {},
        None,
    )
    assert small.max_tokens == 300
    assert offline.tiers["house"].temperature == 0.3
    assert offline.children["fan"].tiers["small"].temperature == 0.1
    assert offline.children["fan"].tiers["small"].api_key_env is None


def test_standard_tiers_get_the_simulate_ladder_and_others_the_large_one() -> None:
    offline = simulated(compiled(REAL_PARENT, {"child.yaml": REAL_CHILD}))
    small, house = offline.tiers["small"], offline.tiers["house"]
    assert (small.valid_rate, small.quality) == tuple(DEFAULT_SIMULATE_TIERS["small"].values())
    assert (house.valid_rate, house.quality) == tuple(DEFAULT_SIMULATE_TIERS["large"].values())


def test_a_simulate_tier_keeps_the_authors_knobs() -> None:
    offline = simulated(compiled(REAL_PARENT, {"child.yaml": REAL_CHILD}))
    frontier = offline.tiers["frontier"]
    assert (frontier.valid_rate, frontier.quality, frontier.latency_ms) == (0.5, 0.4, 7.0)


def test_spec_hash_changes_to_one_that_names_the_original() -> None:
    plan = compiled(REAL_PARENT, {"child.yaml": REAL_CHILD})
    offline = simulated(plan)
    assert offline.spec_hash == simulated_hash(plan.spec_hash) != plan.spec_hash
    child = plan.children["fan"]
    assert offline.children["fan"].spec_hash == simulated_hash(child.spec_hash)
    assert len(offline.spec_hash) == len(plan.spec_hash)  # still a sha256 hex digest
    # Deterministic: the same trial of the same version is one series.
    assert simulated(plan).to_json() == offline.to_json()
    # And it round-trips as a Plan (what the workflow receives).
    assert Plan.model_validate_json(offline.to_json()) == offline


def test_a_plan_already_all_simulate_is_returned_as_it_is() -> None:
    plan = compiled("name: q\nstages:\n  - id: a\n    role: {name: A, description: x}\n")
    assert simulated(plan) is plan


def test_only_the_parent_changes_when_only_its_tiers_are_real() -> None:
    sim_child = (
        "name: child\ninputs: [partition]\n"
        "stages:\n  - id: a\n    role: {name: A, description: x}\n"
    )
    plan = compiled(REAL_PARENT, {"child.yaml": sim_child})
    offline = simulated(plan)
    assert offline.children["fan"] is plan.children["fan"]
    assert offline.spec_hash == simulated_hash(plan.spec_hash)
