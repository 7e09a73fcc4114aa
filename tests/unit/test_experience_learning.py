"""The experience loop's pure parts: memory CI's Holm-adjusted decisions, the critic's view of
an output, and how trajectories split into successes and failures."""

from __future__ import annotations

from armature_temporal.experience.critic import critic_view, output_text, read_critique
from armature_temporal.experience.distill import Trajectory, split
from armature_temporal.experience.verify import FAMILY_ALPHA, PairedScores, decide


def _test(hid: str, gains: list[float]) -> PairedScores:
    base = [0.5] * len(gains)
    return PairedScores(
        heuristic_id=hid, baseline=base, candidate=[b + g for b, g in zip(base, gains, strict=True)]
    )


def test_a_clear_gain_is_promoted_and_a_zero_gain_rejected() -> None:
    good, useless = decide([_test("h-good", [0.1] * 6 + [0.0] * 2), _test("h-zero", [0.0] * 8)])
    assert good.verdict == "promoted" and good.figures["adj_ci_low"] > 0
    assert useless.verdict == "rejected" and useless.figures["delta"] == 0
    assert "not shown to help" in useless.reason
    for d in (good, useless):
        assert d.figures["m"] == 2 and d.figures["n"] == 8
    assert good.figures["holm_rank"] == 1 and good.figures["alpha_adj"] == FAMILY_ALPHA / 2
    assert useless.figures["holm_rank"] == 2 and useless.figures["alpha_adj"] == FAMILY_ALPHA


def test_holm_widens_the_interval_with_more_heuristics_tested() -> None:
    # Four gains in 16 pairs: a resample draws none of them 1% of the time, so the 95%
    # interval is above 0 but the 1 - 0.05/5 one (Holm's first of five) is not.
    weak = [0.1] * 4 + [0.0] * 12
    (alone,) = decide([_test("h-weak", weak)])
    assert alone.figures["ci_low"] > 0 and alone.verdict == "promoted"
    zeros = [_test(f"h-{k}", [0.0] * 16) for k in range(4)]
    crowd = decide([_test("h-weak", weak), *zeros])
    weak_then = crowd[0]
    assert weak_then.figures["ci_low"] == alone.figures["ci_low"]  # the 95% figures stay
    assert weak_then.figures["alpha_adj"] < FAMILY_ALPHA / 2
    assert weak_then.verdict == "rejected", weak_then.reason


def test_too_few_scored_pairs_reject() -> None:
    (d,) = decide(
        [PairedScores(heuristic_id="h-x", baseline=[0.5, None, None], candidate=[0.9, 0.9, None])]
    )
    assert d.verdict == "rejected" and "only 1 of 3" in d.reason


def test_the_critic_never_sees_self_assessment() -> None:
    output = {"answer": "Paris", "confidence": 0.99, "nested": [{"self_score": 10, "why": "x"}]}
    assert critic_view(output) == {"answer": "Paris", "nested": [{"why": "x"}]}
    assert "0.99" not in output_text(output) and "Paris" in output_text(output)


def test_a_real_critics_evidence_must_quote_the_output() -> None:
    got = read_critique({"score": 14, "evidence": ["Paris", "made up"]}, {"answer": "Paris"})
    assert got == (10.0, ["Paris"])
    assert read_critique({"score": "high"}, "x") is None


def test_failures_are_below_the_median_or_below_half() -> None:
    t = [
        Trajectory(run_id=f"r{i}", stage_id="s", text=str(i), critic=c)
        for i, c in enumerate([0.9, 0.8, 0.3, 0.7, None])
    ]
    successes, failures = split(t)
    assert [x.run_id for x in failures] == ["r2", "r3"]
    assert [x.run_id for x in successes] == ["r0", "r1"]
    all_low = [Trajectory(run_id="a", stage_id="s", text="", critic=0.2, judge=0.4)]
    assert split(all_low) == ([], all_low)
