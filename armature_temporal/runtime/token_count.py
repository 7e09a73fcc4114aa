"""Tokens, counted where the ``llm_call`` activity runs: the model's context window and each
message's tokens, for a tool loop's context policy (armature_temporal/runtime/context.py).

litellm's counter for the model (its tokenizer where litellm knows the model, else its own
fallback); for ``simulate`` and ``local`` tiers, and for a message litellm cannot count, the
documented estimate of four characters a token.
"""

from __future__ import annotations

from typing import Any

from armature_temporal.runtime.context import estimate_message_tokens
from armature_temporal.spec.plan import ResolvedTier

__all__ = ["context_window_of", "count_tokens"]

_ESTIMATED = ("simulate", "local")


def context_window_of(tier: ResolvedTier) -> int | None:
    """Tokens the tier's model accepts: the tier's ``context_window``, else litellm's model
    info (``max_input_tokens``); None when neither knows."""
    if tier.context_window is not None:
        return tier.context_window
    if tier.provider in _ESTIMATED or not tier.model:
        return None
    from armature_temporal.runtime.llm import import_litellm

    litellm = import_litellm()
    for name in (f"{tier.provider}/{tier.model}", tier.model):
        try:
            info = litellm.get_model_info(model=name)
        except Exception:  # unknown to litellm's map: try the bare name, then give up
            continue
        size = info.get("max_input_tokens") or info.get("max_tokens")
        if isinstance(size, int) and size > 0:
            return size
    return None


def count_tokens(tier: ResolvedTier, messages: list[dict[str, Any]]) -> list[int]:
    """Each message's tokens for the tier's model."""
    if tier.provider in _ESTIMATED or not tier.model:
        return [estimate_message_tokens(m) for m in messages]
    from armature_temporal.runtime.llm import import_litellm

    litellm = import_litellm()
    counts = []
    for message in messages:
        try:
            counts.append(int(litellm.token_counter(model=tier.model, messages=[message])))
        except Exception:  # a shape litellm's counter does not take: the estimate
            counts.append(estimate_message_tokens(message))
    return counts
