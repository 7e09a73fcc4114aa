"""One improvement round's decision: every candidate of the round is one Holm family
(family-wise 5%, :mod:`~armature_temporal.improve.stats`); a cost-saving change
(:func:`~armature_temporal.improve.propose.cost_saving`) is tested for non-inferiority, any
other for superiority.

Non-inferiority: verified when the Holm-adjusted interval's low end is above
``-self_improvement.noninferiority_margin`` and the mean cost per verification run falls.
Cost is the model attempts' ``cost_usd``; when both sides cost 0 USD (the simulate provider)
it is **tier units**, a stated proxy: each attempt counts its tier's 1-based position on the
tier ladder. Superiority: verified when the interval's low end is above 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.improve.cases import CaseCheck
from armature_temporal.improve.models import SpecChange, VerificationTest
from armature_temporal.improve.propose import MIN_GAIN, cost_saving, paired_verdict
from armature_temporal.improve.stats import holm
from armature_temporal.spec.compiler import Plan

__all__ = ["Judged", "Scored", "decide_round", "gate_cases"]


class Scored(BaseModel):
    """One version's verification runs: HQS (None: did not finish), USD and tier-unit cost."""

    model_config = ConfigDict(frozen=True)

    hqs: list[float | None]
    usd: list[float] = Field(default_factory=list)
    units: list[float] = Field(default_factory=list)


class Judged(BaseModel):
    """A candidate's decision and the figures its proposal keeps."""

    model_config = ConfigDict(frozen=True)

    verdict: Literal["verified", "not_better", "failed"]
    detail: str
    test: VerificationTest
    baseline_hqs: list[float]
    candidate_hqs: list[float]
    delta: float
    ci_low: float  # unadjusted 95%, as before Holm
    ci_high: float


def _mean(values: Sequence[float], keep: Sequence[int]) -> float | None:
    if not keep or len(values) <= max(keep):
        return None
    return round(sum(values[i] for i in keep) / len(keep), 6)


def decide_round(
    plan: Plan, changes: Sequence[SpecChange], baseline: Scored, candidates: Sequence[Scored]
) -> list[Judged]:
    """Decide each candidate (aligned with ``changes``) against the shared baseline runs."""
    si = plan.self_improvement
    margin = si.noninferiority_margin if si is not None else 0.02
    rows = []
    for change, cand in zip(changes, candidates, strict=True):
        keep = [
            i
            for i, (b, c) in enumerate(zip(baseline.hqs, cand.hqs, strict=True))
            if b is not None and c is not None
        ]
        in_usd = any(baseline.usd) or any(cand.usd)
        b_cost, c_cost = (baseline.usd, cand.usd) if in_usd else (baseline.units, cand.units)
        rows.append(
            (
                keep,
                [baseline.hqs[i] for i in keep],
                [cand.hqs[i] for i in keep],
                cost_saving(plan, change),
                "usd" if in_usd else "tier units",
                _mean(b_cost, keep),
                _mean(c_cost, keep),
            )
        )
    results = holm(
        [[c - b for b, c in zip(bs, cs, strict=True)] for _, bs, cs, *_ in rows],  # type: ignore[operator]
        [-margin if saving else MIN_GAIN for *_, saving, _, _, _ in rows],
    )
    judged: list[Judged] = []
    for (keep, bs, cs, saving, unit, b_mean, c_mean), h in zip(rows, results, strict=True):
        b_scores = [float(b) for b in bs if b is not None]
        c_scores = [float(c) for c in cs if c is not None]
        delta, lo, hi = paired_verdict(b_scores, c_scores)
        test = VerificationTest(
            kind="non_inferiority" if saving else "superiority",
            margin=margin if saving else 0.0,
            m=h.m,
            holm_rank=h.rank,
            alpha_adj=h.alpha_adj,
            p_one_sided=h.p_one_sided,
            adj_ci_low=h.adj_ci_low,
            adj_ci_high=h.adj_ci_high,
            baseline_cost=b_mean,
            candidate_cost=c_mean,
            cost_unit=unit,
        )
        verdict, detail = _verdict(test, h.passed, h.blocked, delta, len(keep), len(baseline.hqs))
        judged.append(
            Judged(
                verdict=verdict,
                detail=detail,
                test=test,
                baseline_hqs=b_scores,
                candidate_hqs=c_scores,
                delta=delta,
                ci_low=lo,
                ci_high=hi,
            )
        )
    return judged


def _verdict(
    t: VerificationTest, passed: bool, blocked: bool, delta: float, n: int, total: int
) -> tuple[Any, str]:
    """The verdict and its sentence, naming the test, its Holm rank and (for a cost-saving
    change) the margin and the cost figures."""
    if n < 2:
        return "failed", (
            f"only {n} of {total} verification pairs have scores; the runs did not reach the "
            "trace store"
        )
    level = f"{100 * (1 - t.alpha_adj):.1f}%"
    interval = (
        f"Holm-adjusted {level} interval [{t.adj_ci_low:+.3f}, {t.adj_ci_high:+.3f}] "
        f"(rank {t.holm_rank} of {t.m})"
    )
    head = f"HQS {delta:+.3f} on average over {n} paired runs; "
    missing = f" ({total - n} pairs without a score left out)" if total > n else ""
    held = " (Holm: a candidate with a smaller p-value already failed)" if blocked else ""
    if t.kind == "superiority":
        if passed:
            return "verified", f"superiority test: {head}{interval} above 0{missing}"
        return "not_better", (
            f"superiority test: {head}{interval} includes 0 or less: not shown to help{held}"
            f"{missing}"
        )
    cost = f"cost per run {t.baseline_cost:g} → {t.candidate_cost:g} {t.cost_unit}"
    if t.cost_unit == "tier units":
        cost += " (simulate costs 0 USD; proxy: each attempt counts its tier's ladder position)"
    test = f"non-inferiority test (margin {t.margin:g} HQS): {head}"
    falls = (t.candidate_cost or 0.0) < (t.baseline_cost or 0.0)
    if passed and falls:
        return "verified", f"{test}{interval} low end above −{t.margin:g}; {cost}{missing}"
    if passed:
        return "not_better", f"{test}{interval} within the margin, but {cost}: no saving{missing}"
    return "not_better", (
        f"{test}{interval} reaches −{t.margin:g} or below: may lose more than the margin{held}; "
        f"{cost}{missing}"
    )


def gate_cases(judged: Sequence[Judged], checks: Sequence[CaseCheck | None]) -> list[Judged]:
    """The spec's cases on each decision (aligned; None: no cases): a verified change that
    broke a case beyond its noise (improve/cases.py) is not verified; every decision keeps
    the check, and its sentence names the cases fixed and broken."""
    out: list[Judged] = []
    for j, check in zip(judged, checks, strict=True):
        if check is None:
            out.append(j)
            continue
        listed = f"cases fixed {check.fixed or 'none'}, broken {check.broken or 'none'}"
        verdict, detail = j.verdict, f"{j.detail}; {listed}"
        if j.verdict == "verified" and check.broken:
            verdict = "not_better"
            detail = (
                f"{j.detail}, but it breaks {len(check.broken)} of the spec's cases beyond "
                f"their noise ({check.broken}), so it is not verified; {listed}"
            )
        out.append(
            j.model_copy(
                update={
                    "verdict": verdict,
                    "detail": detail,
                    "test": j.test.model_copy(update={"cases": check}),
                }
            )
        )
    return out
