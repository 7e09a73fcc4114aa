"""Confidence extraction: every LLM attempt's confidence in [0, 1] and its source.

:func:`confidence_of` takes, best first, the output tokens' logprobs (where the provider
returned them), the output's own stated confidence (a ``confidence`` or ``certainty`` number
in the schema), else the calibrated hedge detector of :mod:`.hedging` on the text.
"""

from __future__ import annotations

from armature_temporal.runtime.confidence._models import Confidence, ConfidenceSource
from armature_temporal.runtime.confidence.extract import (
    confidence_of,
    from_logprobs,
    stated_confidence,
)
from armature_temporal.runtime.confidence.hedging import hedge_confidence

__all__ = [
    "Confidence",
    "ConfidenceSource",
    "confidence_of",
    "from_logprobs",
    "hedge_confidence",
    "stated_confidence",
]
