"""Continual adapters (C-LoRA style): a frozen earlier adapter plus a trainable delta.

Training on top of an earlier adapter (``TrainRequest.continual_from``):

1. the earlier adapter (and, recursively, whatever it was itself stacked on) is merged into
   the base weights — frozen: nothing of it is trained again;
2. its LoRA ``A`` matrices (the input directions each adapted layer reads, shape ``r × in``)
   are kept aside;
3. a new LoRA adapter, the *delta*, is trained on the merged model. peft initialises its ``B``
   matrices to zero, so the delta starts as exactly no change (C-LoRA's near-zero delta);
4. the loss gets ``orthogonality_weight × Σ_layers ||A_frozen · A_deltaᵀ||_F²``
   (:func:`orthogonality_penalty`): the squared overlap of the delta's input subspace with
   the frozen one's, so the delta learns through input directions the earlier adapter does
   not use.

The delta's directory holds the earlier adapter's directory, copied whole, under
:data:`FROZEN_DIR`; :func:`stack_onto` loads the chain in training order (deepest frozen
first) onto a base model, which is how ``provider: local`` serves a continual adapter.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "FROZEN_DIR",
    "adapter_chain",
    "copy_frozen",
    "frozen_a_matrices",
    "orthogonality_penalty",
    "stack_onto",
]

#: Sub-directory of a continual adapter that holds the frozen adapter it was trained on.
FROZEN_DIR = "frozen"


def adapter_chain(adapter_dir: str | Path) -> list[Path]:
    """The adapter directories to apply, in training order: the deepest frozen one first,
    ``adapter_dir`` itself last."""
    chain = [Path(adapter_dir).expanduser()]
    while (chain[-1] / FROZEN_DIR / "adapter_config.json").is_file():
        chain.append(chain[-1] / FROZEN_DIR)
    return list(reversed(chain))


def _module_key(name: str) -> str:
    """A LoRA A parameter's layer, independent of the adapter's name and peft's prefixes:
    ``base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight`` →
    ``transformer.h.0.attn.c_attn``."""
    head = name.split(".lora_A.", 1)[0]
    return head.removeprefix("base_model.model.")


def frozen_a_matrices(peft_model: Any) -> dict[str, Any]:
    """Layer → the LoRA A weight (``r × in``, detached) of the adapter loaded in
    ``peft_model`` (its active adapter)."""
    out: dict[str, Any] = {}
    for name, param in peft_model.named_parameters():
        if ".lora_A." in name and name.endswith(".weight"):
            out[_module_key(name)] = param.detach().clone()
    return out


def stack_onto(peft: Any, model: Any, adapter_dir: str | Path) -> tuple[Any, dict[str, Any]]:
    """Merge the frozen chain of ``adapter_dir`` *and* ``adapter_dir`` itself into ``model``,
    in training order; returns the merged plain model and, per layer, the A matrices of every
    adapter in the chain stacked row-wise (the frozen subspace a delta trained on top is kept
    away from).

    Raises whatever peft raises when an adapter does not fit the model; callers name it.
    """
    import torch

    stacked: dict[str, Any] = {}
    for step in adapter_chain(adapter_dir):
        loaded = peft.PeftModel.from_pretrained(model, str(step))
        for key, a in frozen_a_matrices(loaded).items():
            stacked[key] = torch.cat([stacked[key], a]) if key in stacked else a
        model = loaded.merge_and_unload()
    return model, stacked


def orthogonality_penalty(torch: Any, peft_model: Any, frozen_a: dict[str, Any]) -> Any:
    """``Σ_layers ||A_frozen · A_deltaᵀ||_F²`` over the layers both adapters adapt (a tensor
    with gradient through the delta's A matrices; 0 when none is shared)."""
    total = torch.zeros((), device=next(peft_model.parameters()).device)
    for name, param in peft_model.named_parameters():
        if not param.requires_grad or ".lora_A." not in name or not name.endswith(".weight"):
            continue
        old = frozen_a.get(_module_key(name))
        if old is None or old.shape[1] != param.shape[1]:
            continue
        total = total + (old.to(param.device) @ param.t()).pow(2).sum()
    return total


def copy_frozen(adapter_dir: str | Path, into: Path) -> None:
    """Copy the earlier adapter (its frozen chain included) under ``into / FROZEN_DIR``."""
    shutil.copytree(Path(adapter_dir).expanduser(), into / FROZEN_DIR)
