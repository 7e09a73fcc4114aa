"""The fine-tune loop's data: training examples distilled from traces, what a training round
measured, and the adapters it keeps. Pure pydantic models (they travel through Temporal and
are stored), importable without torch."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.spec.compiler import Plan

__all__ = [
    "Adapter",
    "AdapterVerdict",
    "Example",
    "FinetuneInput",
    "FinetunePrepared",
    "FinetuneRecordInput",
    "FinetuneResult",
    "PairedRuns",
    "PreferencePair",
    "PreferenceReport",
    "PreferenceRequest",
    "StageJob",
    "TrainReport",
    "TrainRequest",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Example(_Model):
    """One supervised example: the messages a stage sent and the reply that succeeded."""

    messages: list[dict[str, Any]]  # [{"role": "system"|"user"|"assistant", "content": str}]
    reply: str
    run_id: str = ""
    stage: str = ""


class TrainRequest(_Model):
    """One LoRA training job (the ``finetune_train`` activity)."""

    base_model: str  # a local directory with a transformers causal LM and its tokenizer
    examples: list[Example]
    out_dir: str  # where the adapter is written (created; must not exist yet)
    rank: int = 8
    max_steps: int = 100
    learning_rate: float = 5e-4
    eval_share: float = 0.2  # held out by a hash of the example, never trained on
    seed: int = 0
    use_dora: bool = False  # DoRA (peft's use_dora): magnitude vectors plus a LoRA direction
    # Continual training: this earlier adapter (a directory train_lora wrote) is merged into
    # the base weights, frozen, and copied under ``frozen/``; a zero-initialised delta is
    # trained on top with the orthogonality penalty weighted by ``orthogonality_weight``.
    continual_from: str | None = None
    orthogonality_weight: float = 1.0
    # Plain sequential fine-tuning: start from this adapter's weights and train it further
    # (the baseline continual training is measured against; exclusive with continual_from).
    resume_from: str | None = None


class TrainReport(_Model):
    """What training measured. Losses are mean token cross-entropy on the replies."""

    adapter_dir: str
    steps: int
    train_examples: int
    eval_examples: int
    train_loss_first: float
    train_loss_last: float
    eval_loss_before: float  # the base model on the held-out examples
    eval_loss_after: float  # base + adapter on the same examples
    seconds: float
    device: str  # "cpu", "cuda", ...
    # The base model again, the adapter switched off, after training, on the same held-out
    # examples (None: a report from before it was measured; eval_loss_before stands in).
    base_loss: float | None = None
    # Continual training: the frozen adapter it was trained on top of (None: trained alone)
    # and the orthogonality penalty (unweighted) at the first and last step.
    continual_from: str | None = None
    orthogonality_first: float | None = None
    orthogonality_last: float | None = None


#: ``verified``: held-out loss below the base model's and paired runs no worse than without
#: the adapter; ``not_better``: held-out loss not below the base model's; ``paired_worse``: the
#: paired runs may score worse than without it (by more than the margin);
#: ``insufficient_evidence``: fewer than 5 paired runs; ``paired_not_better``: a preference-tuned
#: (DPO) adapter whose paired runs do not show the spec better with it (its bar is better,
#: not merely no worse); ``unmeasurable``: no judge that reads text reads the stage.
AdapterVerdict = Literal[
    "verified",
    "not_better",
    "paired_worse",
    "paired_not_better",
    "insufficient_evidence",
    "unmeasurable",
]


class Adapter(_Model):
    """A trained adapter, kept in the store; ``provider: local`` tiers may load it."""

    id: str
    spec_name: str
    stage: str
    base_model: str
    path: str
    created_at: str
    finetune_run_id: str
    examples: int  # what it was trained and measured on: examples (sft) or preference pairs (dpo)
    report: TrainReport | PreferenceReport  # PreferenceReport: a preference-tuned (DPO) adapter
    verdict: AdapterVerdict
    detail: str
    status: Literal["active", "retired"] = "active"
    # What decided the verdict (None: not measured; adapters stored before migration 15 have
    # only the report). Losses: mean reply-token cross-entropy on the held-out examples.
    base_loss: float | None = None
    heldout_loss: float | None = None
    # Paired runs on the held-out examples' inputs: mean HQS difference (with − without the
    # adapter), its 95% bootstrap interval, and how many pairs both scored.
    paired_diff: float | None = None
    paired_ci_low: float | None = None
    paired_ci_high: float | None = None
    paired_n: int | None = None


class FinetuneInput(_Model):
    """Start one fine-tune round (``armature finetune SPEC`` or the spec's schedule)."""

    spec_text: str
    spec_path: str


class FinetuneResult(_Model):
    status: Literal["trained", "too_few_examples", "not_configured", "failed"]
    detail: str
    adapters: list[Adapter] = Field(default_factory=list)


class StageJob(_Model):
    """One stage to train: its examples and where its adapter goes."""

    stage: str
    # TrainRequest: supervised (finetune.method sft); PreferenceRequest: DPO (method dpo).
    request: TrainRequest | PreferenceRequest
    # The distinct run inputs of the examples held out from training (none of them an input
    # of a training example): the paired runs with and without the adapter use them.
    heldout_inputs: list[dict[str, Any]] = Field(default_factory=list)
    # finetune.method dpo with no verified SFT adapter but enough successful replies: the
    # round trains this SFT adapter first and uses it as the DPO job's reference policy.
    sft_first: TrainRequest | None = None


class FinetunePrepared(_Model):
    """What ``finetune_prepare`` found: a reason to stop, or the stages to train (and the
    spec's plan, which the paired runs without an adapter run)."""

    stop: FinetuneResult | None = None
    spec_name: str = ""
    base_model: str = ""
    jobs: list[StageJob] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)  # stage: why it is not trained
    plan: Plan | None = None


class PairedRuns(_Model):
    """One adapter's paired verification runs: run ``i`` of each list had the same inputs
    (and the same simulated noise); ``without``: the spec as it is, ``with_adapter``: its stage
    served by the base model plus the adapter."""

    without: list[str]
    with_adapter: list[str]
    # A DPO adapter trained on an SFT reference: the stage on base + the SFT adapter alone
    # (empty: no reference adapter, or a round from before these runs).
    reference: list[str] = Field(default_factory=list)


class FinetuneRecordInput(_Model):
    finetune_run_id: str
    created_at: str
    prepared: FinetunePrepared
    # Aligned with prepared.jobs; None: that job failed.
    reports: list[TrainReport | PreferenceReport | None]
    # Aligned with prepared.jobs; None: no paired runs for that job (training failed, its
    # held-out loss did not beat the base model's, or no held-out inputs); empty: a round
    # from before the paired runs.
    paired: list[PairedRuns | None] = Field(default_factory=list)


class PreferencePair(_Model):
    """One DPO pair (a row of ``dpo_rows``): the messages a stage was sent, the reply that did
    better and the one that did worse on the same messages."""

    prompt: list[dict[str, Any]]
    chosen: str
    rejected: str
    # The runs the pair came from: the chosen reply's, then the rejected one's when another
    # (empty: rows exported without run ids).
    run_ids: list[str] = Field(default_factory=list)


class PreferenceRequest(_Model):
    """One preference-tuning job (SAO): a LoRA adapter trained with the DPO loss."""

    base_model: str  # a local directory with a transformers causal LM and its tokenizer
    pairs: list[PreferencePair]
    out_dir: str  # where the adapter is written (created; must not exist yet)
    rank: int = 8
    max_steps: int = 100
    learning_rate: float = 5e-4
    # DPO's β: how strongly the adapter's log-probability ratios to the base model (the
    # reference) are pushed apart; small β lets it move far from the base, large β keeps it
    # close. 0.1 is the DPO paper's usual value.
    beta: float = 0.1
    eval_share: float = 0.2  # prompts held out by a hash (all their pairs), never trained on
    seed: int = 0
    use_dora: bool = False
    # The reference policy: None, the base model; else a supervised (SFT) adapter directory
    # (train_lora wrote it), merged in and frozen, with the DPO adapter trained as a delta on
    # top (armature_temporal.finetune.continual) and saved with it under ``frozen/``: what is
    # served is SFT + delta. ``reference`` says which, in words (the round's report shows it).
    reference_adapter: str | None = None
    reference: str = "the base model"


class PreferenceReport(_Model):
    """What preference tuning measured on the held-out pairs.

    ``accuracy``: the share of held-out pairs whose implicit DPO reward ranks chosen above
    rejected — ``log π(chosen)/π_ref(chosen) > log π(rejected)/π_ref(rejected)``, π the base
    model plus the adapter, π_ref the base model — with its Wilson 95% interval. The base model
    against itself has reward 0 for every reply: 50% by construction (a tie counts a half).
    ``base_margin_accuracy`` / ``adapter_margin_accuracy``: the share where the base model / the
    adapter gives chosen a higher mean log-probability per reply token than rejected
    (measured, not by construction); ``margin_diff`` and its 95% bootstrap interval: adapter
    − base on those, paired by pair.
    """

    adapter_dir: str
    steps: int
    train_pairs: int
    eval_pairs: int
    beta: float
    train_loss_first: float
    train_loss_last: float
    accuracy: float
    accuracy_low: float
    accuracy_high: float
    base_margin_accuracy: float
    adapter_margin_accuracy: float
    margin_diff: float
    margin_diff_low: float
    margin_diff_high: float
    mean_reward_margin: float  # mean β·(reward chosen − reward rejected) on held-out pairs
    seconds: float
    device: str
    # The runs the pairs (trained on and held out) came from, sorted (empty: pairs without
    # run ids).
    source_runs: list[str] = Field(default_factory=list)
    # The reference policy (PreferenceRequest's): with an SFT adapter, π_ref above and "base"
    # in base_margin_accuracy are base + that adapter, and the adapter is SFT + the DPO delta.
    reference_adapter: str | None = None
    reference: str = "the base model"
    # The SFT adapter the round trained first to be the reference (None: none trained).
    sft_report: TrainReport | None = None
    # With an SFT reference: paired runs of the stage on the SFT adapter alone, on the same
    # held-out inputs; mean HQS difference (SFT + DPO − SFT alone), its 95% bootstrap
    # interval and how many pairs both scored (None: not run).
    vs_reference_diff: float | None = None
    vs_reference_ci_low: float | None = None
    vs_reference_ci_high: float | None = None
    vs_reference_n: int | None = None
