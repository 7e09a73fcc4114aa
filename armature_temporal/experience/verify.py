"""Memory CI's statistics: is a heuristic's paired HQS gain real, with several tested at once?

Each heuristic tested in a round has paired scores: the same recent input (and simulator
seed, ``replicate``) run with the baseline lessons and with the baseline plus the heuristic.
:func:`~armature_temporal.improve.propose.paired_verdict` gives the mean gain and its 95%
bootstrap interval (what the event shows). Testing ``m`` heuristics in one round at 95% each
would promote a useless one far more often than 5% of the time, so the decision uses Holm's
step-down adjustment: sorted by their one-sided bootstrap p-value, the ``k``-th (from 0) is
decided on its two-sided ``1 - 0.05 / (m - k)`` interval, promoted only when that interval's
low end is above 0; once one fails, it and every later one are rejected. The family-wise
chance of promoting any useless heuristic stays at or under 5%.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.improve.propose import paired_verdict
from armature_temporal.improve.stats import FAMILY_ALPHA, RESAMPLES, holm

__all__ = ["FAMILY_ALPHA", "RESAMPLES", "Decision", "PairedScores", "decide"]


class PairedScores(BaseModel):
    """One heuristic's test: baseline and candidate HQS per input (None: no score)."""

    model_config = ConfigDict(frozen=True)

    heuristic_id: str
    baseline: list[float | None]
    candidate: list[float | None]
    baseline_runs: list[str] = Field(default_factory=list)
    candidate_runs: list[str] = Field(default_factory=list)


class Decision(BaseModel):
    """What memory CI decided for one heuristic, with the figures the event keeps: a
    quarantined one is ``promoted`` or ``rejected``; a promoted one re-verified stays
    (``reverified``) or is ``retired`` (see activities/learn.py)."""

    model_config = ConfigDict(frozen=True)

    heuristic_id: str
    verdict: Literal["promoted", "rejected", "reverified", "retired", "inconclusive"]
    reason: str
    figures: dict[str, Any]


def decide(tests: Sequence[PairedScores], *, seed: int = 0) -> list[Decision]:
    """Decide every heuristic tested in one round (in the order given), Holm-adjusted.

    A test with fewer than two scored pairs cannot show anything and is rejected; it still
    counts in ``m`` (it was tested).
    """
    m = len(tests)
    prepared: list[tuple[PairedScores, list[float], list[float]]] = []
    for t in tests:
        pairs = [
            (b, c)
            for b, c in zip(t.baseline, t.candidate, strict=True)
            if b is not None and c is not None
        ]
        prepared.append((t, [b for b, _ in pairs], [c for _, c in pairs]))
    results = holm(
        [[c - b for b, c in zip(base, cand, strict=True)] for _, base, cand in prepared],
        [0.0] * m,
        seed=seed,
    )
    decided: list[Decision] = []
    for (t, base, cand), h in zip(prepared, results, strict=True):
        delta, lo95, hi95 = paired_verdict(base, cand, seed=seed)
        lo, hi, rank, alpha_adj = h.adj_ci_low, h.adj_ci_high, h.rank - 1, h.alpha_adj
        figures: dict[str, Any] = {
            "delta": delta,
            "ci_low": lo95,
            "ci_high": hi95,
            "n": len(base),
            "pairs_missing": len(t.baseline) - len(base),
            "p_one_sided": h.p_one_sided,
            "m": m,
            "holm_rank": h.rank,
            "alpha_adj": alpha_adj,
            "adj_ci_low": lo,
            "adj_ci_high": hi,
            "baseline_hqs": base,
            "candidate_hqs": cand,
            "baseline_runs": list(t.baseline_runs),
            "candidate_runs": list(t.candidate_runs),
        }
        level = f"{100 * (1 - alpha_adj):.1f}%"
        if len(base) < 2:
            verdict: Literal["promoted", "rejected"] = "rejected"
            reason = (
                f"only {len(base)} of {len(t.baseline)} replay pairs have scores; the runs did "
                "not reach the trace store"
            )
        elif not h.passed:
            verdict = "rejected"
            reason = (
                f"HQS {delta:+.3f} on average over {len(base)} paired replays; Holm-adjusted "
                f"{level} interval [{lo:+.3f}, {hi:+.3f}] (rank {rank + 1} of {m}) does not "
                "lie above 0: not shown to help"
            )
            if h.blocked:
                reason += " (Holm: a heuristic with a smaller p-value already failed)"
        else:
            verdict = "promoted"
            reason = (
                f"HQS +{delta:.3f} on average over {len(base)} paired replays; Holm-adjusted "
                f"{level} interval [{lo:+.3f}, {hi:+.3f}] (rank {rank + 1} of {m}) above 0"
            )
        decided.append(
            Decision(heuristic_id=t.heuristic_id, verdict=verdict, reason=reason, figures=figures)
        )
    return decided
