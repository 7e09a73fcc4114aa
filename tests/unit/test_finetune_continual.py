"""DoRA adapters and continual (C-LoRA style) adapters on the tiny model: what is trained,
what is frozen, the orthogonality penalty, and that serving stacks the frozen adapter and the
delta; and the spec's finetune fields reaching the training request."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs the finetune extra: pip install torch transformers peft")
pytest.importorskip("transformers", reason="needs the finetune extra")
pytest.importorskip("peft", reason="needs the finetune extra")

from armature_temporal.finetune.continual import (
    FROZEN_DIR,
    adapter_chain,
    orthogonality_penalty,
    stack_onto,
)
from armature_temporal.finetune.models import Example, FinetuneInput, TrainReport, TrainRequest
from armature_temporal.finetune.tiny import DEMO_NOUNS, create_tiny_model
from armature_temporal.finetune.train import FinetuneError, heldout_loss, load_base, train_lora

THINGS = DEMO_NOUNS[:20]
STEPS = 30


def _task(ask: str, reply: str) -> list[Example]:
    return [
        Example(
            messages=[{"role": "user", "content": ask.format(t=t)}],
            reply=reply.format(t=t),
            run_id=f"{ask[:5]}-{t}",
        )
        for t in THINGS
    ]


TASK_A = _task("What colour is the {t}?", "The {t} is blue.")
TASK_B = _task("Where is the {t}?", "The {t} is under the table.")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(create_tiny_model(tmp_path_factory.mktemp("models") / "tiny"))


def _train(tiny: str, out: Path, examples: list[Example], **extra: Any) -> TrainReport:
    request = TrainRequest(
        base_model=tiny,
        examples=examples,
        out_dir=str(out),
        max_steps=STEPS,
        learning_rate=5e-3,
        **extra,
    )
    return train_lora(request)


@pytest.fixture(scope="module")
def adapter_a(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("adapters") / "a"
    _train(tiny, out, TASK_A)
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256((path / "adapter_model.safetensors").read_bytes()).hexdigest()


def test_use_dora_trains_magnitude_vectors_and_beats_the_base_model(
    tiny: str, adapter_a: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    report = _train(tiny, tmp_path / "dora", TASK_A, use_dora=True)
    config = json.loads((tmp_path / "dora" / "adapter_config.json").read_text())
    assert config["use_dora"] is True
    weights = load_file(str(tmp_path / "dora" / "adapter_model.safetensors"))
    magnitudes = [k for k in weights if "lora_magnitude_vector" in k]
    assert len(magnitudes) == 2  # one per adapted layer: c_attn in both GPT-2 blocks
    assert report.base_loss is not None and report.eval_loss_after < report.base_loss
    # A plain LoRA adapter has none.
    plain = load_file(str(adapter_a / "adapter_model.safetensors"))
    assert not any("magnitude" in k for k in plain)


def test_continual_freezes_the_earlier_adapter_trains_a_delta_and_serving_stacks_both(
    tiny: str, adapter_a: Path, tmp_path: Path
) -> None:
    before = _digest(adapter_a)
    out = tmp_path / "b"
    report = _train(tiny, out, TASK_B, continual_from=str(adapter_a), orthogonality_weight=1.0)
    assert report.continual_from == str(adapter_a)
    # The earlier adapter is untouched and travels with the delta, whole, under frozen/.
    assert _digest(adapter_a) == before == _digest(out / FROZEN_DIR)
    assert adapter_chain(out) == [out / FROZEN_DIR, out]
    # The delta starts at zero (B = 0): where training starts is base + the frozen adapter.
    with_a = heldout_loss(tiny, str(adapter_a), TASK_B)
    assert report.eval_loss_before == pytest.approx(with_a, abs=1e-4)
    # base_loss is the base model alone, not base + frozen.
    assert report.base_loss == pytest.approx(heldout_loss(tiny, None, TASK_B), abs=1e-4)
    assert report.eval_loss_after < report.eval_loss_before
    # The penalty was measured, and training lowered it.
    assert report.orthogonality_first is not None and report.orthogonality_last is not None
    assert 0 < report.orthogonality_last < report.orthogonality_first
    # Loading the directory applies frozen + delta: the loss measured while training (frozen
    # merged, delta on top) is what a fresh load of the directory gives.
    assert heldout_loss(tiny, str(out), TASK_B) == pytest.approx(report.eval_loss_after, abs=1e-4)
    # provider: local serves the same stack: its model's logits are base + frozen + delta's.
    import peft
    import torch

    from armature_temporal.finetune.local import _get, clear_cache

    clear_cache()
    served = _get(tiny, str(out)).model
    manual, _ = load_base(tiny)
    for step in (out / FROZEN_DIR, out):
        manual = peft.PeftModel.from_pretrained(manual, str(step)).merge_and_unload()
    delta_only = peft.PeftModel.from_pretrained(load_base(tiny)[0], str(out)).merge_and_unload()
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        logits = served(input_ids=ids).logits
        assert torch.allclose(logits, manual(input_ids=ids).logits, atol=1e-5)
        assert not torch.allclose(logits, delta_only(input_ids=ids).logits, atol=1e-3)
    clear_cache()


def test_the_orthogonality_penalty_is_the_squared_overlap_of_the_a_matrices(
    tiny: str, adapter_a: Path
) -> None:
    import peft
    import torch

    model, _ = load_base(tiny)
    merged, frozen = stack_onto(peft, model, adapter_a)
    assert set(frozen) == {"transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"}
    delta = peft.get_peft_model(
        merged, peft.LoraConfig(r=4, task_type="CAUSAL_LM", fan_in_fan_out=True)
    )
    expected = 0.0
    for name, module in delta.named_modules():
        if name.endswith("attn.c_attn") and hasattr(module, "lora_A"):
            a_new = module.lora_A["default"].weight
            a_old = frozen[name.removeprefix("base_model.model.")]
            assert a_old.shape == (8, 64) and a_new.shape == (4, 64)
            expected += float((a_old @ a_new.detach().t()).pow(2).sum())
    got = orthogonality_penalty(torch, delta, frozen)
    assert got.requires_grad and float(got.detach()) == pytest.approx(expected, rel=1e-5)
    assert expected > 0


def test_continual_and_resume_name_the_directory_and_the_fix(
    tiny: str, adapter_a: Path, tmp_path: Path
) -> None:
    with pytest.raises(FinetuneError, match=r"continual_from '.*nowhere' is not an adapter"):
        _train(tiny, tmp_path / "x", TASK_B, continual_from=str(tmp_path / "nowhere"))
    with pytest.raises(FinetuneError, match="both given; pick one"):
        _train(
            tiny,
            tmp_path / "y",
            TASK_B,
            continual_from=str(adapter_a),
            resume_from=str(adapter_a),
        )


def _completed_run(index: int) -> list[Any]:
    from armature_temporal.runtime.traces import TraceChain

    chain = TraceChain(f"run-{index}", "colours", "hash-v1", "policy")
    messages = [{"role": "user", "content": f"What colour is the {THINGS[index]}?"}]
    chain.add("run_start", "2026-01-01T00:00:00+00:00", data={"inputs": {"i": index}})
    chain.add(
        "attempt",
        "2026-01-01T00:00:01+00:00",
        stage_id="answer",
        attempt=1,
        role="Answerer",
        role_type="worker",
        tier="small",
        model="simulate",
        inputs_hash=f"h{index}",
        output={"content": f"The {THINGS[index]} is blue."},
        output_valid=True,
        data={"messages": messages},
    )
    chain.add("stage", "2026-01-01T00:00:02+00:00", stage_id="answer", status="completed")
    chain.add("run_end", "2026-01-01T00:00:03+00:00", status="completed", latency_ms=0.0)
    return chain.take()


_REPORT = TrainReport(
    adapter_dir="",
    steps=1,
    train_examples=1,
    eval_examples=1,
    train_loss_first=1.0,
    train_loss_last=1.0,
    eval_loss_before=1.0,
    eval_loss_after=0.5,
    seconds=0.0,
    device="cpu",
)


@pytest.mark.parametrize("continual", [True, False])
def test_the_spec_fields_reach_the_training_request(
    tiny: str, adapter_a: Path, tmp_path: Path, continual: bool
) -> None:
    from activities.finetune import _prepare
    from armature_temporal.finetune.models import Adapter
    from armature_temporal.store import TraceStore

    store = TraceStore()
    try:
        for i in range(6):
            store.write(_completed_run(i))
        store.save_adapters(
            [
                Adapter(
                    id="colours-answer-a1",
                    spec_name="colours",
                    stage="answer",
                    base_model=tiny,
                    path=str(adapter_a),
                    created_at="2026-01-01T00:00:00+00:00",
                    finetune_run_id="finetune-1",
                    examples=20,
                    report=_REPORT,
                    verdict="verified",
                    detail="",
                )
            ]
        )
    finally:
        store.close()
    spec = tmp_path / "colours.yaml"
    text = (
        "name: colours\n"
        f"finetune: {{base_model: {tiny}, min_examples: 2, use_dora: true, "
        f"continual: {str(continual).lower()}, orthogonality_weight: 2.5}}\n"
        "stages: [{id: answer, role: {name: Answerer, description: x}}]\n"
    )
    spec.write_text(text)
    prepared = _prepare(FinetuneInput(spec_text=text, spec_path=str(spec)), "round-2")
    (job,) = prepared.jobs
    assert job.request.use_dora is True and job.request.orthogonality_weight == 2.5
    # continual: the stage's newest verified adapter on this base model is the frozen one.
    assert job.request.continual_from == (str(adapter_a) if continual else None)
