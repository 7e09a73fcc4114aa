"""Reason before acting (``reason_first``): where a stage's private reasoning goes in its calls.

A ``reason_first`` attempt makes two model calls. The reasoning call is the stage's own prompt
with a request for reasoning after the task (:func:`with_reasoning` with ``request``); the
answer call is the stage's prompt with that reasoning after the task, between
:data:`REASONING_OPEN` and :data:`REASONING_CLOSE` (``reasoning``). The reasoning lives only in
the answer call's messages and in the stage's trace (``data.reasoning``, marked private): the
stage's output is the answer's, so no later stage, template or run context ever holds it.

Pure: messages in, messages out.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REASONING_CLOSE", "REASONING_OPEN", "with_reasoning", "without_reasoning"]

#: Opens the private reasoning section of an answer call's prompt.
REASONING_OPEN = (
    "Your private reasoning, written before answering (use it; do not repeat it in the answer):"
    "\n<<<reasoning"
)
#: Closes it.
REASONING_CLOSE = "reasoning>>>"

_SECTION = re.compile(
    re.escape("\n\n" + REASONING_OPEN) + r".*?" + re.escape(REASONING_CLOSE), re.S
)


def with_reasoning(
    messages: list[dict[str, Any]], *, reasoning: str = "", request: str = ""
) -> list[dict[str, Any]]:
    """``messages`` (system, then the task's user message) with the private ``reasoning``
    section, or the reasoning ``request``, after the task in the last user message."""
    if not reasoning and not request:
        return messages
    added = (
        f"\n\n{REASONING_OPEN}\n{reasoning.strip()}\n{REASONING_CLOSE}"
        if reasoning
        else f"\n\n{request.strip()}"
    )
    out = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(out) if m.get("role") == "user")
    out[last]["content"] = f"{out[last].get('content', '')}{added}"
    return out


def without_reasoning(text: str) -> str:
    """``text`` without the private reasoning sections it carries."""
    return _SECTION.sub("", text)
