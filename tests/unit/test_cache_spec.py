"""``cache:`` on a stage: its defaults, durations, the compiled PlanStage, which calls it turns
on (exact: temperature 0 unless set; semantic: opt-in), and the errors it gives (a stage with
tools or none, an unknown verify tier)."""

from __future__ import annotations

from typing import Any

import pytest

from armature_temporal.cache.keys import exact_key, partition_key, render_messages, task_of
from armature_temporal.errors import SpecError
from armature_temporal.runtime.models import LLMCallInput
from armature_temporal.spec.caching import StageCache
from tests.fakes import plan_from


def spec(stage_extra: str, role: str = "") -> str:
    return f"""\
name: cached
stages:
  - id: a
    role: {{description: "Answer {{{{ inputs.q }}}}"{role}}}
{stage_extra}"""


def test_defaults_and_durations() -> None:
    c = StageCache()
    assert (c.exact, c.semantic, c.threshold, c.ttl, c.scope) == (
        None,
        False,
        None,
        604800,
        "spec_version",
    )
    assert StageCache(ttl="12h").ttl == 43200 and c.max_entries == 10000
    plan = plan_from(spec("    cache: {semantic: true, ttl: 1d, scope: spec, threshold: 0.95}\n"))
    cache = plan.stage("a").cache
    assert cache is not None and cache.semantic and cache.ttl == 86400 and cache.scope == "spec"


def test_the_decider_defaults_to_the_classifier_and_a_threshold_keeps_the_rule() -> None:
    assert StageCache().semantic_decider == "classifier"
    assert StageCache(threshold=0.95).semantic_decider == "rule"  # specs that set one keep it
    assert StageCache(threshold=0.95, decider="classifier").semantic_decider == "classifier"
    assert StageCache(decider="rule").semantic_decider == "rule"
    plan = plan_from(spec("    cache: {semantic: true, decider: rule}\n"))
    cache = plan.stage("a").cache
    assert cache is not None and cache.semantic_decider == "rule"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("    cache: {semantic: true, verify_tier: nope}\n", "unknown tier 'nope'"),
        ("    cache: {threshold: 1.5}\n", "less than or equal to 1"),
        ("    cache: {ttl: soon}\n", "is not a duration"),
    ],
)
def test_bad_cache_settings_are_named(extra: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        plan_from(spec(extra))
    assert message in str(info.value) + "".join(str(i) for i in info.value.issues)


def test_a_stage_with_tools_cannot_cache() -> None:
    with pytest.raises(SpecError) as info:
        plan_from(spec("    cache: {exact: true}\n", role=", tools: [file_read]"))
    assert "without tools" in "".join(str(i) for i in info.value.issues)


def call(plan: Any, q: str, **params: Any) -> LLMCallInput:
    stage = plan.stage("a")
    assert stage.role is not None
    return LLMCallInput(
        run_id="r",
        stage=stage,
        tier=plan.tiers[stage.role.model_tier],
        prompt_template=stage.role.prompt,
        variables={"inputs": {"q": q}},
        params=params,
        spec_name=plan.name,
    )


def test_the_exact_key_is_the_request() -> None:
    plan = plan_from(spec(""))
    one, same, other = call(plan, "2+2"), call(plan, "2+2"), call(plan, "3+3")
    key = exact_key(one, render_messages(one))
    assert key == exact_key(same, render_messages(same))
    assert key != exact_key(other, render_messages(other))
    warmer = call(plan, "2+2", temperature=0.5)
    assert key != exact_key(warmer, render_messages(warmer))  # sampling params count
    assert "Answer 2+2" in task_of(render_messages(one))
    # The partition is the stage's, not the task's: both questions share it.
    assert partition_key(one, "h", "spec_version") == partition_key(other, "h", "spec_version")
    assert partition_key(one, "h", "spec_version") != partition_key(one, "h2", "spec_version")
    assert partition_key(one, "h", "spec") == partition_key(one, "h2", "spec")
