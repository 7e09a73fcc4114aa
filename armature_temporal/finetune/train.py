"""Train a LoRA adapter on distilled examples: :func:`train_lora`.

Blocking and CPU-friendly (a GPU is used when torch sees one); the ``finetune_train``
activity runs it in a thread and heartbeats from ``progress``. torch, transformers and peft
are imported inside the functions, so importing this module needs none of them; without them
:class:`FinetuneUnavailable` says how to install the ``finetune`` extra. Nothing is ever
downloaded: ``base_model`` must be a local directory written by ``save_pretrained``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from armature_temporal.errors import ArmatureError
from armature_temporal.extras import install_extra_hint
from armature_temporal.finetune.continual import copy_frozen, orthogonality_penalty, stack_onto
from armature_temporal.finetune.models import Example, TrainReport, TrainRequest
from armature_temporal.hf_loading import LOAD_LOCK
from armature_temporal.runtime.private import make_private, private_dir

__all__ = [
    "ADAPTER_META",
    "FinetuneError",
    "FinetuneUnavailable",
    "batch_indices",
    "heldout_loss",
    "load_base",
    "lora_config",
    "max_positions",
    "prompt_ids",
    "prompt_text",
    "require_stack",
    "save_adapter",
    "setup_base",
    "split_examples",
    "stack_frozen",
    "train_lora",
]

ADAPTER_META = "armature.json"  # written next to the adapter: the TrainReport plus base_model
BATCH_SIZE = 4
_IGNORE = -100  # label id cross-entropy ignores (prompt tokens, padding)
# Used when peft has no default target modules for the architecture (and the names exist).
_FALLBACK_TARGETS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "c_attn",
    "query_key_value",
    "Wqkv",
    "qkv_proj",
)


class FinetuneUnavailable(ArmatureError):
    """torch, transformers or peft is not installed (the ``finetune`` extra)."""


class FinetuneError(ArmatureError):
    """A training or local-generation request cannot be carried out; the message says why."""


def require_stack() -> tuple[Any, Any, Any]:
    """Import and return ``(torch, transformers, peft)``, or raise :class:`FinetuneUnavailable`."""
    try:
        import peft
        import torch
        import transformers
    except ImportError as exc:
        try:
            pin = f"torch=={metadata.version('torch')}"
        except metadata.PackageNotFoundError:
            pin = "torch"
        raise FinetuneUnavailable(
            f"fine-tuning needs the finetune extra: pip install {pin} transformers peft "
            f"({install_extra_hint('finetune')}); import failed: {exc}"
        ) from exc
    return torch, transformers, peft


def load_base(base_model: str) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local directory, in float32, in eval mode."""
    _, transformers, _ = require_stack()
    path = Path(base_model).expanduser()
    hint = "put a model there (save_pretrained) — nothing is downloaded"
    if not path.is_dir():
        raise FinetuneError(
            f"base_model {base_model!r} is not a local transformers model directory: "
            f"no such directory; {hint}"
        )
    try:
        with LOAD_LOCK:  # transformers patches process-wide state while it loads
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(path), local_files_only=True
            )
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ...
        raise FinetuneError(
            f"base_model {base_model!r} is not a local transformers model directory: "
            f"{type(exc).__name__}: {exc}; {hint}"
        ) from exc
    model = model.float()
    model.eval()
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def max_positions(model: Any) -> int:
    """The longest sequence the model takes (its position limit; 2,048 when it names none)."""
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def prompt_text(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> str:
    """The prompt a reply follows: the chat template, or ``role: content`` lines."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=False
        )
        return str(text)
    lines = [f"{m.get('role', 'user')}: {m.get('content', '')}\n" for m in messages]
    return "".join(lines) + "assistant: "


def prompt_ids(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> list[int]:
    """Token ids of :func:`prompt_text` (a chat template brings its own special tokens)."""
    templated = bool(getattr(tokenizer, "chat_template", None))
    ids = tokenizer(prompt_text(tokenizer, messages), add_special_tokens=not templated)
    return [int(i) for i in ids["input_ids"]]


def _example_key(example: Example) -> str:
    blob = json.dumps([example.messages, example.reply], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def split_examples(
    examples: Sequence[Example], eval_share: float
) -> tuple[list[Example], list[Example]]:
    """Split deterministically by a hash of (messages, reply) into ``(train, eval)``.

    Identical examples are kept once (so none is both trained on and held out). An example
    is held out when its hash falls under ``eval_share``; at least one lands on each side.
    Needs two or more distinct examples.
    """
    unique: dict[str, Example] = {}
    for example in examples:
        unique.setdefault(_example_key(example), example)
    if len(unique) < 2:
        raise FinetuneError(
            f"training needs at least 2 distinct examples (one to train on, one to hold out), "
            f"got {len(unique)}"
        )
    keyed = sorted(unique.items())  # ascending hash == ascending position in [0, 1)
    share = min(max(eval_share, 0.0), 1.0)
    held = sum(1 for key, _ in keyed if int(key[:16], 16) / 2**64 < share)
    held = min(max(held, 1), len(keyed) - 1)
    return [e for _, e in keyed[held:]], [e for _, e in keyed[:held]]


def _check_examples(examples: Sequence[Example]) -> None:
    if len(examples) < 2:
        raise FinetuneError(
            f"training needs at least 2 examples (one to train on, one to hold out), "
            f"got {len(examples)}"
        )
    for index, example in enumerate(examples):
        if not example.reply.strip():
            raise FinetuneError(
                f"examples[{index}] has an empty reply; every example needs the reply to learn"
            )
        for m_index, message in enumerate(example.messages):
            if not isinstance(message.get("role"), str) or not isinstance(
                message.get("content"), str
            ):
                raise FinetuneError(
                    f"examples[{index}].messages[{m_index}] needs a string 'role' and a "
                    f"string 'content', got {message!r}"
                )


@dataclass(frozen=True)
class _Encoded:
    input_ids: list[int]
    labels: list[int]


def _encode(tokenizer: Any, example: Example, limit: int) -> _Encoded:
    """Prompt then reply + eos; labels only on the reply; the prompt is cut from the left."""
    prompt = prompt_ids(tokenizer, example.messages)
    reply = [int(i) for i in tokenizer(example.reply, add_special_tokens=False)["input_ids"]]
    if tokenizer.eos_token_id is not None:
        reply.append(int(tokenizer.eos_token_id))
    reply = reply[: max(limit - 1, 1)]
    prompt = prompt[-(limit - len(reply)) :]  # keep the end of the prompt (room >= 1)
    return _Encoded(prompt + reply, [_IGNORE] * len(prompt) + reply)


def _batch(torch: Any, encoded: Sequence[_Encoded], pad_id: int, device: Any) -> dict[str, Any]:
    width = max(len(e.input_ids) for e in encoded)
    ids, labels, mask = [], [], []
    for e in encoded:
        pad = width - len(e.input_ids)
        ids.append(e.input_ids + [pad_id] * pad)
        labels.append(e.labels + [_IGNORE] * pad)
        mask.append([1] * len(e.input_ids) + [0] * pad)
    return {
        "input_ids": torch.tensor(ids, dtype=torch.long, device=device),
        "labels": torch.tensor(labels, dtype=torch.long, device=device),
        "attention_mask": torch.tensor(mask, dtype=torch.long, device=device),
    }


def batch_indices(torch: Any, n: int, seed: int) -> Iterator[list[int]]:
    """Endless training batches of up to :data:`BATCH_SIZE` indices into ``n`` examples: a
    seeded shuffle, every example once per pass."""
    order = torch.Generator().manual_seed(seed)
    queue: list[int] = []
    while True:
        picked: list[int] = []
        while len(picked) < min(BATCH_SIZE, n):
            if not queue:
                queue = [int(i) for i in torch.randperm(n, generator=order)]
            picked.append(queue.pop())
        yield picked


def _token_loss(torch: Any, model: Any, batch: dict[str, Any]) -> tuple[Any, int]:
    """Summed cross-entropy over the labelled (reply) tokens, and how many there were."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    shifted = logits[:, :-1, :].float()
    targets = batch["labels"][:, 1:]
    total = torch.nn.functional.cross_entropy(
        shifted.reshape(-1, shifted.shape[-1]),
        targets.reshape(-1),
        ignore_index=_IGNORE,
        reduction="sum",
    )
    return total, int((targets != _IGNORE).sum().item())


def _eval_loss(
    torch: Any, model: Any, encoded: Sequence[_Encoded], pad_id: int, device: Any
) -> float:
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(encoded), BATCH_SIZE):
            batch = _batch(torch, encoded[start : start + BATCH_SIZE], pad_id, device)
            loss, n = _token_loss(torch, model, batch)
            total += float(loss.item())
            count += n
    return total / max(count, 1)


def _target_modules(model: Any) -> list[str] | str | None:
    """None (peft's default for the architecture), else the known names present, else all."""
    model_type = getattr(model.config, "model_type", None)
    try:
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults
    except ImportError:  # pragma: no cover - older/newer peft layouts
        defaults = {}
    if model_type in defaults:
        return None
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    present = [t for t in _FALLBACK_TARGETS if t in names]
    return present or "all-linear"


def lora_config(peft: Any, model: Any, rank: int, use_dora: bool) -> Any:
    """peft's LoraConfig for ``model``: rank ``rank``, alpha ``2 · rank``, no dropout, DoRA
    when ``use_dora``."""
    return peft.LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
        target_modules=_target_modules(model),
        # GPT-2-style Conv1D layers store weights transposed (peft would flip this and warn).
        fan_in_fan_out=any(type(m).__name__ == "Conv1D" for m in model.modules()),
        use_dora=use_dora,
    )


def setup_base(torch: Any, base_model: str, seed: int) -> tuple[Any, Any, Any, int, int]:
    """Seed torch and load ``base_model`` onto the GPU if there is one, else the CPU:
    ``(model, tokenizer, device, position limit, pad id)``."""
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, tokenizer = load_base(base_model)
    model.to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return model, tokenizer, device, max_positions(model), int(pad_id)


def _check_out_dir(out_dir: str) -> Path:
    out = Path(out_dir).expanduser()
    if out.exists():
        raise FinetuneError(
            f"out_dir {out_dir!r} already exists; adapters are never overwritten — "
            "choose a new directory"
        )
    return out


def stack_frozen(
    peft: Any, model: Any, adapter_dir: str, base_model: str, field: str
) -> tuple[Any, dict[str, Any]]:
    """``model`` (loaded from ``base_model``) with the adapter at ``adapter_dir`` (and its
    frozen chain) merged in, and its A matrices (:func:`continual.stack_onto`); ``field``
    names the request field it came from in errors.

    Raises:
        FinetuneError: it is not an adapter directory, or does not load onto the model.
    """
    earlier = Path(adapter_dir).expanduser()
    if not (earlier / "adapter_config.json").is_file():
        raise FinetuneError(
            f"{field} {adapter_dir!r} is not an adapter directory (no "
            "adapter_config.json); pass a directory train_lora wrote, or train without it"
        )
    try:
        return stack_onto(peft, model, earlier)
    except Exception as exc:  # peft raises ValueError, KeyError, RuntimeError, ...
        raise FinetuneError(
            f"{field} {adapter_dir!r} does not load onto base_model {base_model!r}: "
            f"{type(exc).__name__}: {exc}; use an adapter trained on this base model"
        ) from exc


def _resume(peft: Any, model: Any, request: TrainRequest) -> Any:
    """The base model with ``request.resume_from`` loaded trainable (trained further)."""
    earlier = Path(str(request.resume_from)).expanduser()
    if not (earlier / "adapter_config.json").is_file():
        raise FinetuneError(
            f"resume_from {request.resume_from!r} is not an adapter directory (no "
            "adapter_config.json); pass a directory train_lora wrote"
        )
    try:
        return peft.PeftModel.from_pretrained(model, str(earlier), is_trainable=True)
    except Exception as exc:  # peft raises ValueError, KeyError, RuntimeError, ...
        raise FinetuneError(
            f"resume_from {request.resume_from!r} does not load onto base_model "
            f"{request.base_model!r}: {type(exc).__name__}: {exc}"
        ) from exc


def heldout_loss(
    base_model: str, adapter: str | None, examples: Sequence[Example], eval_share: float = 0.2
) -> float:
    """Mean reply-token cross-entropy of ``base_model`` (plus ``adapter``, its frozen chain
    included) on the examples :func:`split_examples` holds out of ``examples`` — the same
    held-out set ``train_lora`` measures on, so an adapter trained on other data can be
    measured on this one's held-out examples (forgetting)."""
    torch, _, peft = require_stack()
    _, held = split_examples(examples, eval_share)
    model, tokenizer = load_base(base_model)
    if adapter is not None:
        model, _ = stack_onto(peft, model, adapter)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    encoded = [_encode(tokenizer, e, max_positions(model)) for e in held]
    return _eval_loss(torch, model, encoded, pad_id, device)


def save_adapter(
    model: Any, out_dir: str, meta: dict[str, Any], *, frozen: str | None = None
) -> None:
    """Write the peft ``model``'s adapter, ``meta`` as ``armature.json`` and (continual) the
    ``frozen`` adapter under ``frozen/`` to ``out_dir``: whole or not at all (staged next to
    it, then moved), private to its owner (it is learnt from traces)."""
    out = _check_out_dir(out_dir)
    private_dir(out.parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(str(staging))
        if frozen is not None:
            copy_frozen(frozen, staging)
        (staging / ADAPTER_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        make_private(staging)
        os.replace(staging, _check_out_dir(out_dir))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def train_lora(
    request: TrainRequest, *, progress: Callable[[int, float], None] | None = None
) -> TrainReport:
    """Train a LoRA adapter on ``request.examples`` and save it to ``request.out_dir``.

    The examples are split by hash into train and held-out eval; the loss (mean token
    cross-entropy) is only on the replies. ``eval_loss_before`` is the base model on the
    held-out examples, ``eval_loss_after`` base + adapter, ``base_loss`` the base model again
    after training (the adapter switched off: the base weights are frozen, so it matches
    ``eval_loss_before``). ``progress(step, loss)`` is called
    after every optimiser step. ``use_dora`` trains a DoRA adapter. With ``continual_from``
    the earlier adapter is merged in and frozen and a delta is trained on top
    (:mod:`armature_temporal.finetune.continual`): ``eval_loss_before`` is then base + the
    frozen adapter (where the delta starts), ``base_loss`` the base model alone.
    The adapter directory holds peft's files plus ``armature.json`` (the report and
    ``base_model``), and ``frozen/`` when continual; it appears whole or not at all.

    Raises:
        FinetuneUnavailable: torch, transformers or peft is missing.
        FinetuneError: the base model, out_dir or examples are unusable.
    """
    started = time.monotonic()
    torch, _, peft = require_stack()
    out = _check_out_dir(request.out_dir)
    _check_examples(request.examples)
    if request.rank < 1 or request.max_steps < 1:
        raise FinetuneError(
            f"rank and max_steps must be at least 1, got rank={request.rank}, "
            f"max_steps={request.max_steps}"
        )
    if request.continual_from is not None and request.resume_from is not None:
        raise FinetuneError(
            f"resume_from {request.resume_from!r} and continual_from "
            f"{request.continual_from!r} both given; pick one: resume_from trains that adapter "
            "further, continual_from freezes it and trains a delta on top"
        )
    train_set, eval_set = split_examples(request.examples, request.eval_share)

    model, tokenizer, device, limit, pad_id = setup_base(torch, request.base_model, request.seed)
    train_enc = [_encode(tokenizer, e, limit) for e in train_set]
    eval_enc = [_encode(tokenizer, e, limit) for e in eval_set]

    eval_before = _eval_loss(torch, model, eval_enc, pad_id, device)
    true_base: float | None = None
    frozen_a: dict[str, Any] = {}
    if request.continual_from is not None:
        # The base model alone, then the earlier adapter merged in and frozen: the delta
        # starts from there (its B matrices are zero, so at step 0 it changes nothing).
        true_base = eval_before
        model, frozen_a = stack_frozen(
            peft, model, str(request.continual_from), request.base_model, "continual_from"
        )
        eval_before = _eval_loss(torch, model, eval_enc, pad_id, device)

    if request.resume_from is not None:
        model = _resume(peft, model, request)
    else:
        model = peft.get_peft_model(model, lora_config(peft, model, request.rank, request.use_dora))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=request.learning_rate)
    batches = batch_indices(torch, len(train_enc), request.seed)
    losses: list[float] = []
    overlaps: list[float] = []
    model.train()
    for step in range(1, request.max_steps + 1):
        batch = _batch(torch, [train_enc[i] for i in next(batches)], pad_id, device)
        total, count = _token_loss(torch, model, batch)
        reply_loss = total / max(count, 1)
        loss = reply_loss
        if frozen_a:
            overlap = orthogonality_penalty(torch, model, frozen_a)
            overlaps.append(float(overlap.item()))
            loss = loss + request.orthogonality_weight * overlap
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(reply_loss.item()))  # the reply loss, without the penalty
        if progress is not None:
            progress(step, losses[-1])

    eval_after = _eval_loss(torch, model, eval_enc, pad_id, device)
    with model.disable_adapter():  # the base model's weights, untouched by training
        base_after = _eval_loss(torch, model, eval_enc, pad_id, device)
    if true_base is not None:  # disabling the delta leaves the frozen adapter merged in
        base_after = true_base

    report = TrainReport(
        adapter_dir=str(out),
        steps=request.max_steps,
        train_examples=len(train_set),
        eval_examples=len(eval_set),
        train_loss_first=losses[0],
        train_loss_last=losses[-1],
        eval_loss_before=eval_before,
        eval_loss_after=eval_after,
        base_loss=base_after,
        seconds=round(time.monotonic() - started, 3),
        device=device.type,
        continual_from=request.continual_from,
        orthogonality_first=overlaps[0] if overlaps else None,
        orthogonality_last=overlaps[-1] if overlaps else None,
    )
    meta = {**report.model_dump(mode="json"), "base_model": request.base_model}
    save_adapter(model, request.out_dir, meta, frozen=request.continual_from)
    return report
