"""Python assertions for the example cases files (``type: python``): each is called with the
output as text and a context (vars, output, outputs, stage, run_id, description)."""

from __future__ import annotations

from typing import Any


def word_count_between(output: str, context: dict[str, Any]) -> dict[str, Any]:
    """Pass when the text has 5 to 120 words; the score is how far inside that range."""
    words = len(output.split())
    ok = 5 <= words <= 120
    return {"pass": ok, "score": 1.0 if ok else 0.0, "reason": f"{words} words (5..120)"}


def confident(output: str, context: dict[str, Any]) -> float:
    """The stated confidence of a structured output (a number; the threshold decides)."""
    value = context["output"]
    return float(value["confidence"]) if isinstance(value, dict) else 0.0
