"""The semantic cache's pair classifier: whether a stored answer to one question may serve
another, from the pair's cosine and a few facts about its words.

A logistic regression over :data:`FEATURES` of a ``(query, source)`` pair — the
all-MiniLM-L6-v2 cosine, whether a capitalised name of one text is missing from the other,
and whether both ask with the same question word (``what``/``how``/``why`` …). Its weights,
feature list, training data hash, cross-validated figures and operating threshold live in
``pair_model.json`` beside this module, written by
``python -m armature_temporal.cache.train_pairs`` from the Quora pairs in the shared data
(the only labelled data it is tuned on).

Rules, not weights (:func:`veto`): numbers that differ and a negation in one text only (a
cheap, near-certain "different question"), and two that the training pairs hardly contain,
so a weight would not learn them:

- **word order** (:func:`~armature_temporal.cache.semantic.order_veto`): the same words in
  different roles — ``flights from Paris to Rome`` / ``flights from Rome to Paris``: one bag
  of words, which is most of what an embedding sees. Quora has three such pairs.
- **a cosine floor** (``floor`` in the model file): pairs below it are never hits. The
  model is fitted only on the training pairs at or above it (and not vetoed), the region
  where its decision matters.

Features tried and dropped, measured by the nested cross-validation of ``train_pairs``:
word and content-word overlap (Jaccard), the share of content words one text lacks, length
ratio and word inversions. With them the model learned that at a given cosine a pair sharing
*more* words is less often a duplicate — true of Quora, whose non-duplicates were sampled
for overlap (``address line 1`` / ``line 2``), false of a question asked again — and it
did worse: precision 93.7%, recall 7.4%, against 95.9% and 17.3% without them.
Projections of the two embeddings (|u−v|, u⊙v) were left out too: they learn Quora's
topics, and the cache is for other domains.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from armature_temporal.cache.semantic import _tokens, order_veto
from armature_temporal.errors import ArmatureError

__all__ = [
    "FEATURES",
    "MODEL_FILE",
    "PairModel",
    "PairModelError",
    "load_pair_model",
    "order_veto",
    "pair_features",
]

#: The model file shipped in this package.
MODEL_FILE = "pair_model.json"
_RETRAIN = "python -m armature_temporal.cache.train_pairs"

#: The classifier's inputs, in the order of its weights: the cosine (and its square), a
#: capitalised name in one text that the other lacks, and the same question word.
FEATURES: tuple[str, ...] = ("cosine", "cosine_sq", "names_differ", "same_question_word")

_QUESTION_WORDS = ("what", "how", "why", "which", "who", "when", "where", "is", "can", "do")


class PairModelError(ArmatureError):
    """The pair model file is missing, unreadable or does not fit this code."""


def _question_word(tokens: list[str]) -> str:
    for word in tokens[:3]:
        if word in _QUESTION_WORDS:
            return word
    return ""


def veto(a: str, b: str) -> str | None:
    """Why the pair may never be a hit whatever the model says, or None: a word-order veto
    (:func:`order_veto`), numbers that differ, or one text negated and the other not."""
    from armature_temporal.cache.semantic import _negated, _numbers

    na, nb = _numbers(a), _numbers(b)
    if na != nb:
        return f"numbers differ ({', '.join(sorted(na ^ nb))})"
    if _negated(a) != _negated(b):
        return "one is negated, the other not"
    return order_veto(a, b)


def pair_features(a: str, b: str, cosine: float) -> list[float]:
    """The :data:`FEATURES` of the pair ``(a, b)`` whose embeddings' cosine is ``cosine``;
    symmetric in ``a`` and ``b``."""
    from armature_temporal.cache.semantic import _WORD, _names, _stem

    stems_a = {_stem(w) for w in _WORD.findall(a)}
    stems_b = {_stem(w) for w in _WORD.findall(b)}
    c = round(float(cosine), 4)
    return [
        c,
        round(c * c, 4),
        float(bool((_names(a) - stems_b) | (_names(b) - stems_a))),
        float(_question_word(_tokens(a)) == _question_word(_tokens(b))),
    ]


class PairModel:
    """The shipped logistic regression: standardised :data:`FEATURES`, weights, bias, the
    probability threshold for a hit and the cosine floor (see the module docstring)."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        self.source = source
        try:
            names = tuple(data["features"])
            self.weights = [float(w) for w in data["weights"]]
            self.bias = float(data["bias"])
            self.mean = [float(x) for x in data["mean"]]
            self.scale = [float(x) for x in data["scale"]]
            self.threshold = float(data["threshold"])
            self.floor = float(data["floor"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PairModelError(
                f"{source}: not a pair model file ({type(exc).__name__}: {exc}); rebuild it "
                f"with `{_RETRAIN}`"
            ) from None
        if names != FEATURES or not (
            len(self.weights) == len(self.mean) == len(self.scale) == len(FEATURES)
        ):
            raise PairModelError(
                f"{source}: its features {list(names)} do not match this code's "
                f"{list(FEATURES)}; rebuild it with `{_RETRAIN}`"
            )
        self.meta = data

    def probability(self, features: list[float]) -> float:
        """The model's probability that the pair asks the same thing."""
        z = self.bias + sum(
            w * (x - m) / s
            for w, x, m, s in zip(self.weights, features, self.mean, self.scale, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))

    def decide(self, a: str, b: str, cosine: float) -> tuple[bool, float, str | None]:
        """``(hit, probability, veto)`` for the pair: a hit needs the cosine at or above the
        floor, no :func:`veto`, and the same words in the same order (case and punctuation
        aside) or the probability at or above the threshold. The first is a rule because
        the model scores near-identical texts low: Quora's non-duplicates were sampled for
        overlap, so at a given cosine it learned "more shared words, less likely the same
        question", which holds there but not for a question asked again."""
        if cosine < self.floor:
            return False, 0.0, f"cosine {cosine:.3f} below the floor {self.floor}"
        why = veto(a, b)
        if why is not None:
            return False, 0.0, why
        if _tokens(a) == _tokens(b):  # the same words in the same order: the same question
            return True, 1.0, None
        p = self.probability(pair_features(a, b, cosine))
        return p >= self.threshold, p, None


def read_pair_model(path: Path) -> PairModel:
    """The pair model in ``path``; errors name the file and the fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PairModelError(
            f"{path}: no such pair model file; rebuild it with `{_RETRAIN}` (it ships in the "
            "armature_temporal.cache package)"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PairModelError(
            f"{path}: not valid JSON ({exc}); rebuild it with `{_RETRAIN}`"
        ) from None
    if not isinstance(data, dict):
        raise PairModelError(f"{path}: not a pair model file; rebuild it with `{_RETRAIN}`")
    return PairModel(data, str(path))


@lru_cache(maxsize=1)
def load_pair_model() -> PairModel:
    """The shipped pair model (read once per process)."""
    return read_pair_model(Path(str(resources.files("armature_temporal.cache") / MODEL_FILE)))
