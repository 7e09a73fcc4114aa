"""The semantic cache's decision rule: when a stored answer may be reused for a new task.

One rule, shared by the run path (``armature_temporal.cache``), ``armature cache eval`` and
``benchmarks/cache.py``: a hit needs

1. the cosine of the two tasks' embeddings at or above the threshold, and
2. when both texts are given, the lexical guard (:func:`guard_veto`) to find no
   disagreement: the same numbers, the same negation, the same capitalised names. Two
   questions one number or name apart (``address line 1`` / ``address line 2``) embed
   close together but ask different things; the guard vetoes those.

``DEFAULT_THRESHOLD`` was tuned for precision on the Quora Question Pairs sample in
``shared/data/paraphrase`` (4,000 labelled pairs, all-MiniLM-L6-v2): ``benchmarks/cache.py``
picks, on the training folds of a 5-fold cross-validation, the lowest threshold whose
precision (with the guard) reaches 0.95, scores it on the held-out fold, and this constant is
the median of the five fold thresholds. The figures it gives are in README ("Semantic cache:
how the threshold was chosen"). The threshold is for the local model; another embedder's
cosines are on another scale, so a stage that uses one should set its own ``threshold``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DEFAULT_THRESHOLD",
    "guard_veto",
    "is_hit",
    "pair_decisions",
]

#: Cosine (all-MiniLM-L6-v2) at or above which two tasks may share an answer; see the
#: module docstring for how it was chosen.
DEFAULT_THRESHOLD: float = 0.90

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")
_NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "nor",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "neither",
        "without",
        "cannot",
        "cant",
        "dont",
        "doesnt",
        "didnt",
        "isnt",
        "arent",
        "wasnt",
        "werent",
        "wont",
        "wouldnt",
        "shouldnt",
        "couldnt",
        "hasnt",
        "havent",
        "hadnt",
    ]
)
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
}


def _numbers(text: str) -> set[str]:
    found = {n.replace(",", "") for n in _NUMBER.findall(text)}
    found |= {_NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text.lower()) if w in _NUMBER_WORDS}
    return found


def _negated(text: str) -> bool:
    lowered = text.lower().replace("’", "'")
    if "n't" in lowered:
        return True
    return any(w.replace("'", "") in _NEGATIONS for w in re.findall(r"[a-z']+", lowered))


def _names(text: str) -> set[str]:
    """Capitalised words that are not the first word of a sentence (lower-cased)."""
    names: set[str] = set()
    for sentence in re.split(r"(?<=[.?!])\s+", text.strip()):
        words = _WORD.findall(sentence)
        for word in words[1:]:
            if word[0].isupper() and word.lower() != "i":
                names.add(word.lower().rstrip("'’s"))
    return names


def guard_veto(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` must not share an answer whatever their cosine, or None: their
    numbers differ, one is negated and the other not, or a capitalised name in one does not
    occur (in any case) in the other."""
    na, nb = _numbers(a), _numbers(b)
    if na != nb:
        return f"numbers differ ({', '.join(sorted(na ^ nb))})"
    if _negated(a) != _negated(b):
        return "one is negated, the other not"
    words_a = {w.lower() for w in _WORD.findall(a)}
    words_b = {w.lower() for w in _WORD.findall(b)}
    missing = sorted((_names(a) - words_b) | (_names(b) - words_a))
    if missing:
        return f"names differ ({', '.join(missing)})"
    return None


def is_hit(
    similarity: float,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    query: str | None = None,
    source: str | None = None,
) -> bool:
    """Whether a stored entry may answer the query: ``similarity`` (cosine) at or above
    ``threshold`` and, when both texts are given, no :func:`guard_veto` between them. The
    cache passes both texts; without them only the cosine is checked."""
    if similarity < threshold:
        return False
    if query is not None and source is not None:
        return guard_veto(query, source) is None
    return True


def pair_decisions(
    pairs: Sequence[tuple[str, str]], *, embedder: Any, threshold: float = DEFAULT_THRESHOLD
) -> list[tuple[float, bool]]:
    """For each ``(text_a, text_b)``: its cosine under ``embedder`` and whether the rule
    (:func:`is_hit`, guard included) calls it a hit at ``threshold``."""
    if not pairs:
        return []
    import numpy as np

    vectors = embedder.embed([t for pair in pairs for t in pair])
    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(pairs), 2, -1)
    sims = np.einsum("ij,ij->i", matrix[:, 0], matrix[:, 1])
    return [
        (float(s), is_hit(float(s), threshold, query=a, source=b))
        for s, (a, b) in zip(sims, pairs, strict=True)
    ]
