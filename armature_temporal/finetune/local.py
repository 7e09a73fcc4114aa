"""Run a local transformers model, optionally with a trained LoRA adapter: :func:`generate`.

This is what ``provider: local`` tiers call. It is blocking (callers run it in a thread),
loads each (base model, adapter) pair once per process into a small lock-protected cache,
and never downloads anything: ``base_model`` and ``adapter`` are local directories.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from armature_temporal.finetune.continual import stack_onto
from armature_temporal.finetune.train import (
    FinetuneError,
    load_base,
    max_positions,
    prompt_ids,
    require_stack,
)

__all__ = ["LocalCompletion", "clear_cache", "generate"]

_CACHE_SIZE = 2


class LocalCompletion(BaseModel):
    """One local completion. ``completion_tokens`` counts generated tokens, not the stop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: Literal["stop", "length"]


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    stop_ids: frozenset[int]
    limit: int
    lock: threading.Lock = field(default_factory=threading.Lock)  # one generation at a time


_cache: OrderedDict[tuple[str, str | None], _Loaded] = OrderedDict()
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every loaded model (tests; or to free memory)."""
    with _cache_lock:
        _cache.clear()


def _stop_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, list | tuple):
        ids.update(int(i) for i in configured)
    return frozenset(ids)


def _load(base_model: str, adapter: str | None) -> _Loaded:
    torch, _, peft = require_stack()
    if adapter is not None and not (Path(adapter).expanduser() / "adapter_config.json").is_file():
        raise FinetuneError(
            f"adapter {adapter!r} is not a LoRA adapter directory (no adapter_config.json); "
            "train one with `armature finetune` or pass the directory train_lora wrote"
        )
    model, tokenizer = load_base(base_model)
    if adapter is not None:
        try:
            # A continual adapter brings its frozen predecessors (frozen/): all are merged,
            # in the order they were trained.
            model, _ = stack_onto(peft, model, adapter)
        except Exception as exc:  # peft raises ValueError, KeyError, RuntimeError, ...
            raise FinetuneError(
                f"adapter {adapter!r} does not load onto base_model {base_model!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    model.eval()
    return _Loaded(model, tokenizer, _stop_ids(model, tokenizer), max_positions(model))


def _get(base_model: str, adapter: str | None) -> _Loaded:
    key = (base_model, adapter)
    with _cache_lock:
        loaded = _cache.get(key)
        if loaded is None:
            loaded = _load(base_model, adapter)
            _cache[key] = loaded
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
        _cache.move_to_end(key)
        return loaded


class _SeededSampler:
    """A logits processor that samples one token with a seeded generator and leaves only it.

    ``generate`` then picks it greedily, so sampling is reproducible per call (same seed,
    same text) without touching torch's global random state.
    """

    def __init__(self, torch: Any, temperature: float, generator: Any) -> None:
        self._torch = torch
        self._temperature = temperature
        self._generator = generator

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        torch = self._torch
        probs = torch.softmax(scores.float() / self._temperature, dim=-1)
        picked = torch.multinomial(probs, 1, generator=self._generator)
        only = torch.full_like(scores, float("-inf"))
        return only.scatter(-1, picked, 0.0)


def generate(
    base_model: str,
    messages: list[dict[str, Any]],
    *,
    adapter: str | None = None,
    max_tokens: int = 256,
    temperature: float | None = None,
    seed: int = 0,
) -> LocalCompletion:
    """Complete ``messages`` with the local model at ``base_model`` (plus ``adapter``).

    Greedy when ``temperature`` is None or 0, else sampled with a generator seeded by
    ``seed`` (same inputs, same seed: same text). Stops at the end-of-sequence token
    (``finish_reason="stop"``) or after ``max_tokens`` (``"length"``). The prompt is the
    tokenizer's chat template, cut from the left when it would not fit; it keeps at least half
    the model's context, so a ``max_tokens`` near the context size shortens the reply instead
    of the prompt. Blocking.

    Raises:
        FinetuneUnavailable: torch, transformers or peft is missing.
        FinetuneError: the model or adapter directory is missing or unusable.
    """
    torch, transformers, _ = require_stack()
    if max_tokens < 1:
        raise FinetuneError(f"max_tokens must be at least 1, got {max_tokens}")
    loaded = _get(base_model, adapter)
    model, tokenizer = loaded.model, loaded.tokenizer
    device = next(model.parameters()).device
    full = prompt_ids(tokenizer, messages)
    # The prompt keeps at least half the context (or all of itself, if shorter): a large
    # max_tokens shortens the reply, never the question to one token.
    keep = min(len(full), max(loaded.limit // 2, loaded.limit - max_tokens))
    budget = max(min(max_tokens, loaded.limit - keep), 1)
    prompt = full[-(loaded.limit - budget) :] if keep else []
    if not prompt:  # nothing to condition on: start from the tokenizer's bos (or eos)
        bos = tokenizer.bos_token_id
        prompt = [int(bos) if bos is not None else min(loaded.stop_ids, default=0)]
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = min(loaded.stop_ids) if loaded.stop_ids else 0
    config = transformers.GenerationConfig(
        max_new_tokens=budget,
        do_sample=False,  # sampling, when asked, is done by _SeededSampler (a seeded generator)
        num_beams=1,
        eos_token_id=sorted(loaded.stop_ids) or None,
        pad_token_id=int(pad_id),
    )
    processors = transformers.LogitsProcessorList()
    if temperature is not None and temperature > 0:
        generator = torch.Generator(device=device).manual_seed(seed)
        processors.append(_SeededSampler(torch, float(temperature), generator))
    with loaded.lock, torch.no_grad():
        inputs = torch.tensor([prompt], dtype=torch.long, device=device)
        output = model.generate(
            input_ids=inputs,
            attention_mask=torch.ones_like(inputs),
            generation_config=config,
            logits_processor=processors,
        )
    produced = [int(t) for t in output[0, len(prompt) :]]
    finish: Literal["stop", "length"] = "length"
    if produced and produced[-1] in loaded.stop_ids:
        produced.pop()
        finish = "stop"
    text = tokenizer.decode(produced, skip_special_tokens=True)
    return LocalCompletion(
        text=str(text),
        prompt_tokens=len(prompt),
        completion_tokens=len(produced),
        finish_reason=finish,
    )
