"""Fit the hedge detector on its labelled corpus, calibrate it, and write its weights.

Run ``python -m armature_temporal.runtime.confidence.train [--corpus FILE] [--out FILE]``.
Deterministic: the same corpus gives the same weights and figures.

The corpus, ``hedge_corpus.jsonl`` in this package, was written by hand for this purpose
(Armature issue #16): 218 short model answers of the kinds agent stages return (support
replies, code review, extraction, classification rationales, facts, summaries, figures), each
labelled ``good`` when it commits to an answer a reviewer could accept as given, or not when
it hedges its substance (uncertainty, guessing, deferral to someone else, asking back instead
of answering, self-contradiction). Most hedged answers are paraphrases of a committed one on
the same topic, so topic words cannot separate the classes; committed answers include the
cues' innocent uses ("You may cancel at any time", "If the build fails, rerun…", "but").
None of it is the simulator's hedge sentences: those are the out-of-distribution check below.

The model is an L2-regularised logistic regression (Newton's method) over the cue-class
features of :func:`~armature_temporal.runtime.confidence.hedging.hedge_features`, then Platt
scaling fitted on out-of-fold logits (5 folds). The reported figures are held out twice over:
each outer fold (5, by a hash of the text) is scored by a model and a Platt fit made on the
other four alone. A second check scores simulated text outputs (``hedge_rate`` 0.5): the
simulator's hedging sentences were never trained on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from armature_temporal.runtime.confidence.hedging import (
    DEFAULT_WEIGHTS,
    FEATURES,
    HedgeModel,
    hedge_features,
)

__all__ = [
    "CORPUS",
    "Example",
    "auroc",
    "brier",
    "expected_calibration_error",
    "fit_hedge_model",
    "held_out_figures",
    "load_corpus",
    "main",
]

CORPUS = "hedge_corpus.jsonl"
L2 = 1.0
FOLDS = 5


@dataclass(frozen=True)
class Example:
    text: str
    good: bool


def load_corpus(path: Path | None = None) -> list[Example]:
    """The labelled corpus: ``path``, or the one shipped in this package."""
    if path is None:
        text = resources.files(__package__).joinpath(CORPUS).read_text(encoding="utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [Example(text=str(r["text"]), good=bool(r["good"])) for r in rows]


def fold_of(text: str, folds: int = FOLDS) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % folds


def _matrix(examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([[hedge_features(e.text)[f] for f in FEATURES] for e in examples])
    y = np.array([1.0 if e.good else 0.0 for e in examples])
    return x, y


def _logistic(x: np.ndarray, y: np.ndarray, l2: float, iterations: int = 50) -> np.ndarray:
    """Newton's method for L2-regularised logistic regression; column 0 is the intercept
    (not penalised)."""
    w = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + penalty * w
        hess = (x.T * (p * (1 - p))) @ x + np.diag(penalty) + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.max(np.abs(step))) < 1e-10:
            break
    return w


def _fit_linear(examples: Sequence[Example], l2: float) -> tuple[float, dict[str, float]]:
    x, y = _matrix(examples)
    w = _logistic(np.hstack([np.ones((len(x), 1)), x]), y, l2)
    return float(w[0]), {f: float(v) for f, v in zip(FEATURES, w[1:], strict=True)}


def _platt(logits: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Platt scaling with Platt's smoothed targets (his 1999 paper), by Newton's method."""
    positives, negatives = float(y.sum()), float(len(y) - y.sum())
    targets = np.where(y > 0, (positives + 1) / (positives + 2), 1 / (negatives + 2))
    w = _logistic(np.column_stack([np.ones(len(logits)), logits]), targets, 1e-6)
    return float(w[1]), float(w[0])


def fit_hedge_model(
    examples: Sequence[Example], *, l2: float = L2, folds: int = FOLDS
) -> HedgeModel:
    """The logistic model on ``examples`` and its Platt scaling from out-of-fold logits."""
    oof = np.zeros(len(examples))
    for k in range(folds):
        train = [e for e in examples if fold_of(e.text, folds) != k]
        idx = [i for i, e in enumerate(examples) if fold_of(e.text, folds) == k]
        bias, weights = _fit_linear(train, l2)
        part = HedgeModel(weights=weights, bias=bias)
        oof[idx] = [part.logit(hedge_features(examples[i].text)) for i in idx]
    a, b = _platt(oof, _matrix(examples)[1])
    bias, weights = _fit_linear(examples, l2)
    return HedgeModel(weights=weights, bias=bias, platt_a=a, platt_b=b)


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The probability that a random positive outscores a random negative (ties: half)."""
    pos = [s for s, g in zip(scores, labels, strict=True) if g]
    neg = [s for s, g in zip(scores, labels, strict=True) if not g]
    if not pos or not neg:
        return math.nan
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def brier(probs: Sequence[float], labels: Sequence[bool]) -> float:
    return sum((p - g) ** 2 for p, g in zip(probs, labels, strict=True)) / len(probs)


def expected_calibration_error(
    probs: Sequence[float], labels: Sequence[bool], bins: int = 10
) -> tuple[float, list[dict[str, Any]]]:
    """ECE over equal-width bins, and the reliability table (bin, n, mean p, observed)."""
    table = []
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, p in enumerate(probs) if lo <= p < hi or (b == bins - 1 and p == 1.0)]
        if not idx:
            continue
        mean_p = sum(probs[i] for i in idx) / len(idx)
        observed = sum(labels[i] for i in idx) / len(idx)
        total += len(idx) * abs(mean_p - observed)
        table.append(
            {
                "bin": f"{lo:.1f}-{hi:.1f}",
                "n": len(idx),
                "p": round(mean_p, 3),
                "good": round(observed, 3),
            }
        )
    return total / len(probs), table


def held_out_figures(examples: Sequence[Example], *, folds: int = FOLDS) -> dict[str, Any]:
    """AUROC, Brier score and ECE of models each scored on the fold it never saw."""
    probs = [0.0] * len(examples)
    raw = [0.0] * len(examples)
    for k in range(folds):
        train = [e for e in examples if fold_of(e.text, folds) != k]
        model = fit_hedge_model(train, folds=folds)
        uncalibrated = HedgeModel(weights=model.weights, bias=model.bias)
        for i, e in enumerate(examples):
            if fold_of(e.text, folds) == k:
                probs[i] = model.probability(e.text)
                raw[i] = uncalibrated.probability(e.text)
    labels = [e.good for e in examples]
    ece, table = expected_calibration_error(probs, labels)
    raw_ece, _ = expected_calibration_error(raw, labels)
    return {
        "n": len(examples),
        "auroc": round(auroc(probs, labels), 4),
        "brier": round(brier(probs, labels), 4),
        "ece": round(ece, 4),
        "ece_before_platt": round(raw_ece, 4),
        "reliability": table,
    }


def simulated_figures(model: HedgeModel, n: int = 400) -> dict[str, Any]:
    """The detector on simulated text outputs at ``hedge_rate`` 0.5 (never trained on):
    AUROC for telling unhedged from hedged, and for telling good (latent ≥ 0.5) from not."""
    from armature_temporal.runtime.confidence.extract import answer_text
    from armature_temporal.runtime.simulate import simulate_completion

    probs, unhedged, good = [], [], []
    for i in range(n):
        out = simulate_completion(
            seed=f"hedge-check/{i}",
            prompt="Summarise the customer's complaint about the delayed delivery and refund.",
            output_mode="text",
            output_schema=None,
            role_type="worker",
            valid_rate=1.0,
            quality=0.7,
            hedge_rate=0.5,
        )
        probs.append(model.probability(answer_text(out.text, None)))
        unhedged.append(not out.hedged)
        good.append(out.quality >= 0.5)
    return {
        "n": n,
        "auroc_unhedged": round(auroc(probs, unhedged), 4),
        "auroc_good": round(auroc(probs, good), 4),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=None, help="labelled JSONL (text, good)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name(DEFAULT_WEIGHTS))
    args = parser.parse_args(argv)
    examples = load_corpus(args.corpus)
    figures = held_out_figures(examples)
    model = fit_hedge_model(examples)
    sim = simulated_figures(model)
    meta = {
        "trained_on": f"{CORPUS} ({len(examples)} hand-written answers, "
        f"{sum(e.good for e in examples)} committed)",
        "method": f"L2 ({L2}) logistic regression on cue-class features; Platt scaling on "
        f"{FOLDS}-fold out-of-fold logits",
        "held_out": {k: v for k, v in figures.items() if k != "reliability"},
        "simulated_check": sim,
    }
    final = HedgeModel(
        weights=model.weights,
        bias=model.bias,
        platt_a=model.platt_a,
        platt_b=model.platt_b,
        meta=meta,
    )
    args.out.write_text(json.dumps(final.to_json(), indent=2) + "\n", encoding="utf-8")
    print(json.dumps({**meta, "reliability": figures["reliability"]}, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
