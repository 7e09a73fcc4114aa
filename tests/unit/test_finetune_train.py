"""The fine-tune loop's compute: a tiny offline model, LoRA training, local generation."""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the finetune extra: pip install torch transformers peft")
pytest.importorskip(
    "transformers", reason="needs the finetune extra: pip install torch transformers peft"
)
pytest.importorskip("peft", reason="needs the finetune extra: pip install torch transformers peft")

from armature_temporal.errors import ArmatureError
from armature_temporal.extras import install_extra_hint
from armature_temporal.finetune.local import LocalCompletion, clear_cache, generate
from armature_temporal.finetune.models import Example, TrainReport, TrainRequest
from armature_temporal.finetune.tiny import DEMO_NOUNS, create_tiny_model
from armature_temporal.finetune.train import (
    ADAPTER_META,
    FinetuneError,
    FinetuneUnavailable,
    split_examples,
    train_lora,
)

THINGS = DEMO_NOUNS
RANK = 8
STEPS = 60


def _colour_example(thing: str) -> Example:
    return Example(
        messages=[
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": f"What colour is the {thing}?"},
        ],
        reply=f"The {thing} is blue.",
        run_id=f"run-{thing}",
        stage="answer",
    )


def _ask(thing: str) -> list[dict[str, str]]:
    return [dict(m) for m in _colour_example(thing).messages]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(create_tiny_model(tmp_path_factory.mktemp("models") / "tiny"))


@pytest.fixture(scope="module")
def trained(
    tiny: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[TrainReport, list[tuple[int, float]]]:
    seen: list[tuple[int, float]] = []
    request = TrainRequest(
        base_model=tiny,
        examples=[_colour_example(t) for t in THINGS],
        out_dir=str(tmp_path_factory.mktemp("adapters") / "colour" / "v1"),
        rank=RANK,
        max_steps=STEPS,
        learning_rate=5e-3,
        seed=0,
    )
    report = train_lora(request, progress=lambda step, loss: seen.append((step, loss)))
    return report, seen


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    clear_cache()


def test_the_tiny_model_loads_with_transformers_and_generates(tiny: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
    assert model.config.model_type == "gpt2"
    assert tokenizer.eos_token_id is not None and tokenizer.pad_token_id is not None
    prompt = tokenizer.apply_chat_template(
        _ask("apple"), add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|assistant|>\n")
    assert tokenizer.decode(tokenizer("Héllo, wörld ✓")["input_ids"]) == "Héllo, wörld ✓"

    result = generate(tiny, _ask("apple"), max_tokens=5)
    assert isinstance(result, LocalCompletion)
    assert result.prompt_tokens > 5 and 0 <= result.completion_tokens <= 5
    assert result.finish_reason in ("stop", "length")


def test_create_tiny_model_is_deterministic_per_seed(tmp_path: Path) -> None:
    a = create_tiny_model(tmp_path / "a", seed=1)
    b = create_tiny_model(tmp_path / "b", seed=1)
    c = create_tiny_model(tmp_path / "c", seed=2)
    weights = [(p / "model.safetensors").read_bytes() for p in (a, b, c)]
    assert weights[0] == weights[1] != weights[2]
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()


def test_training_lowers_the_held_out_loss(
    trained: tuple[TrainReport, list[tuple[int, float]]],
) -> None:
    report, seen = trained
    assert report.steps == STEPS
    assert report.train_examples + report.eval_examples == len(THINGS)
    assert report.eval_examples >= 1 and report.train_examples >= 1
    assert report.device in ("cpu", "cuda")
    assert report.seconds > 0
    assert report.eval_loss_after < report.eval_loss_before - 0.5, report
    # The base model measured again after training, the adapter switched off: unchanged.
    assert report.base_loss == pytest.approx(report.eval_loss_before, abs=1e-4)
    assert report.train_loss_last < report.train_loss_first, report
    assert [step for step, _ in seen] == list(range(1, STEPS + 1))
    assert seen[0][1] == pytest.approx(report.train_loss_first)
    assert seen[-1][1] == pytest.approx(report.train_loss_last)


def test_the_adapter_directory_holds_peft_files_and_the_report(
    trained: tuple[TrainReport, list[tuple[int, float]]], tiny: str
) -> None:
    report, _ = trained
    adapter = Path(report.adapter_dir)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == RANK and config["lora_alpha"] == 2 * RANK
    assert any(adapter.glob("adapter_model.*"))
    meta = json.loads((adapter / ADAPTER_META).read_text())
    assert meta["base_model"] == tiny
    assert TrainReport.model_validate({k: v for k, v in meta.items() if k != "base_model"}) == (
        report
    )
    assert [p.name for p in adapter.parent.iterdir()] == [adapter.name]  # no staging left over
    # learnt from the traces: its owner's alone (issue #14)
    assert stat.S_IMODE(adapter.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in adapter.rglob("*") if p.is_file()} == {0o600}


def test_generate_with_the_adapter(
    trained: tuple[TrainReport, list[tuple[int, float]]], tiny: str
) -> None:
    report, _ = trained
    result = generate(tiny, _ask("harbor"), adapter=report.adapter_dir, max_tokens=24)
    assert result.text and result.completion_tokens > 0 and result.prompt_tokens > 0
    assert "blue" in result.text, result  # learned; the base model never says it
    short = generate(tiny, _ask("harbor"), adapter=report.adapter_dir, max_tokens=1)
    assert short.finish_reason == "length" and short.completion_tokens == 1


def test_generation_is_deterministic_per_seed(
    trained: tuple[TrainReport, list[tuple[int, float]]], tiny: str
) -> None:
    adapter = trained[0].adapter_dir
    greedy = [generate(tiny, _ask("tiger"), adapter=adapter, max_tokens=12) for _ in range(2)]
    assert greedy[0] == greedy[1]
    sampled = [
        generate(tiny, _ask("tiger"), max_tokens=12, temperature=1.0, seed=seed).text
        for seed in (7, 7, 8, 9)
    ]
    assert sampled[0] == sampled[1]
    assert len(set(sampled)) > 1


def test_split_is_deterministic_order_free_and_keeps_both_sides() -> None:
    examples = [_colour_example(t) for t in THINGS]
    train, held = split_examples(examples, 0.2)
    again_train, again_held = split_examples(list(reversed(examples)), 0.2)
    assert (train, held) == (again_train, again_held)
    assert not set(map(id, train)) & set(map(id, held))
    for share in (0.0, 1.0):
        train, held = split_examples(examples[:2], share)
        assert len(train) == len(held) == 1
    train, held = split_examples(examples[:3] + examples[:3], 0.5)  # duplicates count once
    assert len(train) + len(held) == 3


def _request(tiny: str, out_dir: Path, examples: list[Example] | None = None) -> TrainRequest:
    return TrainRequest(
        base_model=tiny,
        examples=examples if examples is not None else [_colour_example(t) for t in THINGS[:4]],
        out_dir=str(out_dir),
        max_steps=1,
    )


def test_errors_are_clear(tiny: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(FinetuneError, match="not a local transformers model directory") as err:
        train_lora(_request(missing, tmp_path / "out"))
    assert "nothing is downloaded" in str(err.value) and missing in str(err.value)
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(FinetuneError, match="not a local transformers model directory"):
        train_lora(_request(str(not_a_model), tmp_path / "out"))
    with pytest.raises(FinetuneError, match="not a local transformers model directory"):
        generate(missing, _ask("apple"))

    taken = tmp_path / "taken"
    taken.mkdir()
    with pytest.raises(FinetuneError, match="already exists"):
        train_lora(_request(tiny, taken))

    with pytest.raises(FinetuneError, match="at least 2 examples"):
        train_lora(_request(tiny, tmp_path / "out", [_colour_example("apple")]))
    with pytest.raises(FinetuneError, match="at least 2 distinct examples"):
        train_lora(_request(tiny, tmp_path / "out", [_colour_example("apple")] * 3))
    empty = Example(messages=[{"role": "user", "content": "hi"}], reply="  ")
    with pytest.raises(FinetuneError, match=r"examples\[1\] has an empty reply"):
        train_lora(_request(tiny, tmp_path / "out", [_colour_example("apple"), empty]))

    with pytest.raises(FinetuneError, match="not a LoRA adapter directory"):
        generate(tiny, _ask("apple"), adapter=str(tmp_path / "no-adapter"))
    assert not (tmp_path / "out").exists()
    assert issubclass(FinetuneError, ArmatureError)


def test_missing_extra_says_how_to_install(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` now raises ImportError
    with pytest.raises(FinetuneUnavailable, match=r"pip install torch==\S+ transformers peft"):
        train_lora(_request(tiny, tmp_path / "out"))
    # The hint is said the way Armature was installed (pip install -e '<clone>[finetune]').
    with pytest.raises(FinetuneUnavailable, match=re.escape(install_extra_hint("finetune"))):
        generate(tiny, _ask("apple"))
    assert issubclass(FinetuneUnavailable, ArmatureError)


def test_long_prompts_are_cut_from_the_left_and_plain_tokenizers_get_role_lines(
    tiny: str, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    from armature_temporal.finetune.train import prompt_text

    tokenizer = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
    tokenizer.chat_template = None
    assert prompt_text(tokenizer, _ask("apple")) == (
        "system: Answer in one short sentence.\nuser: What colour is the apple?\nassistant: "
    )

    long = [{"role": "user", "content": "word " * 2000 + f"colour of the {t}?"} for t in "ab"]
    examples = [Example(messages=[m], reply=f"{m['content'][-3]} is blue.") for m in long]
    report = train_lora(_request(tiny, tmp_path / "long", examples))  # 512 positions, no crash
    assert report.steps == 1 and report.eval_loss_before > 0
    result = generate(tiny, long[:1], max_tokens=600)
    assert result.prompt_tokens + result.completion_tokens <= 512


@pytest.mark.parametrize("max_tokens", [511, 600, 10_000])
def test_a_large_max_tokens_shortens_the_reply_never_the_prompt_to_nothing(
    tiny: str, max_tokens: int
) -> None:
    long_prompt = [{"role": "user", "content": "word " * 400}]  # more than the 512 positions
    out = generate(tiny, long_prompt, max_tokens=max_tokens)
    assert out.prompt_tokens >= 256  # at least half the context stays the prompt's
    assert out.prompt_tokens + out.completion_tokens <= 512
