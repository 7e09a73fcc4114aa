"""Scoring the semantic cache's rule on labelled pairs: what ``armature cache eval`` and
``benchmarks/cache.py`` share.

A pair file is a CSV with columns ``text_a,text_b,label`` (label 1 = the two texts ask the
same thing, so a cached answer to one may serve the other; 0 = not). Figures:

- **precision**: hits that were true paraphrases / all hits;
- **recall**: hits / all true paraphrases (the hit rate a cache would get on them);
- **false-hit rate**: false hits / all non-paraphrase pairs (a lookup for a different
  question that the cache would wrongly answer). On a file with as many paraphrases as
  non-paraphrases this is twice false hits / all lookups, which is also given.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from armature_temporal.cache.semantic import guard_veto
from armature_temporal.errors import ArmatureError

__all__ = [
    "PairFileError",
    "Score",
    "load_pairs",
    "pr_curve",
    "score",
    "score_hits",
    "tune_threshold",
    "wilson",
]

COLUMNS = ("text_a", "text_b", "label")
_LABELS = {"1": 1, "0": 0, "true": 1, "false": 0, "yes": 1, "no": 0}


class PairFileError(ArmatureError):
    """A pair file that cannot be read: missing, wrong columns, bad labels."""


def load_pairs(path: Path) -> list[tuple[str, str, int]]:
    """The ``(text_a, text_b, label)`` rows of a pair CSV; labels 1/0 (or true/false,
    yes/no). Errors name the file, the row and the fix."""
    if not path.is_file():
        raise PairFileError(
            f"pair file {path} not found; give a CSV with columns {','.join(COLUMNS)}"
        )
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = [c.strip() for c in reader.fieldnames or []]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise PairFileError(
                f"{path}: missing column(s) {', '.join(missing)}; its header is "
                f"{','.join(header) or '(empty)'}, and a pair file needs {','.join(COLUMNS)}"
            )
        rows: list[tuple[str, str, int]] = []
        for line, raw in enumerate(reader, start=2):
            row = {k.strip(): v for k, v in raw.items() if k is not None}
            value = (row.get("label") or "").strip().lower()
            if value not in _LABELS:
                raise PairFileError(
                    f"{path} line {line}: label {row.get('label')!r} is not a label; use 1 "
                    "(the texts ask the same thing) or 0 (they do not)"
                )
            rows.append((row.get("text_a") or "", row.get("text_b") or "", _LABELS[value]))
    if not rows:
        raise PairFileError(f"{path} has a header but no pairs; add rows to score")
    return rows


def wilson(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% by default) for ``successes`` out of ``total``."""
    if total == 0:
        return (0.0, 1.0)
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Score:
    """A confusion count and its rates, with 95% Wilson intervals."""

    threshold: float
    pairs: int
    positives: int
    negatives: int
    hits: int
    true_hits: int
    false_hits: int

    @property
    def precision(self) -> float:
        return self.true_hits / self.hits if self.hits else 1.0

    @property
    def recall(self) -> float:
        return self.true_hits / self.positives if self.positives else 0.0

    @property
    def false_hit_rate(self) -> float:
        return self.false_hits / self.negatives if self.negatives else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            precision=self.precision,
            precision_ci=wilson(self.true_hits, self.hits),
            recall=self.recall,
            recall_ci=wilson(self.true_hits, self.positives),
            false_hit_rate=self.false_hit_rate,
            false_hit_rate_ci=wilson(self.false_hits, self.negatives),
            false_hits_per_lookup=self.false_hits / self.pairs if self.pairs else 0.0,
        )
        return data


def score(
    sims: Sequence[float], vetoed: Sequence[bool], labels: Sequence[int], threshold: float
) -> Score:
    """The rule's confusion at ``threshold``: a hit is a cosine at or above it, not vetoed."""
    hits = [s >= threshold and not v for s, v in zip(sims, vetoed, strict=True)]
    return score_hits(hits, labels, threshold)


def score_hits(hits: Sequence[bool], labels: Sequence[int], threshold: float) -> Score:
    """The confusion of any decider's ``hits`` (``threshold``: the one it used, recorded)."""
    true_hits = sum(1 for h, y in zip(hits, labels, strict=True) if h and y == 1)
    positives = sum(labels)
    return Score(
        threshold=threshold,
        pairs=len(labels),
        positives=positives,
        negatives=len(labels) - positives,
        hits=sum(hits),
        true_hits=true_hits,
        false_hits=sum(hits) - true_hits,
    )


def vetoes(pairs: Sequence[tuple[str, str]]) -> list[bool]:
    """Whether the lexical guard vetoes each pair."""
    return [guard_veto(a, b) is not None for a, b in pairs]


def pr_curve(
    sims: Sequence[float], vetoed: Sequence[bool], labels: Sequence[int], *, step: float = 0.01
) -> list[Score]:
    """The rule's score at thresholds from 0.80 to 0.99."""
    count = round(0.19 / step) + 1
    return [score(sims, vetoed, labels, round(0.80 + i * step, 4)) for i in range(count)]


def tune_threshold(
    sims: Sequence[float],
    vetoed: Sequence[bool],
    labels: Sequence[int],
    *,
    target: float = 0.95,
    min_hits: int = 100,
) -> float:
    """The lowest threshold at which precision, and precision at every higher threshold
    that still gives ``min_hits`` hits, reaches ``target`` (so one lucky cut-off is not
    picked); 1.0 when none does."""
    ranked = sorted((s, y) for s, v, y in zip(sims, vetoed, labels, strict=True) if not v)[::-1]
    chosen = 1.0
    true_hits = 0
    for rank, (similarity, label) in enumerate(ranked, start=1):
        true_hits += label
        nxt = ranked[rank][0] if rank < len(ranked) else None
        if nxt is not None and nxt == similarity:
            continue  # ties: decide once all pairs at this cosine are counted
        if rank >= min_hits and true_hits / rank < target:
            break
        if rank >= min_hits:
            chosen = similarity
    return float(chosen)
