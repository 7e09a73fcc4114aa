"""Eval statistics (pure): pass@k, flakiness, and the paired comparison of two specs.

pass@k is the unbiased estimator of Chen et al. (2021): with ``n`` graded runs of a case of
which ``c`` passed, ``pass@k = 1 - C(n - c, k) / C(n, k)`` for ``k ≤ n``: the chance that at
least one of ``k`` runs drawn without replacement passes. A case is *flaky* when its verdict
changes across repeats (some passed, some failed). The comparison's interval is the
improvement loop's paired bootstrap (:func:`armature_temporal.improve.propose.paired_verdict`)
over cases: each case's pass-rate difference (other − base) is one pair, both measured with
the same inputs and replicates, so the same simulate noise.
"""

from __future__ import annotations

from math import comb

__all__ = ["flaky", "paired_difference", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for ``c`` passes in ``n`` runs.

    Raises:
        ValueError: ``k`` is not in 1..n, or ``c`` not in 0..n.
    """
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 ≤ k ≤ n, got k={k}, n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 ≤ c ≤ n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def flaky(verdicts: list[bool]) -> bool:
    """Whether a case's graded runs disagree (at least one pass and one fail)."""
    return len(set(verdicts)) > 1


def paired_difference(base: list[float], other: list[float]) -> tuple[float, float, float]:
    """Mean of ``other - base`` over paired cases and its 95% bootstrap interval (seeded: the
    same figures give the same interval; fewer than two pairs: the whole range [-1, 1])."""
    from armature_temporal.improve.propose import paired_verdict

    return paired_verdict(base, other)
