"""The hedge detector: cue features of a text, a logistic model over them, and its calibration.

The features count, in a text, the cue classes of the hedging literature (Hyland 1998,
*Hedging in Scientific Research Articles*; the CoNLL-2010 uncertainty-cue categories):
epistemic modals, epistemic adverbs and verbs, approximators, first-person uncertainty,
disclaimers and deferrals, conditionals, contrast (self-correction, "X, but maybe Y") and
questions — and boosters, which count the other way. A logistic model over them, fitted on
the labelled corpus ``hedge_corpus.jsonl`` (see :mod:`.train`), gives a logit; Platt scaling,
fitted on out-of-fold logits, turns it into the probability that the attempt is good. The
fitted numbers ship in ``hedge_weights.json``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from armature_temporal.errors import ArmatureError

__all__ = [
    "CUES",
    "FEATURES",
    "HedgeModel",
    "HedgeModelError",
    "hedge_confidence",
    "hedge_features",
    "load_hedge_model",
]

FORMAT = 1
DEFAULT_WEIGHTS = "hedge_weights.json"

#: Cue phrases by class, matched on word boundaries, case-insensitively.
CUES: dict[str, tuple[str, ...]] = {
    "modal": ("may", "might", "could", "would", "may be", "might be", "could be"),
    "adverb": (
        "perhaps",
        "possibly",
        "probably",
        "likely",
        "unlikely",
        "presumably",
        "apparently",
        "seemingly",
        "arguably",
        "conceivably",
        "maybe",
        "potentially",
        "supposedly",
        "plausibly",
        "allegedly",
        "reportedly",
    ),
    "verb": (
        "seem",
        "seems",
        "seemed",
        "appear",
        "appears",
        "appeared",
        "suggest",
        "suggests",
        "guess",
        "suppose",
        "assume",
        "suspect",
        "speculate",
        "tend to",
        "tends to",
        "i think",
        "i believe",
        "i feel",
        "we think",
        "we believe",
    ),
    "approximator": (
        "roughly",
        "approximately",
        "around",
        "about",
        "or so",
        "more or less",
        "somewhere",
        "kind of",
        "sort of",
        "some sort of",
        "ish",
        "something like",
        "in the region of",
    ),
    "uncertain": (
        "not sure",
        "not certain",
        "uncertain",
        "unclear",
        "unsure",
        "i don't know",
        "i do not know",
        "hard to say",
        "difficult to say",
        "hard to tell",
        "can't say",
        "cannot say",
        "it depends",
        "can't be certain",
        "cannot be certain",
        "no way to know",
        "can't determine",
        "cannot determine",
        "unable to determine",
        "i may be wrong",
        "i could be wrong",
        "if i recall",
        "if i remember",
        "as far as i know",
        "to the best of my knowledge",
        "not entirely",
        "not confident",
        "i'm guessing",
        "my guess",
        "best guess",
        "i can't tell",
        "not clear",
        "it's possible",
        "it is possible",
    ),
    "deferral": (
        "as an ai",
        "i cannot verify",
        "i can't verify",
        "without more information",
        "more context",
        "more information",
        "more details",
        "consult",
        "double-check",
        "double check",
        "verify this",
        "i don't have access",
        "i do not have access",
        "you may want to",
        "you might want to",
        "check with",
        "confirm with",
    ),
    "conditional": ("if", "unless", "assuming", "depending on", "provided that", "in case"),
    "contrast": (
        "but",
        "however",
        "although",
        "though",
        "on the other hand",
        "alternatively",
        "or perhaps",
        "or maybe",
        "then again",
        "that said",
        "either",
        "or rather",
        "actually, no",
        "on second thought",
    ),
    "booster": (
        "definitely",
        "certainly",
        "clearly",
        "undoubtedly",
        "without doubt",
        "always",
        "confirmed",
        "precisely",
        "exactly",
        "in fact",
        "of course",
        "indeed",
        "will",
        "must",
        "is the",
        "the answer is",
        "the result is",
    ),
}
#: The features, in order: each cue class, questions and numbers. Not the text's length: in
#: the corpus hedged answers run longer, which says nothing about hedging.
FEATURES: tuple[str, ...] = (*CUES, "question", "digits")
_PATTERNS = {
    name: re.compile(
        r"(?<![\w'])(?:"
        + "|".join(re.escape(c) for c in sorted(cues, key=len, reverse=True))
        + r")(?![\w'])",
        re.IGNORECASE,
    )
    for name, cues in CUES.items()
}
_WORD = re.compile(r"\w+")
_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")


class HedgeModelError(ArmatureError):
    """The hedge detector's weights file is missing, malformed or of an unknown format."""


def hedge_features(text: str) -> dict[str, float]:
    """The detector's features of ``text``: ``log(1 + count)`` of each cue class, of question
    marks and of numbers."""
    normal = text.replace("’", "'")
    out = {name: math.log1p(len(pattern.findall(normal))) for name, pattern in _PATTERNS.items()}
    out["question"] = math.log1p(normal.count("?"))
    out["digits"] = math.log1p(len(_DIGITS.findall(normal)))
    return out


@dataclass(frozen=True)
class HedgeModel:
    """``P(good) = sigmoid(platt_a * logit + platt_b)``, ``logit = bias + Σ w_f · x_f``.

    Attributes:
        weights: Feature name to weight (features of :data:`FEATURES`).
        bias: The logistic model's intercept.
        platt_a: Platt scaling's slope, fitted on out-of-fold logits.
        platt_b: Platt scaling's intercept.
        meta: How and on what it was fitted, with its held-out figures.
    """

    weights: Mapping[str, float]
    bias: float
    platt_a: float = 1.0
    platt_b: float = 0.0
    meta: Mapping[str, Any] = field(default_factory=dict)

    def logit(self, features: Mapping[str, float]) -> float:
        return self.bias + sum(w * features.get(f, 0.0) for f, w in self.weights.items())

    def probability(self, text: str) -> float:
        """The calibrated probability that the attempt whose answer is ``text`` is good; 0 for
        a text without a word (no answer at all)."""
        if _WORD.search(text) is None:
            return 0.0
        return _sigmoid(self.platt_a * self.logit(hedge_features(text)) + self.platt_b)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "bias": round(self.bias, 6),
            "platt_a": round(self.platt_a, 6),
            "platt_b": round(self.platt_b, 6),
            "meta": dict(self.meta),
            "weights": {k: round(v, 6) for k, v in self.weights.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "<data>") -> HedgeModel:
        if data.get("format") != FORMAT:
            raise HedgeModelError(
                f"{where}: format {data.get('format')!r} is not {FORMAT}; retrain with "
                "`python -m armature_temporal.runtime.confidence.train`"
            )
        try:
            weights = {str(k): float(v) for k, v in data["weights"].items()}
            unknown = sorted(set(weights) - set(FEATURES))
            if unknown:
                raise ValueError(f"unknown features {unknown}")
            return cls(
                weights=weights,
                bias=float(data["bias"]),
                platt_a=float(data.get("platt_a", 1.0)),
                platt_b=float(data.get("platt_b", 0.0)),
                meta=dict(data.get("meta", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HedgeModelError(f"{where}: not a hedge weights file ({exc})") from exc


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def load_hedge_model(path: Path | None = None) -> HedgeModel:
    """The model in ``path``, or the one shipped in this package.

    Raises:
        HedgeModelError: The file is missing or is not a weights file.
    """
    if path is None:
        ref = resources.files("armature_temporal.runtime.confidence").joinpath(DEFAULT_WEIGHTS)
        where = str(ref)
        try:
            text = ref.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise HedgeModelError(
                f"{where}: the shipped hedge weights are missing; run "
                "`python -m armature_temporal.runtime.confidence.train` to make them"
            ) from exc
    else:
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise HedgeModelError(f"{path}: no such hedge weights file") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HedgeModelError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise HedgeModelError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return HedgeModel.from_json(data, where)


@lru_cache(maxsize=1)
def _shipped() -> HedgeModel:
    return load_hedge_model()


def hedge_confidence(text: str) -> float:
    """The shipped detector's calibrated probability that the attempt answering ``text`` is
    good: low for hedged, uncertain or self-contradicting text."""
    return _shipped().probability(text)
