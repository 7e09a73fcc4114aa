"""Preference tuning (SAO): DPO pairs exported from a trace store of episodes, the DPO loss,
the prompt-level split, and a DPO adapter on the tiny model verified against the base model
on held-out pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs the finetune extra: pip install torch transformers peft")
pytest.importorskip("transformers", reason="needs the finetune extra")
pytest.importorskip("peft", reason="needs the finetune extra")

from armature_temporal.finetune.models import PreferencePair, PreferenceRequest
from armature_temporal.finetune.preference import (
    dpo_loss,
    pairs_from_rows,
    split_pairs,
    train_dpo,
)
from armature_temporal.finetune.tiny import create_tiny_model
from armature_temporal.finetune.train import FinetuneError
from armature_temporal.store import TraceStore
from benchmarks.sao import COLOURS, export_rows, prompts, write_episodes


def _exported() -> list[dict[str, Any]]:
    """benchmarks/sao.py's declared task: two recorded episodes per prompt (the pitfall hit,
    avoided) in a real trace store, exported by dpo_rows."""
    store = TraceStore()
    try:
        write_episodes(store)
        rows, _ = export_rows(store)
    finally:
        store.close()
    return rows


def test_pairs_come_from_the_export_of_episodes_on_the_same_input() -> None:
    pairs = pairs_from_rows(_exported())
    assert len(pairs) == len(prompts()) == 24 * len(COLOURS)
    by_user = {p.prompt[1]["content"]: p for p in pairs}
    # Prompt 0 (apple, red) hit the prose pitfall, prompt 1 (apple, blue) the missing field.
    red = by_user["Give the apple's colour as JSON: it is red."]
    assert red.chosen == '{"thing": "apple", "colour": "red"}'
    assert red.rejected == "The apple is red."
    blue = by_user["Give the apple's colour as JSON: it is blue."]
    assert blue.rejected == '{"thing": "apple"}'


def test_pairs_from_rows_names_the_row_and_the_fix() -> None:
    with pytest.raises(FinetuneError, match=r"DPO row 0 lacks \['rejected'\]"):
        pairs_from_rows([{"prompt": [], "chosen": "a"}])
    with pytest.raises(FinetuneError, match="row 1: chosen and rejected are the same reply 'b'"):
        pairs_from_rows(
            [
                {"prompt": [], "chosen": "a", "rejected": "b"},
                {"prompt": [], "chosen": "b", "rejected": "b"},
            ]
        )


def test_split_keeps_every_pair_of_a_prompt_on_one_side() -> None:
    prompt = [{"role": "user", "content": "q"}]
    other = [{"role": "user", "content": "r"}]
    pairs = [
        PreferencePair(prompt=prompt, chosen="a", rejected="b"),
        PreferencePair(prompt=prompt, chosen="a", rejected="c"),
        PreferencePair(prompt=other, chosen="a", rejected="b"),
    ]
    train, held = split_pairs(pairs, 0.5)
    assert len(train) + len(held) == 3 and train and held
    assert {json.dumps(p.prompt) for p in train}.isdisjoint(json.dumps(p.prompt) for p in held)
    with pytest.raises(FinetuneError, match="at least 2 distinct prompts"):
        split_pairs(pairs[:2], 0.5)


def test_dpo_loss_is_log_two_at_the_reference_and_falls_as_chosen_gains() -> None:
    import torch

    zero = torch.zeros(3)
    loss, margins = dpo_loss(torch, zero, zero, zero, zero, 0.1)
    assert float(loss) == pytest.approx(math.log(2)) and margins.tolist() == [0.0] * 3
    chosen_up = torch.tensor([5.0, 5.0, 5.0])
    better, margins = dpo_loss(torch, chosen_up, zero, zero, zero, 0.1)
    assert margins.tolist() == pytest.approx([0.5] * 3)
    assert float(better) == pytest.approx(-math.log(1 / (1 + math.exp(-0.5))))
    # Only the change against the reference counts: a reference that already liked chosen
    # as much leaves the loss at log 2.
    same, _ = dpo_loss(torch, chosen_up, zero, chosen_up, zero, 0.1)
    assert float(same) == pytest.approx(math.log(2))


def test_a_dpo_adapter_ranks_held_out_chosen_replies_above_rejected_unlike_the_base(
    tmp_path: Path,
) -> None:
    tiny = str(create_tiny_model(tmp_path / "tiny"))
    out = tmp_path / "dpo"
    report = train_dpo(
        PreferenceRequest(
            base_model=tiny,
            pairs=pairs_from_rows(_exported()),
            out_dir=str(out),
            max_steps=25,
            learning_rate=5e-3,
            beta=0.1,
            eval_share=0.3,
        )
    )
    assert report.eval_pairs >= 8 and report.train_pairs + report.eval_pairs == 96
    # At step 1 the adapter is zero: policy == reference, so the loss is log 2.
    assert report.train_loss_first == pytest.approx(math.log(2), abs=1e-3)
    assert report.train_loss_last < report.train_loss_first
    # The base model's implicit reward is 0 for every reply (50%); the adapter's interval is
    # above it.
    assert report.accuracy_low > 0.5 and report.mean_reward_margin > 0
    # Measured per reply-token log-probability, the adapter ranks better than the base does.
    assert report.adapter_margin_accuracy > report.base_margin_accuracy
    assert report.margin_diff_low > 0
    meta = json.loads((out / "armature.json").read_text())
    assert meta["method"] == "dpo" and meta["beta"] == 0.1
    assert (out / "adapter_config.json").is_file()
    with pytest.raises(FinetuneError, match="beta must be above 0"):
        train_dpo(
            PreferenceRequest(base_model=tiny, pairs=[], out_dir=str(tmp_path / "b"), beta=0.0)
        )


def test_a_dpo_adapter_on_an_sft_reference_is_a_delta_on_the_frozen_sft_adapter(
    tmp_path: Path,
) -> None:
    from armature_temporal.finetune.continual import FROZEN_DIR, adapter_chain
    from armature_temporal.finetune.models import Example, TrainRequest
    from armature_temporal.finetune.train import train_lora

    tiny = str(create_tiny_model(tmp_path / "tiny"))
    pairs = pairs_from_rows(_exported())
    sft = train_lora(
        TrainRequest(
            base_model=tiny,
            examples=[Example(messages=p.prompt, reply=p.chosen) for p in pairs[:40]],
            out_dir=str(tmp_path / "sft"),
            max_steps=10,
            learning_rate=5e-3,
        )
    )
    out = tmp_path / "dpo"
    report = train_dpo(
        PreferenceRequest(
            base_model=tiny,
            pairs=pairs,
            out_dir=str(out),
            max_steps=10,
            learning_rate=5e-3,
            eval_share=0.3,
            reference_adapter=sft.adapter_dir,
            reference="SFT adapter a1",
        )
    )
    # The delta starts at zero on the merged SFT model: policy == reference (base + SFT) at
    # step 1, so the loss is log 2.
    assert report.train_loss_first == pytest.approx(math.log(2), abs=1e-3)
    assert report.reference_adapter == sft.adapter_dir and report.reference == "SFT adapter a1"
    # Saved as SFT + delta: the SFT adapter under frozen/, loaded first when served.
    assert adapter_chain(out) == [out / FROZEN_DIR, out]
    assert (out / FROZEN_DIR / "armature.json").is_file()
    with pytest.raises(FinetuneError, match=r"reference_adapter .*nowhere. is not an adapter"):
        train_dpo(
            PreferenceRequest(
                base_model=tiny,
                pairs=pairs,
                out_dir=str(tmp_path / "c"),
                reference_adapter=str(tmp_path / "nowhere"),
            )
        )
