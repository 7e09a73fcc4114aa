"""The ``Confidence`` an LLM attempt carries: a number in [0, 1] and where it came from."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Confidence", "ConfidenceSource"]

#: Where a confidence came from, best first: the tokens' probabilities, the model's own
#: stated number, or the hedge detector on its text.
ConfidenceSource = Literal["logprobs", "stated", "hedging"]


class Confidence(BaseModel):
    """How sure an attempt is of its output.

    Attributes:
        value: In [0, 1]; higher is surer.
        source: ``logprobs`` (the geometric mean of the output tokens' probabilities),
            ``stated`` (the output's own ``confidence``/``certainty`` field, scaled to
            [0, 1]) or ``hedging`` (the calibrated hedge detector's probability that the
            attempt is good).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(ge=0.0, le=1.0)
    source: ConfidenceSource
