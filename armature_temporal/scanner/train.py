"""Train the prompt-injection model from the labelled public data, and write its weights.

Run ``python -m armature_temporal.scanner.train [--data DIR] [--out FILE]``. The data
directory is ``--data``, else ``$ARMATURE_SHARED_DATA``, else ``<repo>/../shared/data``
(see its README for sources and licences). Training is deterministic: same data, same
weights.

The model is a class-balanced, L2-regularised logistic regression over the binary features
of :func:`~armature_temporal.scanner._features.text_features` (words, word pairs, cue
phrases), each text's vector divided by ``√(n + pseudocount)`` for its ``n`` features,
fitted with Adam. Fitting is two-pass: fit on every feature seen in at least ``min_df``
texts, keep the ``keep`` features of largest weight, refit on those (a small, readable JSON
file). The flagging threshold is
the logit at which the out-of-fold scores of an inner cross-validation flag
``target_fpr`` of the benign texts; the final model is then fitted on all the data given.

Training adds ``benign_supplement.jsonl`` (in this package): 90 hand-written benign texts of
the kinds an agent's prompt takes in (code requests, tool output, memory notes, rubric text,
and output-format instructions such as "return only the JSON object"), which the public sets
lack; without them the model flags ordinary imperative requests
("write a function …") because the deepset set labels a few such texts injections. The
supplement is only ever trained on, never scored.

The benchmark (``benchmarks/scanner.py``) calls :func:`fit_injection_model` once per outer
fold, on that fold's training part only, so no text it scores was used to fit or tune.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from armature_temporal.errors import ArmatureError
from armature_temporal.scanner._features import text_features
from armature_temporal.scanner._linear import DEFAULT_WEIGHTS, LinearModel

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Example",
    "TrainConfig",
    "fit_injection_model",
    "fold_of",
    "load_benign_supplement",
    "load_injection_examples",
    "load_secret_examples",
    "main",
    "shared_data_dir",
]

ENV_VAR = "ARMATURE_SHARED_DATA"
SUPPLEMENT = "benign_supplement.jsonl"
INJECTION_FILES = ("prompt-injection/deepset-train.csv", "prompt-injection/jackhhao-train.csv")
SECRET_FILES = (
    "secrets/gitleaks-rule-samples.jsonl",
    "secrets/detect-secrets-plugin-samples.jsonl",
)


@dataclass(frozen=True)
class Example:
    """One labelled text. ``source`` is the file's stem; ``detail`` the rule or plugin."""

    text: str
    label: bool
    source: str
    kind: Literal["injection", "secret"]
    detail: str = ""


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters, fixed in advance (not searched per fold)."""

    l2: float = 0.3
    pseudocount: float = 4.0
    min_df: int = 2
    keep: int = 5000
    iterations: int = 400
    learning_rate: float = 0.05
    target_fpr: float = 0.01
    inner_folds: int = 5


def shared_data_dir(path: str | Path | None = None) -> Path:
    """Where the labelled data lives: ``path``, else ``$ARMATURE_SHARED_DATA``, else the
    ``shared/data`` folder beside the repository.

    Raises:
        ArmatureError: The folder does not exist.
    """
    if path is None:
        path = (
            os.environ.get(ENV_VAR)
            or Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
        )
    found = Path(path).resolve()
    if not found.is_dir():
        raise ArmatureError(
            f"{found}: no such data directory; pass --data DIR or set {ENV_VAR} to the folder "
            "that holds prompt-injection/ and secrets/"
        )
    return found


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def load_injection_examples(data_dir: Path) -> list[Example]:
    """The prompt-injection rows: deepset (``label`` 1/0) and jackhhao (``type``)."""
    out: list[Example] = []
    deepset, jackhhao = (data_dir / f for f in INJECTION_FILES)
    for row in _read_csv(deepset):
        out.append(Example(row["text"], row["label"] == "1", "deepset", "injection"))
    for row in _read_csv(jackhhao):
        out.append(Example(row["prompt"], row["type"] == "jailbreak", "jackhhao", "injection"))
    return out


def load_secret_examples(data_dir: Path) -> list[Example]:
    """The secret rows: gitleaks and detect-secrets samples (``label`` secret/not_secret)."""
    out: list[Example] = []
    for rel in SECRET_FILES:
        path = data_dir / rel
        source = path.stem.split("-")[0]
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    out.append(
                        Example(
                            row["text"],
                            row["label"] == "secret",
                            source,
                            "secret",
                            row.get("rule_id") or row.get("plugin_test") or "",
                        )
                    )
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ArmatureError(f"{path}:{n}: not a labelled row ({exc!r})") from exc
    return out


def fold_of(text: str, folds: int, salt: str = "") -> int:
    """A stable fold for ``text``: equal texts share a fold, so duplicates never straddle."""
    digest = hashlib.sha256((salt + text).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % folds


# --- fitting --------------------------------------------------------------------------------


class _Design:
    """A sparse, row-normalised binary design matrix (CSR by hand, for numpy only)."""

    def __init__(self, rows: Sequence[Sequence[int]], n_features: int, pseudocount: float) -> None:
        import numpy as np

        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        self.n_rows = len(rows)
        self.n_features = n_features
        self.cols = np.fromiter((j for r in rows for j in r), np.int64, int(lengths.sum()))
        norm = np.sqrt(np.maximum(lengths + pseudocount, 1e-12))
        self.vals = np.repeat(1.0 / norm, lengths)
        self.row_of = np.repeat(np.arange(self.n_rows), lengths)

    def dot(self, w: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        import numpy as np

        out = np.bincount(self.row_of, self.vals * w[self.cols], self.n_rows)
        return out.astype(np.float64, copy=False)

    def tdot(self, g: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        import numpy as np

        out = np.bincount(self.cols, self.vals * g[self.row_of], self.n_features)
        return out.astype(np.float64, copy=False)


def _fit_logistic(
    x: _Design, y: npt.NDArray[np.float64], cfg: TrainConfig
) -> tuple[npt.NDArray[np.float64], float]:
    import numpy as np

    n = x.n_rows
    w = np.zeros(x.n_features)
    b = 0.0
    m_w = np.zeros_like(w)
    v_w = np.zeros_like(w)
    m_b = v_b = 0.0
    pos = float(y.mean())
    if not 0.0 < pos < 1.0:
        raise ArmatureError("training data needs both labels; got only one")
    sample_w = np.where(y == 1, 0.5 / pos, 0.5 / (1 - pos))
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for t in range(1, cfg.iterations + 1):
        p = 1.0 / (1.0 + np.exp(-(x.dot(w) + b)))
        g = (p - y) * sample_w
        g_w = x.tdot(g) / n + cfg.l2 * w / n
        g_b = float(g.sum()) / n
        m_w = beta1 * m_w + (1 - beta1) * g_w
        v_w = beta2 * v_w + (1 - beta2) * g_w * g_w
        m_b = beta1 * m_b + (1 - beta1) * g_b
        v_b = beta2 * v_b + (1 - beta2) * g_b * g_b
        c1, c2 = 1 - beta1**t, 1 - beta2**t
        w -= cfg.learning_rate * (m_w / c1) / (np.sqrt(v_w / c2) + eps)
        b -= cfg.learning_rate * (m_b / c1) / (math.sqrt(v_b / c2) + eps)
    return w, b


def _fit_weights(
    feats: Sequence[set[str]], labels: Sequence[bool], cfg: TrainConfig
) -> tuple[dict[str, float], float]:
    import numpy as np

    y = np.array(labels, dtype=np.float64)
    df = Counter(f for fs in feats for f in fs)
    names = sorted(f for f, c in df.items() if c >= cfg.min_df)
    for keep_pass in (False, True):
        index = {f: i for i, f in enumerate(names)}
        x = _Design(
            [[index[f] for f in fs if f in index] for fs in feats], len(names), cfg.pseudocount
        )
        w, b = _fit_logistic(x, y, cfg)
        if keep_pass or len(names) <= cfg.keep:
            break
        top = np.argsort(-np.abs(w), kind="stable")[: cfg.keep]
        names = sorted(names[i] for i in top)
    return {f: float(w[i]) for i, f in enumerate(names)}, float(b)


def load_benign_supplement() -> list[Example]:
    """The hand-written benign texts shipped with the package (see the module docstring)."""
    ref = resources.files("armature_temporal.scanner").joinpath(SUPPLEMENT)
    lines = ref.read_text(encoding="utf-8").splitlines()
    return [Example(json.loads(x), False, "supplement", "injection") for x in lines if x.strip()]


def fit_injection_model(
    examples: Sequence[Example],
    cfg: TrainConfig | None = None,
    *,
    supplement: Sequence[Example] | None = None,
) -> LinearModel:
    """Fit the prompt-injection model on ``examples`` plus ``supplement`` (and nothing else).

    Args:
        examples: Labelled texts to fit on and to tune the threshold on.
        cfg: Hyper-parameters (default :class:`TrainConfig`).
        supplement: Extra texts added to every fit but never used to tune the threshold;
            ``None`` means :func:`load_benign_supplement`, ``()`` none.

    The threshold comes from an inner cross-validation over ``examples``: the logit that
    flags ``cfg.target_fpr`` of their benign texts when each is scored by a model that did
    not see it.
    """
    import numpy as np

    cfg = cfg or TrainConfig()
    extra = list(load_benign_supplement() if supplement is None else supplement)
    extra_feats = [text_features(e.text) for e in extra]
    extra_labels = [e.label for e in extra]
    feats = [text_features(e.text) for e in examples]
    labels = [e.label for e in examples]
    oof = np.zeros(len(examples))
    inner = np.array([fold_of(e.text, cfg.inner_folds, salt="inner") for e in examples])
    for k in range(cfg.inner_folds):
        train_idx = np.flatnonzero(inner != k)
        weights, bias = _fit_weights(
            [feats[i] for i in train_idx] + extra_feats,
            [labels[i] for i in train_idx] + extra_labels,
            cfg,
        )
        probe = LinearModel(weights, bias, 0.0, cfg.pseudocount)
        for i in np.flatnonzero(inner == k):
            oof[i] = probe.logit(feats[i])
    benign = np.sort(oof[~np.array(labels)])
    # The smallest logit that flags at most target_fpr of the benign texts.
    allowed = math.floor(cfg.target_fpr * len(benign))
    threshold = float(benign[len(benign) - allowed - 1]) + 1e-6 if len(benign) else 0.0
    weights, bias = _fit_weights(feats + extra_feats, labels + extra_labels, cfg)
    meta = {
        "trained_on": dict(Counter(e.source for e in [*examples, *extra])),
        "positives": int(sum(labels)),
        "config": asdict(cfg),
        "features": len(weights),
    }
    return LinearModel(weights, bias, threshold, cfg.pseudocount, meta)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m armature_temporal.scanner.train", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--data", help=f"labelled data folder (default: ${ENV_VAR} or ../shared/data)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).with_name(DEFAULT_WEIGHTS),
        help="where to write the weights JSON (default: the one shipped in the package)",
    )
    args = parser.parse_args(argv)
    try:
        data = shared_data_dir(args.data)
    except ArmatureError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    examples = load_injection_examples(data)
    model = fit_injection_model(examples)
    args.out.write_text(json.dumps(model.to_json(), indent=0, ensure_ascii=False) + "\n", "utf-8")
    print(
        f"wrote {args.out}: {len(model.weights)} features from {len(examples)} labelled texts "
        f"and the benign supplement, "
        f"threshold logit {model.threshold:.3f}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
