"""The reference policy of a ``finetune.method: dpo`` job: DPO starts from a supervised policy.

A stage's DPO adapter is trained on top of an SFT adapter when it has one — the SFT adapter
merged in and frozen, and the DPO reference policy; the DPO adapter a delta on it (see
:mod:`armature_temporal.finetune.preference`) — chosen in this order:

1. the stage's newest verified, active SFT adapter trained on the same base model whose
   directory is on this worker;
2. else, when the stage has at least ``finetune.min_examples`` distinct successful replies
   outside the held-out pairs' prompts and runs, an SFT adapter the round trains on them
   first (those replies are left out, so the DPO adapter's held-out figures and paired runs
   do not measure prompts its reference was trained on);
3. else the base model, as a DPO adapter on its own.

Pure: it reads the adapters and examples it is given and the adapter directories' presence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from armature_temporal.finetune.models import (
    Adapter,
    Example,
    PreferencePair,
    TrainReport,
    TrainRequest,
)

__all__ = ["Reference", "choose_reference"]


@dataclass(frozen=True)
class Reference:
    """What a DPO job starts from: ``adapter`` (an SFT adapter's directory) or ``train`` (an
    SFT adapter to train first), or neither (the base model); ``words`` says which, and why."""

    words: str
    adapter: str | None = None
    train: TrainRequest | None = None


def _key(messages: Sequence[dict[str, object]]) -> str:
    return json.dumps(list(messages), sort_keys=True, ensure_ascii=False, default=str)


def choose_reference(
    adapters: Sequence[Adapter],
    examples: Sequence[Example],
    held_out: Sequence[PreferencePair],
    *,
    stage: str,
    base_model: str,
    min_examples: int,
    sft_request: TrainRequest,
) -> Reference:
    """The reference for ``stage``'s DPO job (see the module docstring). ``adapters``: the
    spec's adapters, newest first; ``examples``: the stage's successful replies (``sft_rows``);
    ``held_out``: the DPO job's held-out pairs; ``sft_request``: the SFT job to train first,
    whose examples are replaced by those kept here."""
    why_not = "the stage has no verified SFT adapter"
    for adapter in adapters:
        if adapter.stage != stage or adapter.verdict != "verified" or adapter.status != "active":
            continue
        if not isinstance(adapter.report, TrainReport):
            continue  # a DPO adapter: the reference is a supervised policy
        if adapter.base_model != base_model:
            why_not = f"its newest verified SFT adapter {adapter.id} is on {adapter.base_model}"
            continue
        if not (Path(adapter.path) / "adapter_config.json").is_file():
            why_not = f"its newest verified SFT adapter's directory {adapter.path} is not here"
            continue
        return Reference(
            words=f"SFT adapter {adapter.id} (the stage's newest verified one)",
            adapter=adapter.path,
        )
    held = {_key(pair.prompt) for pair in held_out}
    held_runs = {run for pair in held_out for run in pair.run_ids}
    kept = [e for e in examples if _key(e.messages) not in held and e.run_id not in held_runs]
    if len(kept) >= min_examples:
        return Reference(
            words=f"an SFT adapter the round trained first on {len(kept)} successful replies "
            f"({why_not})",
            train=sft_request.model_copy(update={"examples": kept}),
        )
    return Reference(
        words=f"the base model ({why_not}, and {len(kept)} distinct successful replies "
        f"outside the held-out pairs' prompts and runs, fewer than min_examples = "
        f"{min_examples}, to train one first)"
    )
