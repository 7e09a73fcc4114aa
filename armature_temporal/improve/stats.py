"""Holm's step-down test over paired bootstrap intervals, shared by memory CI
(:mod:`armature_temporal.experience.verify`) and the improvement loop (activities/improve.py).

Each test is a list of paired differences (candidate − baseline, one per input) and a bound:
0 for a superiority test (does it help?), ``-margin`` for a non-inferiority test (is it no
worse than ``margin``?). Its one-sided p-value is the share of bootstrap mean differences at or
below the bound (+1 smoothing). Sorted by p, the ``k``-th (from 0) of ``m`` passes when its
two-sided ``1 - alpha / (m - k)`` interval's low end is above its bound; once one fails, it and
every later one fail. The chance that any test passes wrongly stays at or under ``alpha``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

__all__ = ["FAMILY_ALPHA", "RESAMPLES", "HolmResult", "bootstrap_means", "holm", "interval"]

#: Family-wise error rate of one round's decisions (two-sided, as the 95% intervals).
FAMILY_ALPHA = 0.05
#: Bootstrap resamples, as paired_verdict's default.
RESAMPLES = 4000


class HolmResult(BaseModel):
    """One test's Holm figures; ``blocked``: its own interval cleared the bound, but a test
    with a smaller p-value had already failed."""

    model_config = ConfigDict(frozen=True)

    p_one_sided: float
    rank: int  # 1-based position in the p-value order
    m: int
    alpha_adj: float
    adj_ci_low: float
    adj_ci_high: float
    passed: bool
    blocked: bool


def bootstrap_means(diffs: Sequence[float], seed: int) -> list[float]:
    """Sorted means of ``RESAMPLES`` resamples of ``diffs`` (seeded)."""
    rng = random.Random(seed)
    n = len(diffs)
    return sorted(sum(rng.choice(diffs) for _ in range(n)) / n for _ in range(RESAMPLES))


def interval(means: Sequence[float], alpha: float) -> tuple[float, float]:
    """The two-sided ``1 - alpha`` percentile interval of sorted bootstrap ``means``."""
    lo = means[math.floor(alpha / 2 * (len(means) - 1))]
    hi = means[math.ceil((1 - alpha / 2) * (len(means) - 1))]
    return round(lo, 4), round(hi, 4)


def holm(
    diffs: Sequence[Sequence[float]],
    bounds: Sequence[float],
    *,
    seed: int = 0,
    alpha: float = FAMILY_ALPHA,
) -> list[HolmResult]:
    """Holm-decide ``m = len(diffs)`` tests (results in the order given). A test with fewer
    than two differences shows nothing: p = 1, interval [-1, 1], failed (it still counts in
    ``m``)."""
    if len(diffs) != len(bounds):
        raise ValueError(f"holm needs one bound per test, got {len(diffs)} and {len(bounds)}")
    m = len(diffs)
    means = [bootstrap_means(d, seed) if len(d) >= 2 else [] for d in diffs]
    ps = [
        (sum(1 for x in ms if x <= bound) + 1) / (len(ms) + 1) if ms else 1.0
        for ms, bound in zip(means, bounds, strict=True)
    ]
    order = sorted(range(m), key=lambda i: (ps[i], i))
    out: dict[int, HolmResult] = {}
    failed = False
    for rank, i in enumerate(order):
        alpha_adj = alpha / (m - rank)
        lo, hi = interval(means[i], alpha_adj) if means[i] else (-1.0, 1.0)
        clears = bool(means[i]) and lo > bounds[i]
        passed = clears and not failed
        out[i] = HolmResult(
            p_one_sided=round(ps[i], 4),
            rank=rank + 1,
            m=m,
            alpha_adj=round(alpha_adj, 5),
            adj_ci_low=lo,
            adj_ci_high=hi,
            passed=passed,
            blocked=clears and failed,
        )
        if not passed:
            failed = True
    return [out[i] for i in range(m)]
