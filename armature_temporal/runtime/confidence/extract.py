"""``confidence_of``: an attempt's confidence from its logprobs, its stated number, or its text."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from armature_temporal.runtime.confidence._models import Confidence
from armature_temporal.runtime.confidence.hedging import hedge_confidence

__all__ = ["STATED_KEYS", "answer_text", "confidence_of", "from_logprobs", "stated_confidence"]

#: Output properties read as the model's stated confidence, first found wins.
STATED_KEYS = ("confidence", "certainty")
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def confidence_of(
    *,
    text: str,
    output: Any,
    schema: dict[str, Any] | None,
    logprobs: Sequence[float] | None,
) -> Confidence:
    """The attempt's confidence, from the best source it has.

    Args:
        text: The model's raw reply.
        output: The parsed output (``{"content": ...}`` for text stages; None if it did not
            parse).
        schema: The stage's output JSON Schema, if any.
        logprobs: The output tokens' log-probabilities, where the provider returned them.

    Returns:
        ``logprobs`` when there are any, else ``stated`` when the output carries a
        ``confidence``/``certainty`` number, else ``hedging`` (the calibrated detector on the
        answer's text).
    """
    value = from_logprobs(logprobs)
    if value is not None:
        return Confidence(value=value, source="logprobs")
    stated = stated_confidence(output, schema)
    if stated is not None:
        return Confidence(value=stated, source="stated")
    return Confidence(value=hedge_confidence(answer_text(text, output)), source="hedging")


def from_logprobs(logprobs: Sequence[float] | None) -> float | None:
    """The geometric mean of the tokens' probabilities, ``exp(mean(logprobs))``; None when
    there are no finite logprobs. Uncalibrated: the dashboard's reliability table says how far
    to trust it for a given model."""
    finite = [float(v) for v in logprobs or () if math.isfinite(v)]
    if not finite:
        return None
    return min(1.0, max(0.0, math.exp(sum(min(v, 0.0) for v in finite) / len(finite))))


def stated_confidence(output: Any, schema: dict[str, Any] | None) -> float | None:
    """The output's own ``confidence`` (or ``certainty``) in [0, 1], or None.

    The number is scaled by the schema's ``minimum``/``maximum`` where it declares both;
    otherwise a value in [0, 1] is taken as is, one in (1, 10] as a 0–10 scale and one in
    (10, 100] as a percentage (strings like ``"85%"`` too). Anything else is not a stated
    confidence.
    """
    if not isinstance(output, dict):
        return None
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    for key in STATED_KEYS:
        if key not in output:
            continue
        sub = props.get(key) if isinstance(props, dict) else None
        value = _scaled(output[key], sub if isinstance(sub, dict) else {})
        if value is not None:
            return value
    return None


def _scaled(raw: Any, sub: dict[str, Any]) -> float | None:
    percent = False
    if isinstance(raw, str):
        match = _PERCENT.match(raw)
        if match is None:
            return None
        raw, percent = float(match.group(1)), True
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        return None
    value = float(raw)
    low, high = sub.get("minimum"), sub.get("maximum")
    if percent:
        low, high = 0.0, 100.0
    if isinstance(low, int | float) and isinstance(high, int | float) and high > low:
        scaled = (value - low) / (high - low)
    elif 0.0 <= value <= 1.0:
        scaled = value
    elif 1.0 < value <= 10.0:
        scaled = value / 10.0
    elif 10.0 < value <= 100.0:
        scaled = value / 100.0
    else:
        return None
    return min(1.0, max(0.0, scaled))


def answer_text(text: str, output: Any) -> str:
    """The prose the hedge detector reads: the output's strings (a JSON output's free text,
    its stated-confidence fields aside), else the raw reply; ``<think>`` blocks removed."""
    parts: list[str] = []
    _strings(output, parts)
    prose = " ".join(parts) if parts else text
    return _THINK.sub(" ", prose).strip()


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in STATED_KEYS:
                _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)
