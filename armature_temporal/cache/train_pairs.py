"""Train the semantic cache's pair classifier from the Quora pairs and write
``pair_model.json`` (:mod:`armature_temporal.cache.pairs`).

Run ``python -m armature_temporal.cache.train_pairs [--data DIR] [--out FILE] [--check]``.
The data is ``paraphrase/qqp-train.csv`` in the shared data folder (``--data``,
``$ARMATURE_SHARED_DATA`` or ``<repo>/../shared/data``): 4,000 labelled Quora question
pairs, the only labelled paraphrase data the cache is tuned on. Nothing else is trained on.

- **Features**: :func:`~armature_temporal.cache.pairs.pair_features` of each pair, the
  cosine from all-MiniLM-L6-v2 (the cache's own embedder), rounded to 4 decimals so that
  float noise between machines rarely moves a feature.
- **Fit**: L2-regularised (``LAMBDA``) logistic regression on standardised features, 30
  Newton steps from zero in float64: deterministic, so the same data gives the same file
  byte for byte (``--check`` rebuilds it and compares).
- **Threshold**: the probability a hit needs. Out-of-fold probabilities of a 5-fold
  cross-validation (folds by a hash of the pair) are ranked; the threshold is the lowest at
  which their precision, and that of every higher threshold with ``MIN_HITS`` hits or more,
  reaches ``TRAIN_TARGET`` (:func:`~armature_temporal.cache.evaluate.tune_threshold`).
  Vetoed pairs and pairs below the floor are never hits.
- **Floor**: ``FLOOR``, a cosine of 0.80: the model is fitted on, and asked about, only
  pairs at or above it that no rule vetoes (:func:`~armature_temporal.cache.pairs.veto`).
- **Figures**: a nested cross-validation (the threshold chosen on each outer training part
  by the same inner procedure, the outer fold scored at it), pooled: precision, recall and
  false-hit rate with 95% Wilson intervals, recorded in the file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from armature_temporal.cache.evaluate import Score, load_pairs, tune_threshold
from armature_temporal.cache.pairs import FEATURES, MODEL_FILE, pair_features, veto

__all__ = ["embed_texts", "fit", "fold_of", "main", "nested_cv", "train"]

#: L2 penalty on the standardised weights (not the bias).
LAMBDA = 1.0
#: Out-of-fold precision the threshold must reach on the training pairs: the rule's own
#: target. Quora's labels are noisy (README: most false hits at the top read as mislabelled)
#: and no decider here holds 0.97 over 100+ hits on them, so 0.97 cannot be asked of them;
#: the held-out 0.97 the issue asks is unverified here.
TRAIN_TARGET = 0.95
MIN_HITS = 100
#: The cosine below which no pair is a hit; the model is fitted on the pairs at or above it.
FLOOR = 0.80
FOLDS = 5
DATA_FILE = Path("paraphrase") / "qqp-train.csv"


def fold_of(a: str, b: str, folds: int = FOLDS) -> int:
    """The pair's fold: a hash of both texts (the same folds as benchmarks/cache.py)."""
    return int(hashlib.sha256(f"{a}\0{b}".encode()).hexdigest(), 16) % folds


def embed_texts(path: Path, texts: list[str], cache_dir: Path) -> tuple[dict[str, Any], str]:
    """Every text's all-MiniLM-L6-v2 vector, from ``cache_dir``'s file for this data file
    and model when there is one (the first pass over the 7,850 Quora texts takes 1–6
    minutes on 2 cores)."""
    from armature_temporal.experience.embeddings import get_embedder

    embedder = get_embedder("local")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    cache = cache_dir / f"qqp-{digest}-{embedder.name}.npz"
    if cache.is_file():
        data = np.load(cache, allow_pickle=False)
        if list(data["texts"]) == texts:
            return dict(zip(texts, data["vectors"], strict=True)), embedder.name
    print(f"embedding {len(texts)} texts with {embedder.name} …", file=sys.stderr)
    started = time.perf_counter()
    vectors: list[list[float]] = []
    for i in range(0, len(texts), 64):
        vectors.extend(embedder.embed(texts[i : i + 64]))
    matrix = np.asarray(vectors, dtype=np.float32)
    print(f"  {time.perf_counter() - started:.0f}s; cached in {cache}", file=sys.stderr)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.savez(cache, texts=np.asarray(texts), vectors=matrix)
    return dict(zip(texts, matrix, strict=True)), embedder.name


def fit(x: np.ndarray, y: np.ndarray, lam: float = LAMBDA) -> dict[str, Any]:
    """Logistic regression on standardised ``x``: mean, scale, weights, bias."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    penalty = lam * np.eye(len(w))
    penalty[-1, -1] = 0.0
    for _ in range(30):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + penalty @ w
        hess = (z * (p * (1 - p))[:, None]).T @ z + penalty
        w = w - np.linalg.solve(hess, grad)
    return {"mean": mean, "scale": scale, "weights": w[:-1], "bias": float(w[-1])}


def _predict(model: dict[str, Any], x: np.ndarray) -> np.ndarray:
    z = (x - model["mean"]) / model["scale"]
    return np.asarray(1.0 / (1.0 + np.exp(-(z @ model["weights"] + model["bias"]))))


def _eligible(x: np.ndarray, vetoed: np.ndarray) -> np.ndarray:
    return np.asarray((x[:, 0] >= FLOOR) & ~vetoed)


def fit_pairs(x: np.ndarray, y: np.ndarray, vetoed: np.ndarray) -> dict[str, Any]:
    """:func:`fit` on the pairs the model decides: cosine at or above ``FLOOR``, no veto."""
    keep = _eligible(x, vetoed)
    return fit(x[keep], y[keep])


def probabilities(model: dict[str, Any], x: np.ndarray, vetoed: np.ndarray) -> np.ndarray:
    """The model's probability for each pair; 0 for a vetoed pair or one below the floor."""
    return np.where(_eligible(x, vetoed), _predict(model, x), 0.0)


def _oof(x: np.ndarray, y: np.ndarray, vetoed: np.ndarray, folds: np.ndarray) -> np.ndarray:
    out = np.zeros(len(y))
    for k in sorted(set(folds.tolist())):
        train = folds != k
        model = fit_pairs(x[train], y[train], vetoed[train])
        out[~train] = probabilities(model, x[~train], vetoed[~train])
    return out


def _threshold(x: np.ndarray, y: np.ndarray, vetoed: np.ndarray, folds: np.ndarray) -> float:
    p = _oof(x, y, vetoed, folds)
    below = (p <= 0).tolist()
    return tune_threshold(p.tolist(), below, y.tolist(), target=TRAIN_TARGET, min_hits=MIN_HITS)


def nested_cv(
    x: np.ndarray, y: np.ndarray, veto: np.ndarray, folds: np.ndarray
) -> tuple[Score, list[float], np.ndarray]:
    """Pooled held-out score of the whole procedure, each outer fold's threshold, and each
    pair's held-out hit decision."""
    tp = fp = 0
    thresholds: list[float] = []
    hits = np.zeros(len(y), dtype=bool)
    for k in sorted(set(folds.tolist())):
        train, test = folds != k, folds == k
        t = _threshold(x[train], y[train], veto[train], folds[train])  # the other folds
        model = fit_pairs(x[train], y[train], veto[train])
        hit = probabilities(model, x[test], veto[test]) >= max(t, 1e-9)
        hits[test] = hit
        tp += int((hit & (y[test] == 1)).sum())
        fp += int((hit & (y[test] == 0)).sum())
        thresholds.append(t)
    positives = int(y.sum())
    score = Score(
        threshold=float(np.median(thresholds)),
        pairs=len(y),
        positives=positives,
        negatives=len(y) - positives,
        hits=tp + fp,
        true_hits=tp,
        false_hits=fp,
    )
    return score, thresholds, hits


def _round(values: Sequence[float]) -> list[float]:
    return [float(f"{v:.8g}") for v in values]


def train(
    rows: Sequence[tuple[str, str, int]],
    cosines: Sequence[float],
    *,
    data_sha256: str,
    embedder: str,
) -> dict[str, Any]:
    """The model file's content for ``rows`` whose pairs' cosines are ``cosines``."""
    x = np.asarray([pair_features(a, b, c) for (a, b, _), c in zip(rows, cosines, strict=True)])
    y = np.asarray([label for _, _, label in rows], dtype=float)
    vetoed = np.asarray([veto(a, b) is not None for a, b, _ in rows])
    folds = np.asarray([fold_of(a, b) for a, b, _ in rows])
    threshold = _threshold(x, y, vetoed, folds)
    model = fit_pairs(x, y, vetoed)
    cv, fold_thresholds, _ = nested_cv(x, y, vetoed, folds)
    figures = cv.as_dict()
    figures.pop("threshold")
    return {
        "model": "logistic regression over pair features (armature_temporal.cache.pairs)",
        "features": list(FEATURES),
        "mean": _round(model["mean"]),
        "scale": _round(model["scale"]),
        "weights": _round(model["weights"]),
        "bias": float(f"{model['bias']:.8g}"),
        "threshold": float(f"{threshold:.8g}"),
        "floor": FLOOR,
        "training": {
            "data": str(DATA_FILE),
            "data_sha256": data_sha256,
            "pairs": len(rows),
            "embedder": embedder,
            "l2": LAMBDA,
            "target_precision": TRAIN_TARGET,
            "min_hits": MIN_HITS,
            "folds": FOLDS,
            "vetoed": int(vetoed.sum()),
            "fitted_on": int(_eligible(x, vetoed).sum()),
            "rebuild": "python -m armature_temporal.cache.train_pairs",
        },
        "cross_validated": {
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in figures.items()},
            "fold_thresholds": _round(fold_thresholds),
        },
    }


def render(model: dict[str, Any]) -> str:
    """The model file's text (stable: sorted keys, fixed indent)."""
    return json.dumps(model, indent=1, sort_keys=True) + "\n"


def build(data_dir: Path, cache_dir: Path) -> dict[str, Any]:
    """Train from the shared data folder's Quora pairs."""
    path = data_dir / DATA_FILE
    rows = load_pairs(path)
    texts = sorted({t for a, b, _ in rows for t in (a, b)})
    vectors, embedder = embed_texts(path, texts, cache_dir)
    cosines = [float(vectors[a] @ vectors[b]) for a, b, _ in rows]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return train(rows, cosines, data_sha256=digest, embedder=embedder)


def main(argv: Sequence[str] | None = None) -> int:
    from armature_temporal.scanner.train import shared_data_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="the shared data folder")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name(MODEL_FILE))
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "armature-bench-cache"
    )
    parser.add_argument(
        "--check", action="store_true", help="rebuild and compare with --out; write nothing"
    )
    args = parser.parse_args(argv)
    text = render(build(shared_data_dir(args.data), args.cache_dir))
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'matches the rebuild' if same else 'DIFFERS from the rebuild'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    cv = json.loads(text)["cross_validated"]
    print(
        f"wrote {args.out}: cross-validated precision {cv['precision']:.3f} "
        f"recall {cv['recall']:.3f} false-hit rate {cv['false_hit_rate']:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
