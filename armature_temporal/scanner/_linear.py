"""A logistic-regression model over binary text features, stored as a small JSON file."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from armature_temporal.errors import ArmatureError

__all__ = ["LinearModel", "ModelFileError", "load_model"]

FORMAT = 1
DEFAULT_WEIGHTS = "injection_weights.json"


class ModelFileError(ArmatureError):
    """A scanner weights file is missing, malformed or of an unknown format."""


@dataclass(frozen=True)
class LinearModel:
    """``logit = bias + Σ w_f / √(n + pseudocount)`` over the ``n`` known features of a text.

    Attributes:
        weights: Feature name to weight; features not listed weigh nothing.
        bias: The intercept.
        threshold: The logit at which a text is flagged, chosen by cross-validation for a
            target false-positive rate (see ``train.py``).
        pseudocount: Added to ``n`` before the square root, so that a text with one or two
            known words cannot be flagged on the strength of a single word.
        meta: How and on what the model was trained, for the record.
    """

    weights: Mapping[str, float]
    bias: float
    threshold: float
    pseudocount: float = 0.0
    meta: Mapping[str, Any] = field(default_factory=dict)

    def logit(self, features: Iterable[str]) -> float:
        """The model's logit for a set of feature names."""
        total = 0.0
        count = 0
        weights = self.weights
        for f in features:
            w = weights.get(f)
            if w is not None:
                total += w
                count += 1
        norm = math.sqrt(count + self.pseudocount)
        return self.bias + (total / norm if norm else 0.0)

    def score(self, features: Iterable[str]) -> float:
        """Score in ``[0, 1]``, 0.5 exactly at the threshold: ``sigmoid(logit - threshold)``."""
        return _sigmoid(self.logit(features) - self.threshold)

    def explain(self, features: Iterable[str], top: int = 5) -> list[tuple[str, float]]:
        """The ``top`` features that pushed the score up most, with their weights."""
        present = [(f, self.weights[f]) for f in set(features) if f in self.weights]
        present.sort(key=lambda fw: -fw[1])
        return present[:top]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "bias": round(self.bias, 6),
            "threshold": round(self.threshold, 6),
            "pseudocount": self.pseudocount,
            "meta": dict(self.meta),
            "weights": {k: round(v, 5) for k, v in sorted(self.weights.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "<data>") -> LinearModel:
        if data.get("format") != FORMAT:
            raise ModelFileError(
                f"{where}: format {data.get('format')!r} is not {FORMAT}; retrain with "
                "`python -m armature_temporal.scanner.train`"
            )
        try:
            weights = {str(k): float(v) for k, v in data["weights"].items()}
            return cls(
                weights=weights,
                bias=float(data["bias"]),
                threshold=float(data["threshold"]),
                pseudocount=float(data.get("pseudocount", 0.0)),
                meta=dict(data.get("meta", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelFileError(f"{where}: not a scanner weights file ({exc!r})") from exc


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _read_default() -> tuple[str, str]:
    ref = resources.files("armature_temporal.scanner").joinpath(DEFAULT_WEIGHTS)
    try:
        return ref.read_text(encoding="utf-8"), str(ref)
    except FileNotFoundError as exc:
        raise ModelFileError(
            f"{ref}: the shipped injection weights are missing; run "
            "`python -m armature_temporal.scanner.train` to make them"
        ) from exc


def load_model(path: Path | None = None) -> LinearModel:
    """Load a model from ``path``, or the weights shipped in this package.

    Raises:
        ModelFileError: The file is missing or is not a weights file.
    """
    if path is None:
        text, where = _read_default()
    else:
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ModelFileError(f"{path}: no such weights file") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ModelFileError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return LinearModel.from_json(data, where)
