"""The effort report's pure parts: why a round stopped, and the judge-tier check."""

from __future__ import annotations

import pytest

from armature_temporal.improve.effort import Spent, effort_of, judge_check, stop_of
from armature_temporal.improve.models import ImproveResult
from armature_temporal.improve.render import render_result
from tests.fakes import plan_from

SPEC = """\
name: graded
model_tiers:
  small: {provider: simulate}
  large: {provider: simulate}
stages:
  - id: draft
    role: {name: Drafter, model_tier: small, description: "Write."}
  - id: grade
    depends_on: [draft]
    role: {name: Grader, type: judge, model_tier: large, description: "Score {{ draft }}."}
"""


@pytest.mark.parametrize(
    ("status", "left_out", "reason"),
    [
        ("at_target", 0, "converged"),
        ("no_candidates", 0, "no_candidate"),
        ("too_few_traces", 2, "too_few_traces"),
        ("verifying", 0, "tried_all"),
        ("verifying", 3, "budget"),
    ],
)
def test_stop_reason_follows_the_rounds_status_and_its_leftovers(
    status: str, left_out: int, reason: str
) -> None:
    said, detail = stop_of(status, left_out)
    assert said == reason and detail
    if reason == "budget":
        assert "3 proposal(s)" in detail


def test_a_refiner_on_a_judges_tier_is_flagged_and_one_elsewhere_is_not() -> None:
    plan = plan_from(SPEC)
    tiers, same, note = judge_check(plan, "large")
    assert (tiers, same) == (["large"], True)
    assert "'grade'" in note and "cannot use another judge tier" in note
    assert judge_check(plan, "small") == (["large"], False, "")
    assert judge_check(plan, None) == (["large"], False, "")


def test_effort_adds_the_refiners_tokens_to_the_runs_and_says_it_has_no_held_out_set() -> None:
    plan = plan_from(SPEC)
    spent = Spent(plan=plan, refiner_tier="large", refiner_tokens=120, left_out=1)
    effort = effort_of(plan, spent, "verifying", proposals_tried=2, runs=8, tokens=1000)
    assert (effort.tokens, effort.refiner_tokens, effort.runs) == (1120, 120, 8)
    assert (effort.stop, effort.proposals_left_out, effort.same_tier) == ("budget", 1, True)
    assert effort.held_out_hqs is None and effort.held_out.startswith("none")


def test_armature_improve_prints_the_effort_and_the_same_tier_warning() -> None:
    from rich.console import Console

    plan = plan_from(SPEC)
    spent = Spent(plan=plan, refiner_tier="large", refiner_tokens=120)
    effort = effort_of(plan, spent, "no_candidates", tokens=0)
    console = Console(width=400, record=True)
    console.print(render_result(ImproveResult(status="no_candidates", detail="x", effort=effort)))
    text = console.export_text()
    assert "WARNING same tier: the refiner's tier 'large'" in text
    assert "effort: 0 proposal(s) tried; 0 verification runs, 120 tokens" in text
    assert "stopped: no_candidate" in text and "held-out: none" in text
    console = Console(width=400, record=True)
    console.print(render_result(ImproveResult(status="no_candidates", detail="x")))
    assert "effort: not reported" in console.export_text()
