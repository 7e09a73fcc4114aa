"""The fine-tune loop: distil traces into LoRA adapters, and run them with provider: local.

``export`` (SFT rows and DPO pairs from traces), ``train`` (LoRA and DoRA training),
``continual`` (a frozen adapter plus a delta), ``preference`` (DPO training from the pairs:
SAO), ``local`` (generate with a local model and adapter), ``tiny`` (a tiny offline model for
tests and demos) and ``models`` (the data that travels through Temporal and into the
store). Names are loaded on first use; torch, transformers and peft only when training or
generating.
"""

from typing import Any

__all__ = [
    "Adapter",
    "FinetuneError",
    "FinetuneInput",
    "FinetuneResult",
    "FinetuneUnavailable",
    "PreferenceRequest",
    "TrainReport",
    "create_tiny_model",
    "dpo_rows",
    "generate",
    "sft_rows",
    "train_dpo",
    "train_lora",
]

_WHERE = {
    "Adapter": "models",
    "FinetuneError": "train",
    "FinetuneInput": "models",
    "FinetuneResult": "models",
    "FinetuneUnavailable": "train",
    "PreferenceRequest": "models",
    "TrainReport": "models",
    "create_tiny_model": "tiny",
    "dpo_rows": "export",
    "generate": "local",
    "sft_rows": "export",
    "train_dpo": "preference",
    "train_lora": "train",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(f"armature_temporal.finetune.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'armature_temporal.finetune' has no attribute {name!r}")
