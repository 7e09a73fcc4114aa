"""Sound statistics of the improvement loop: Holm across one round's candidates, and the
non-inferiority test that decides cost-saving changes (and only those)."""

from __future__ import annotations

import pytest

from armature_temporal.improve.decide import Scored, _verdict, decide_round
from armature_temporal.improve.models import SpecChange, VerificationTest
from armature_temporal.improve.propose import cost_saving
from armature_temporal.improve.stats import holm
from armature_temporal.spec.compiler import Plan
from tests.fakes import plan_from
from tests.unit.test_improve_core import PLAN, propose, stats

# Mean +0.027 over 12 inputs: its 95% interval is [+0.003, +0.046], its 98.3% one
# (0.05 / 3) [-0.001, +0.048].
BORDERLINE = [0.05] * 7 + [0.0, 0.0, -0.04, 0.06, -0.05]
CLEAR = [0.3] * 12
NOISE = [0.1, -0.1] * 6


def test_holm_alone_a_borderline_gain_passes_at_95() -> None:
    (alone,) = holm([BORDERLINE], [0.0])
    assert alone.m == 1 and alone.rank == 1 and alone.alpha_adj == 0.05
    assert alone.passed and alone.adj_ci_low > 0


def test_holm_the_same_borderline_gain_fails_when_m_grows() -> None:
    # Two useless candidates beside it: it ranks first but is decided at 0.05 / 3.
    results = holm([BORDERLINE] + [NOISE] * 2, [0.0] * 3)
    first = results[0]
    assert first.m == 3 and first.rank == 1 and first.alpha_adj == round(0.05 / 3, 5)
    assert first.adj_ci_low <= 0 and not first.passed
    assert not any(r.passed for r in results)


def test_holm_steps_down_and_blocks_after_a_failure() -> None:
    results = holm([NOISE, CLEAR, BORDERLINE], [0.0, 0.0, 0.0])
    by_rank = sorted(results, key=lambda r: r.rank)
    assert [r.alpha_adj for r in by_rank] == [round(0.05 / 3, 5), 0.025, 0.05]
    assert results[1].passed and results[1].rank == 1  # the clear gain: smallest p
    assert not results[0].passed  # noise


def test_holm_needs_one_bound_per_test() -> None:
    with pytest.raises(ValueError, match="one bound per test"):
        holm([CLEAR], [0.0, 0.0])


def test_a_test_with_one_pair_fails_and_counts_in_m() -> None:
    one, clear = holm([[0.5], CLEAR], [0.0, 0.0])
    assert (
        not one.passed
        and one.p_one_sided == 1.0
        and (one.adj_ci_low, one.adj_ci_high)
        == (
            -1.0,
            1.0,
        )
    )
    assert clear.m == 2 and clear.passed


# --- non-inferiority ---------------------------------------------------------------------

SMALL_LOSS = [0.0] * 9 + [-0.02, -0.01, 0.0]  # mean -0.0025, well inside a 0.02 margin
BIG_LOSS = [-0.1] * 6 + [-0.05] * 6  # mean -0.075, beyond it


def _test(h, kind: str, margin: float, b_cost: float, c_cost: float) -> VerificationTest:  # type: ignore[no-untyped-def]
    return VerificationTest(
        kind=kind,  # type: ignore[arg-type]
        margin=margin,
        m=h.m,
        holm_rank=h.rank,
        alpha_adj=h.alpha_adj,
        p_one_sided=h.p_one_sided,
        adj_ci_low=h.adj_ci_low,
        adj_ci_high=h.adj_ci_high,
        baseline_cost=b_cost,
        candidate_cost=c_cost,
        cost_unit="tier units",
    )


def test_non_inferiority_accepts_a_saving_with_a_loss_within_the_margin() -> None:
    (h,) = holm([SMALL_LOSS], [-0.02])
    assert h.passed and -0.02 < h.adj_ci_low < 0
    verdict, detail = _verdict(
        _test(h, "non_inferiority", 0.02, 4.0, 3.0), h.passed, h.blocked, -0.0025, 12, 12
    )
    assert verdict == "verified"
    assert detail.startswith("non-inferiority test (margin 0.02 HQS)")
    assert "rank 1 of 1" in detail and "cost per run 4 → 3 tier units" in detail
    # The same scores under a superiority test do not verify: the change does not help.
    (sup,) = holm([SMALL_LOSS], [0.0])
    assert not sup.passed
    assert _verdict(_test(sup, "superiority", 0.0, 4, 3), False, False, -0.0025, 12, 12)[0] == (
        "not_better"
    )


def test_non_inferiority_rejects_a_loss_beyond_the_margin() -> None:
    (h,) = holm([BIG_LOSS], [-0.02])
    assert not h.passed and h.adj_ci_low < -0.02
    verdict, detail = _verdict(
        _test(h, "non_inferiority", 0.02, 4, 3), h.passed, h.blocked, -0.075, 12, 12
    )
    assert verdict == "not_better" and "may lose more than the margin" in detail


def test_non_inferiority_without_a_cost_fall_is_not_better() -> None:
    (h,) = holm([[0.0] * 12], [-0.02])
    assert h.passed
    verdict, detail = _verdict(_test(h, "non_inferiority", 0.02, 3, 3), True, False, 0.0, 12, 12)
    assert verdict == "not_better" and "no saving" in detail


# --- which changes are cost-saving -------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "field", "new", "saving"),
    [
        ("summary", "model_tier", "tiny", True),  # small -> tiny: down the ladder
        ("summary", "model_tier", "medium", False),  # up
        ("summary", "max_tokens", 256, True),  # below small's 512
        ("summary", "max_tokens", 1024, False),
        ("summary", "temperature", 0.1, False),  # never: not a cost
        ("summary", "description", "Be brief.", False),
    ],
)
def test_cost_saving_reads_the_surface_and_the_direction(
    stage: str, field: str, new: object, saving: bool
) -> None:
    change = SpecChange(stage=stage, field=field, new=new, why="x")  # type: ignore[arg-type]
    assert cost_saving(PLAN, change) is saving


def test_an_easy_stage_gets_a_tier_down_and_a_struggling_one_does_not() -> None:
    (down,) = propose(stats("summary"), surfaces=["summary.model_tier"])
    assert (down.field, down.new) == ("model_tier", "tiny")
    assert "non-inferiority" in down.why and cost_saving(PLAN, down)
    assert propose(stats("summary", first_try_rate=0.9), surfaces=["summary.model_tier"]) == []
    assert propose(stats("summary", judge_score=0.6), surfaces=["summary.model_tier"])[0].new == (
        "medium"
    )


# --- one round: decide_round -------------------------------------------------------------

ROUND_SPEC = """
name: round
model_tiers:
  small: {provider: simulate}
  large: {provider: simulate}
self_improvement:
  editable_surfaces: [a.model_tier, a.description]
@MARGIN@stages:
  - id: a
    role:
      name: A
      model_tier: large
      description: Say hi.
"""


def _round_plan(margin: str = "") -> Plan:
    return plan_from(ROUND_SPEC.replace("@MARGIN@", margin))


DOWN = SpecChange(stage="a", field="model_tier", old="large", new="small", why="easy")
TEXT = SpecChange(stage="a", field="description", old="Say hi.", new="Say hello.", why="x")
BASE = Scored(hqs=[0.9] * 12, units=[2.0] * 12, usd=[0.0] * 12)


def _cand(diffs: list[float], units: float = 1.0) -> Scored:
    return Scored(hqs=[0.9 + d for d in diffs], units=[units] * 12, usd=[0.0] * 12)


def test_the_margin_field_decides_how_much_a_saving_may_lose() -> None:
    loss = _cand(BIG_LOSS)  # mean -0.075
    (default,) = decide_round(_round_plan(), [DOWN], BASE, [loss])
    assert default.verdict == "not_better" and default.test.margin == 0.02
    wide = _round_plan("  noninferiority_margin: 0.15\n")
    (loose,) = decide_round(wide, [DOWN], BASE, [loss])
    assert loose.verdict == "verified" and loose.test.margin == 0.15
    assert loose.test.baseline_cost == 2.0 and loose.test.candidate_cost == 1.0
    assert "cost per run 2 → 1 tier units (simulate costs 0 USD" in loose.detail


def test_a_non_cost_change_is_never_judged_by_non_inferiority() -> None:
    wide = _round_plan("  noninferiority_margin: 0.15\n")
    within = _cand(SMALL_LOSS)  # would pass non-inferiority; cheaper too
    down, text = decide_round(wide, [DOWN, TEXT], BASE, [within, within])
    assert down.test.kind == "non_inferiority" and down.verdict == "verified"
    assert text.test.kind == "superiority" and text.test.margin == 0.0
    assert text.verdict == "not_better" and text.detail.startswith("superiority test:")
    assert {down.test.m, text.test.m} == {2} and {down.test.holm_rank, text.test.holm_rank} == {
        1,
        2,
    }


def test_costs_in_usd_win_over_the_tier_proxy() -> None:
    base = Scored(hqs=[0.9] * 12, units=[2.0] * 12, usd=[0.004] * 12)
    cand = Scored(hqs=[0.9] * 12, units=[1.0] * 12, usd=[0.001] * 12)
    (j,) = decide_round(_round_plan(), [DOWN], base, [cand])
    assert j.verdict == "verified" and j.test.cost_unit == "usd"
    assert (j.test.baseline_cost, j.test.candidate_cost) == (0.004, 0.001)


def test_a_round_with_one_scored_pair_fails() -> None:
    cand = Scored(hqs=[0.9] + [None] * 11, units=[1.0] * 12, usd=[0.0] * 12)
    (j,) = decide_round(_round_plan(), [DOWN], BASE, [cand])
    assert j.verdict == "failed" and "only 1 of 12" in j.detail
