"""Combining a round's verified changes (issue #17, item 4): which ones are combined, and the
two tests a combination must pass to be settled instead of the singles."""

from __future__ import annotations

from armature_temporal.improve.combine import choose, combine, decide_combined
from armature_temporal.improve.decide import Scored
from armature_temporal.improve.models import Proposal, SpecChange, VerificationTest
from tests.fakes import plan_from

SPEC = """\
name: pair
model_tiers:
  small: {provider: simulate}
  frontier: {provider: simulate}
self_improvement:
  editable_surfaces: [a.model_tier, b.model_tier, a.temperature]
stages:
  - id: a
    role: {name: A, model_tier: small, description: Say a.}
  - id: b
    role: {name: B, model_tier: small, description: Say b.}
"""
PLAN = plan_from(SPEC)


def _proposal(
    pid: str,
    stage: str,
    field: str,
    new: object,
    *,
    ci_low: float = 0.1,
    verdict: str = "verified",
    kind: str = "superiority",
    old: object = "small",
) -> Proposal:
    return Proposal(
        id=pid,
        spec_name="pair",
        improve_run_id="r",
        created_at="2026-01-01T00:00:00",
        base_spec_hash=PLAN.spec_hash,
        candidate_spec_hash="x",
        changes=[SpecChange(stage=stage, field=field, old=old, new=new, why="test")],  # type: ignore[arg-type]
        baseline_hqs=[],
        candidate_hqs=[],
        delta=0.2,
        ci_low=ci_low,
        ci_high=0.3,
        verdict=verdict,  # type: ignore[arg-type]
        detail="",
        diff="",
        spec_text="",
        base_spec_text=SPEC,
        predicted_fixes=[f"output_invalid:{stage}"],
        base_failures=["output_invalid:a", "output_invalid:b"],
        test=VerificationTest(
            kind=kind,  # type: ignore[arg-type]
            m=3,
            holm_rank=1,
            alpha_adj=0.0167,
            p_one_sided=0.001,
            adj_ci_low=ci_low,
            adj_ci_high=0.3,
        ),
    )


A_UP = _proposal("pa", "a", "model_tier", "frontier", ci_low=0.2)
B_UP = _proposal("pb", "b", "model_tier", "frontier", ci_low=0.1)
A_COOL = _proposal("pt", "a", "model_tier", "small", ci_low=0.05, old="small")


def test_choose_keeps_the_better_of_two_changes_to_one_surface_and_skips_unverified() -> None:
    weak_a = _proposal("pa2", "a", "model_tier", "frontier", ci_low=0.01)
    lost = _proposal("pl", "a", "temperature", 0.1, verdict="not_better", old=None)
    assert [p.id for p in choose([B_UP, weak_a, lost, A_UP])] == ["pa", "pb"]


def test_combine_applies_both_changes_and_the_result_compiles() -> None:
    found = combine(SPEC, [B_UP, A_UP], filename="pair.yaml", base_dir=None)
    combo = found.combination
    assert combo is not None, found.detail
    assert combo.members == ["pa", "pb"] and combo.best == "pa"
    stage_a, stage_b = combo.plan.stage("a").role, combo.plan.stage("b").role
    assert stage_a is not None and stage_b is not None
    assert stage_a.model_tier == stage_b.model_tier == "frontier"
    assert combo.diff.count("+    role: {name:") == 2


def test_combine_needs_two_members_that_apply_together() -> None:
    # One verified change, or a second one whose recorded old value is no longer the text's.
    alone = combine(SPEC, [A_UP], filename="pair.yaml", base_dir=None)
    assert alone.combination is None and "2 are needed" in alone.detail
    stale = _proposal("ps", "b", "model_tier", "frontier", old="medium")
    found = combine(SPEC, [A_UP, stale], filename="pair.yaml", base_dir=None)
    assert found.combination is None
    assert "ps does not apply beside the others" in found.detail


BASE = [0.5] * 10
BEST = [0.7] * 10


def _decide(combined: list[float], members: list[Proposal] | None = None, m: int = 3):  # type: ignore[no-untyped-def]
    return decide_combined(
        PLAN,
        members or [A_UP, B_UP],
        m,
        Scored(hqs=list(BASE), units=[2.0] * 10),
        Scored(hqs=list(BEST), units=[3.0] * 10),
        Scored(hqs=list(combined), units=[4.0] * 10),
    )


def test_a_combination_better_than_the_baseline_and_the_best_single_verifies() -> None:
    judged = _decide([0.9, 0.85] * 5)
    assert judged.verdict == "verified", judged.detail
    assert judged.test.m == 4 and judged.test.alpha_adj == 0.0125  # 0.05 / (m + 1)
    assert judged.test.kind == "superiority" and judged.delta > 0.3
    assert "decided at 0.05/4" in judged.detail and "passes;" in judged.detail


def test_a_combination_worse_than_the_best_single_is_not_settled() -> None:
    # Well above the baseline (+0.1), but 0.1 behind the best single: beyond the margin.
    judged = _decide([0.6] * 10)
    assert judged.verdict == "not_better", judged.detail
    assert judged.test.adj_ci_low > 0  # the baseline test alone would have passed
    assert "vs the best single pa, non-inferiority (margin 0.02)" in judged.detail
    assert judged.detail.endswith("does not pass")


def test_a_combination_no_better_than_the_baseline_is_not_settled() -> None:
    judged = _decide([0.5, 0.52, 0.48, 0.5, 0.5] * 2)
    assert judged.verdict == "not_better" and judged.test.adj_ci_low <= 0


def test_cost_saving_members_make_a_non_inferiority_combination_that_must_cost_less() -> None:
    down_a = _proposal("da", "a", "model_tier", "small", kind="non_inferiority")
    down_b = _proposal("db", "b", "model_tier", "small", kind="non_inferiority")
    # Same HQS as both; costs 4 tier units against the baseline's 2: no saving.
    judged = decide_combined(
        PLAN,
        [down_a, down_b],
        2,
        Scored(hqs=list(BASE), units=[2.0] * 10),
        Scored(hqs=list(BASE), units=[1.5] * 10),
        Scored(hqs=list(BASE), units=[4.0] * 10),
    )
    assert judged.test.kind == "non_inferiority" and judged.verdict == "not_better"
    cheaper = decide_combined(
        PLAN,
        [down_a, down_b],
        2,
        Scored(hqs=list(BASE), units=[2.0] * 10),
        Scored(hqs=list(BASE), units=[1.5] * 10),
        Scored(hqs=list(BASE), units=[1.0] * 10),
    )
    assert cheaper.verdict == "verified", cheaper.detail
    assert "cost 2 → 1 tier units" in cheaper.detail


def test_pairs_without_a_score_on_any_side_are_left_out() -> None:
    judged = decide_combined(
        PLAN,
        [A_UP, B_UP],
        3,
        Scored(hqs=[0.5, None, 0.5]),
        Scored(hqs=[0.7, 0.7, None]),
        Scored(hqs=[0.9, 0.9, 0.9]),
    )
    assert judged.verdict == "failed" and "only 1 of 3 inputs" in judged.detail
