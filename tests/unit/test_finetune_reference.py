"""The reference policy of a DPO job (:func:`choose_reference`): the stage's newest verified
SFT adapter on the same base model, else an SFT adapter trained first in the round when there
are enough replies outside the held-out pairs, else the base model — and the words that say
which."""

from __future__ import annotations

from pathlib import Path

from armature_temporal.finetune.models import (
    Adapter,
    Example,
    PreferencePair,
    PreferenceReport,
    TrainReport,
    TrainRequest,
)
from armature_temporal.finetune.reference import choose_reference

_LOSSES = ("train_loss_first", "train_loss_last")
TRAIN = TrainReport(
    adapter_dir="x",
    steps=1,
    train_examples=1,
    eval_examples=1,
    seconds=1.0,
    device="cpu",
    **dict.fromkeys((*_LOSSES, "eval_loss_before", "eval_loss_after"), 1.0),
)
PREFERENCE = PreferenceReport(
    adapter_dir="x",
    steps=1,
    train_pairs=1,
    eval_pairs=1,
    beta=0.1,
    seconds=1.0,
    device="cpu",
    **dict.fromkeys((*_LOSSES, "accuracy", "accuracy_high"), 1.0),
    **dict.fromkeys(("accuracy_low", "base_margin_accuracy", "adapter_margin_accuracy"), 0.5),
    **dict.fromkeys(("margin_diff", "margin_diff_low", "margin_diff_high"), 0.0),
    mean_reward_margin=0.0,
)


def _adapter(
    tmp_path: Path, name: str, report: TrainReport | PreferenceReport, base: str
) -> Adapter:
    path = tmp_path / name
    path.mkdir()
    (path / "adapter_config.json").write_text("{}")
    return Adapter(
        id=name,
        spec_name="s",
        stage="card",
        base_model=base,
        path=str(path),
        created_at="2026-12-04T00:00:00",
        finetune_run_id="r",
        examples=1,
        report=report,
        verdict="verified",
        detail="",
    )


def _example(i: int, run: str) -> Example:
    return Example(messages=[{"role": "user", "content": f"topic {i}"}], reply="{}", run_id=run)


def test_the_newest_verified_sft_adapter_on_the_same_base_is_the_reference(tmp_path: Path) -> None:
    newest_dpo = _adapter(tmp_path, "dpo", PREFERENCE, "/models/tiny")
    other_base = _adapter(tmp_path, "other", TRAIN, "/models/big")
    sft = _adapter(tmp_path, "sft", TRAIN, "/models/tiny")
    ref = choose_reference(
        [newest_dpo, other_base, sft],
        [],
        [],
        stage="card",
        base_model="/models/tiny",
        min_examples=3,
        sft_request=TrainRequest(base_model="/models/tiny", examples=[], out_dir="/o/r-sft"),
    )
    # A DPO adapter is never a reference (the reference is a supervised policy).
    assert ref.adapter == sft.path and ref.train is None
    assert ref.words == "SFT adapter sft (the stage's newest verified one)"


def test_without_one_the_round_trains_sft_first_on_replies_outside_the_held_out_pairs(
    tmp_path: Path,
) -> None:
    other_base = _adapter(tmp_path, "other", TRAIN, "/models/big")
    examples = [_example(i, f"run-{i}") for i in range(5)]
    held = [
        PreferencePair(
            prompt=[{"role": "user", "content": "topic 0"}],
            chosen="a",
            rejected="b",
            run_ids=["run-0", "run-9"],
        ),
        PreferencePair(
            prompt=[{"role": "user", "content": "topic 7"}],
            chosen="a",
            rejected="b",
            run_ids=["run-1"],
        ),
    ]
    ref = choose_reference(
        [other_base],
        examples,
        held,
        stage="card",
        base_model="/models/tiny",
        min_examples=3,
        sft_request=TrainRequest(base_model="/models/tiny", examples=[], out_dir="/o/r-sft"),
    )
    assert ref.adapter is None and ref.train is not None
    # topic 0 is a held-out prompt; run-1 is a held-out pair's run.
    assert [e.run_id for e in ref.train.examples] == ["run-2", "run-3", "run-4"]
    assert ref.train.out_dir == "/o/r-sft"
    assert ref.words == (
        "an SFT adapter the round trained first on 3 successful replies (its newest verified "
        "SFT adapter other is on /models/big)"
    )
    # One reply fewer than min_examples: the base model, and why.
    base = choose_reference(
        [],
        examples[:4],
        held,
        stage="card",
        base_model="/models/tiny",
        min_examples=3,
        sft_request=TrainRequest(base_model="/models/tiny", examples=[], out_dir="/o/r-sft"),
    )
    assert base.adapter is None and base.train is None
    assert base.words == (
        "the base model (the stage has no verified SFT adapter, and 2 distinct successful "
        "replies outside the held-out pairs' prompts and runs, fewer than min_examples = 3, to "
        "train one first)"
    )
