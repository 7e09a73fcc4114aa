"""When an adapter is verified (armature_temporal.finetune.verify): its held-out loss must beat
the base model's, and paired runs of the spec with it must be no worse than without it
(non-inferiority, Holm across a round's adapters); with fewer than 5 pairs it cannot be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from armature_temporal.finetune.models import Example, PreferenceReport, TrainReport
from armature_temporal.finetune.train import split_examples
from armature_temporal.finetune.verify import (
    MIN_PAIRS,
    Evidence,
    base_loss,
    beats_base,
    decide_adapters,
    heldout_beats_base,
    heldout_inputs,
    judged_stages,
    preference_beats_base,
    with_adapter,
)
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text

SAME = [0.9, 0.8, 1.0, 0.7, 0.9, 0.85, 0.95, 0.8]


def _evidence(
    without: Sequence[float | None] | None,
    with_adapter: Sequence[float | None] | None,
    *,
    base: float = 2.0,
    held: float = 1.2,
) -> Evidence:
    return Evidence(
        base_loss=base,
        heldout_loss=held,
        eval_examples=8,
        without=None if without is None else list(without),
        with_adapter=None if with_adapter is None else list(with_adapter),
    )


def test_loss_below_the_base_and_paired_runs_no_worse_is_verified() -> None:
    (check,) = decide_adapters([_evidence(SAME, list(SAME))])
    assert check.verdict == "verified"
    assert (check.paired_diff, check.paired_ci_low, check.paired_ci_high) == (0.0, 0.0, 0.0)
    assert check.paired_n == len(SAME)
    assert check.base_loss == 2.0 and check.heldout_loss == 1.2
    assert "non-inferiority (margin 0.02 HQS)" in check.detail
    assert "held-out reply loss 1.200 with the adapter vs 2.000 for the base model" in (
        check.detail
    )


def test_an_adapter_no_judge_can_see_is_unmeasurable_never_verified() -> None:
    """specs/distill.yaml has no judge: an adapter whose replies were noise tied with the base
    model (+0.000 [+0.000, +0.000]) and was called verified."""
    unjudged = _evidence(SAME, list(SAME)).model_copy(update={"judged": False, "stage": "s"})
    (check,) = decide_adapters([unjudged])
    assert check.verdict == "unmeasurable"
    assert "no judge that reads text reads 's'" in check.detail
    assert "add a judge stage" in check.detail
    assert check.paired_n == len(SAME)  # the figures are kept with the verdict
    # What the measure does see still counts: worse paired runs are paired_worse.
    worse = unjudged.model_copy(update={"with_adapter": [s - 0.2 for s in SAME]})
    assert decide_adapters([worse])[0].verdict == "paired_worse"


def test_judged_stages_are_those_a_judge_reads_directly_or_through_others() -> None:
    plan = compile_spec(
        load_spec_text(
            """\
name: judged
model_tiers:
  small: {provider: simulate}
  real: {provider: openai, model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
stages:
  - {id: a, role: {name: A, description: x, model_tier: small}}
  - {id: b, role: {name: B, description: "{{ a.content }}", model_tier: small}}
  - {id: c, role: {name: C, description: x, model_tier: small}}
  - {id: d, role: {name: D, description: x, model_tier: small}}
  - {id: j, depends_on: [b], role: {name: J, type: judge, description: "{{ b.content }}",
     model_tier: real}}
  - {id: s, depends_on: [d], role: {name: S, type: judge, description: "{{ d.content }}",
     model_tier: small}}
""",
            "judged.yaml",
        )
    )
    # d is judged only by a simulated judge, which scores latent quality, not text.
    assert judged_stages(plan) == {"a", "b"}


def test_beating_the_base_loss_but_scoring_worse_in_paired_runs_is_not_verified() -> None:
    worse = [s - 0.2 for s in SAME]
    (check,) = decide_adapters([_evidence(SAME, list(worse))])
    assert check.verdict == "paired_worse"
    assert check.paired_diff == pytest.approx(-0.2)
    assert check.paired_ci_high is not None and check.paired_ci_high < 0
    assert "the spec may score worse with it" in check.detail


def test_a_loss_within_the_margin_is_non_inferior_and_one_beyond_it_is_not() -> None:
    # Down by 0.01 on every pair: within the 0.02 margin; by 0.03: beyond it.
    (within,) = decide_adapters([_evidence(SAME, [s - 0.01 for s in SAME])])
    (beyond,) = decide_adapters([_evidence(SAME, [s - 0.03 for s in SAME])])
    assert within.verdict == "verified"
    assert beyond.verdict == "paired_worse"
    (wider,) = decide_adapters([_evidence(SAME, [s - 0.03 for s in SAME])], margin=0.05)
    assert wider.verdict == "verified"


def test_a_held_out_loss_not_below_the_base_models_is_not_better_whatever_the_runs() -> None:
    better_runs = [min(s + 0.1, 1.0) for s in SAME]
    (check,) = decide_adapters([_evidence(SAME, better_runs, base=1.5, held=1.5)])
    assert check.verdict == "not_better"
    assert "not below the base model's" in check.detail
    (worse,) = decide_adapters([_evidence(None, None, base=1.5, held=1.9)])
    assert worse.verdict == "not_better" and worse.paired_n == 0
    assert worse.paired_diff is None


def test_fewer_than_five_pairs_is_insufficient_evidence_never_verified() -> None:
    few = SAME[: MIN_PAIRS - 1]
    (check,) = decide_adapters([_evidence(few, list(few))])
    assert check.verdict == "insufficient_evidence"
    assert check.paired_n == MIN_PAIRS - 1
    assert "fewer than 5 paired runs" in check.detail and "finetune.eval_share" in check.detail
    # Unfinished runs do not count as pairs: 8 runs, 4 with both sides scored.
    gaps: list[float | None] = [None, 0.9, None, 0.8, None, 0.9, None, 0.7]
    (holey,) = decide_adapters([_evidence(SAME, gaps)])
    assert holey.verdict == "insufficient_evidence" and holey.paired_n == 4
    (none,) = decide_adapters([_evidence(None, None)])
    assert none.verdict == "insufficient_evidence" and none.paired_n == 0
    assert "no paired runs" in none.detail


def test_a_rounds_adapters_are_one_holm_family() -> None:
    # Alone, this adapter's 95% interval clears -0.02; beside a second adapter that fails, it
    # is held to 97.5% (Holm, m = 2) and does not.
    edge: list[float | None] = list(SAME)
    edge[3] = SAME[3] - 0.02
    edge[7] = SAME[7] - 0.04
    (alone,) = decide_adapters([_evidence(SAME, edge)])
    assert alone.verdict == "verified" and alone.alpha_adj == 0.05
    family = decide_adapters([_evidence(SAME, edge), _evidence(SAME, [s - 0.3 for s in SAME])])
    assert [c.verdict for c in family] == ["paired_worse", "paired_worse"]
    assert family[0].alpha_adj == 0.025 and "(rank 1 of 2)" in family[0].detail
    # The unadjusted 95% interval kept with the adapter is the same either way.
    assert (family[0].paired_ci_low, family[0].paired_ci_high) == (
        alone.paired_ci_low,
        alone.paired_ci_high,
    )


def test_base_loss_prefers_the_measurement_with_the_adapter_switched_off() -> None:
    fields: dict[str, Any] = {
        "adapter_dir": "/a",
        "steps": 1,
        "train_examples": 4,
        "eval_examples": 1,
        "train_loss_first": 3.0,
        "train_loss_last": 2.0,
        "eval_loss_before": 3.0,
        "eval_loss_after": 2.5,
        "seconds": 1.0,
        "device": "cpu",
    }
    old = TrainReport.model_validate(fields)
    assert base_loss(old) == 3.0 and beats_base(old)
    new = TrainReport.model_validate({**fields, "base_loss": 2.4})
    assert base_loss(new) == 2.4 and not beats_base(new)


def _example(topic: str, run_id: str, reply: str = "ok") -> Example:
    return Example(
        messages=[{"role": "user", "content": f"Summarise {topic}"}], reply=reply, run_id=run_id
    )


def test_heldout_inputs_are_the_held_out_runs_inputs_never_a_training_one() -> None:
    examples = [_example(f"t{i}", f"run-{i}") for i in range(20)]
    inputs = {f"run-{i}": {"topic": f"t{i}"} for i in range(20)}
    train, held = split_examples(examples, 0.5)
    got = heldout_inputs(examples, 0.5, inputs.get)
    assert got == [inputs[e.run_id] for e in held]
    # One held-out example whose run had the same inputs as a training example's is left out;
    # one whose run kept no inputs too.
    inputs[held[0].run_id] = inputs[train[0].run_id]
    inputs.pop(held[1].run_id)
    again = heldout_inputs(examples, 0.5, inputs.get)
    assert again == [inputs[e.run_id] for e in held[2:]]
    assert heldout_inputs(examples[:1], 0.5, inputs.get) == []


SPEC = """
name: served
model_tiers:
  small: {provider: simulate}
  big: {provider: simulate, quality: 0.95}
  mine: {provider: local, model: /models/tiny, adapter: "latest", max_tokens: 48}
stages:
  - id: draft
    role: {name: Drafter, model_tier: small, description: "Draft {{ inputs.topic }}."}
    output_mode: json
    output_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    on_fail: {escalate: true}
  - id: review
    depends_on: [draft]
    role: {name: Reviewer, model_tier: big, description: "Review {{ draft }}."}
"""


def test_with_adapter_serves_only_that_stage_on_the_base_model_plus_the_adapter() -> None:
    plan = compile_spec(load_spec_text(SPEC, "served.yaml"))
    assert plan.stage("draft").escalate
    served = with_adapter(plan, "draft", "/models/tiny", "/adapters/served/draft/r1")
    stage = served.stage("draft")
    assert stage.role is not None
    tier = served.tiers[stage.role.model_tier]
    assert (tier.provider, tier.model, tier.adapter) == (
        "local",
        "/models/tiny",
        "/adapters/served/draft/r1",
    )
    assert tier.max_tokens == 48  # the spec's own local tier on that base model
    assert not stage.escalate and stage.escalation_ladder == []
    assert served.stage("review") == plan.stage("review")
    assert {k: v for k, v in served.tiers.items() if k != tier.name} == plan.tiers
    assert served.spec_hash != plan.spec_hash
    assert served.tier_ladder == plan.tier_ladder
    with pytest.raises(KeyError, match="no stage 'nope'"):
        with_adapter(plan, "nope", "/models/tiny", "/a")


def _preference(**fields: float | int) -> PreferenceReport:
    base: dict[str, float | int | str] = {
        "adapter_dir": "/a",
        "steps": 10,
        "train_pairs": 30,
        "eval_pairs": 12,
        "beta": 0.1,
        "train_loss_first": 0.693,
        "train_loss_last": 0.2,
        "accuracy": 11 / 12,
        "accuracy_low": 0.646,
        "accuracy_high": 0.985,
        "base_margin_accuracy": 0.25,
        "adapter_margin_accuracy": 0.75,
        "margin_diff": 0.5,
        "margin_diff_low": 0.25,
        "margin_diff_high": 0.75,
        "mean_reward_margin": 1.5,
        "seconds": 1.0,
        "device": "cpu",
    }
    return PreferenceReport.model_validate({**base, **fields})


def test_a_preference_adapter_beats_the_base_only_when_its_interval_clears_one_half() -> None:
    ok, detail = preference_beats_base(_preference())
    assert ok and "held-out preference accuracy 0.917, 95% interval [0.646, 0.985]" in detail
    assert "vs 0.500 for the base model" in detail and "(paired +0.500, [+0.250, +0.750])" in detail
    ok, detail = preference_beats_base(_preference(accuracy=0.6, accuracy_low=0.31))
    assert not ok and detail.endswith("the interval reaches 0.500, not above the base model")
    ok, detail = preference_beats_base(_preference(eval_pairs=4, accuracy=1.0, accuracy_low=0.51))
    assert not ok and "fewer than 5 held-out pairs" in detail


def _preference_evidence(report: PreferenceReport, gain: float, *, judged: bool = True) -> Evidence:
    return Evidence(
        preference=report,
        without=list(SAME),
        with_adapter=[min(1.0, s + gain) if i % 2 else s + gain / 2 for i, s in enumerate(SAME)],
        judged=judged,
        stage="describe",
    )


def test_a_preference_adapter_is_verified_only_when_paired_runs_show_the_spec_better() -> None:
    better, tied, unseen = decide_adapters(
        [
            _preference_evidence(_preference(), 0.05),
            _preference_evidence(_preference(), 0.0),
            _preference_evidence(_preference(), 0.05, judged=False),
        ]
    )
    assert better.verdict == "verified", better.detail
    assert better.paired_ci_low is not None and better.paired_ci_low > 0
    assert "held-out preference accuracy 0.917" in better.detail
    assert "better: Holm-adjusted" in better.detail and "low end above 0" in better.detail
    assert better.base_loss is None and better.heldout_loss is None
    # No worse is enough for a supervised adapter (non-inferiority), not for a DPO one.
    assert tied.verdict == "paired_not_better", tied.detail
    assert "reaches 0 or below: the spec is not shown better with it" in tied.detail
    assert unseen.verdict == "unmeasurable"


def test_a_preference_adapter_not_above_the_base_models_half_gets_no_paired_test() -> None:
    report = _preference(accuracy=0.6, accuracy_low=0.31)
    assert not heldout_beats_base(report) and heldout_beats_base(_preference())
    (check,) = decide_adapters([_preference_evidence(report, 0.05)])
    assert check.verdict == "not_better"
    assert check.detail.startswith("held-out preference accuracy 0.600")
    assert "the interval reaches 0.500, not above the base model" in check.detail
    assert check.alpha_adj is None  # not in the Holm family
