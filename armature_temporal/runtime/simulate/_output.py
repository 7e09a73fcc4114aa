"""How simulated output is written out: text-mode answers, and JSON as a model returns it."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from armature_temporal.runtime.simulate._words import MARK, sentence

__all__ = ["DRESSED_SHARE", "render", "text_answer", "unfinished_reasoning"]

#: Share of outputs that are dressed up (a ```json fence or a leading <think> block).
DRESSED_SHARE = 0.2


def text_answer(
    rng: random.Random,
    words: list[str],
    role_type: str,
    quality: float,
    dress: float,
    extra: Sequence[str] = (),
) -> str:
    """Two to four ``[simulated]`` sentences, then ``extra`` ones (symptoms); a judge's end
    with its score."""
    sentences = [sentence(rng, words) for _ in range(rng.randint(2, 4))]
    sentences.extend(extra)
    if role_type == "judge":
        sentences.append(f"Score: {round(quality, 3)}.")
    text = MARK + " ".join(sentences)
    if dress < DRESSED_SHARE / 2:
        return f"<think>\n[simulated] Thinking about {rng.choice(words)}.\n</think>\n{text}"
    return text


def unfinished_reasoning(rng: random.Random, words: list[str]) -> str:
    """Reasoning that never ends — a model that ran out of tokens before answering."""
    return (
        f"<think>\n[simulated] Let me think about {rng.choice(words)} and "
        f"{rng.choice(words)}. First, the {rng.choice(words)}"
    )


def render(value: Any, dress: float, rng: random.Random, words: list[str]) -> str:
    """``value`` as JSON, sometimes indented and sometimes dressed (``dress`` < DRESSED_SHARE)."""
    indent = 2 if isinstance(value, dict | list) and rng.random() < 0.5 else None
    body = json.dumps(value, ensure_ascii=False, indent=indent)
    if dress < DRESSED_SHARE / 2:
        return f"```json\n{body}\n```"
    if dress < DRESSED_SHARE:
        return (
            f"<think>\n[simulated] The answer should cover {rng.choice(words)} and "
            f"{rng.choice(words)}.\n</think>\n{body}"
        )
    return body
