"""Combining a round's verified changes: one candidate that makes them all, verified again.

When a round verifies two or more changes that do not conflict, the changes are applied
together to the spec the round started from and the result is run on the same paired inputs
(a second verification wave of the same round, ``workflows/improve.py``). It takes the place
of the single changes only when it is shown to help on its own *and* to give nothing back to
the best of them.

- **Members** (:func:`choose`): the verified, still-proposed proposals, best first (highest
  low end of the paired interval, as :func:`~armature_temporal.improve.pending.settle` ranks
  them); each is kept when it touches no ``(stage, field)`` a better one already changes and
  the changes applied together still load and compile (:func:`combine`). Fewer than two
  members: no combination.
- **Tests** (:func:`decide_combined`), on the pairs where the baseline, the best single and
  the combination all scored: (1) against the baseline, superiority (interval low end above
  ``MIN_GAIN``), or non-inferiority with a falling cost when every member was a cost-saving
  change verified that way; (2) against the best single, non-inferiority with the spec's
  ``self_improvement.noninferiority_margin``. Both are decided at level ``0.05 / (m + 1)``, ``m``
  the round's Holm family: the combination is one more decision of the round, given the
  Bonferroni share of an ``m + 1`` family (the strictest level Holm would give it). It verifies
  only when both tests pass (an intersection-union test: no further adjustment between them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.errors import SpecError
from armature_temporal.improve.decide import Judged, Scored
from armature_temporal.improve.edit import EditError, apply_changes, unified_diff
from armature_temporal.improve.lanes import classify_at
from armature_temporal.improve.models import Prepared, Proposal, SpecChange, VerificationTest
from armature_temporal.improve.propose import MIN_GAIN, paired_verdict
from armature_temporal.improve.stats import FAMILY_ALPHA, HolmResult, holm
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text

__all__ = [
    "Combination",
    "CombineInput",
    "CombineRecordInput",
    "Combining",
    "choose",
    "combine",
    "combined_proposal",
    "decide_combined",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Combination(_Model):
    """The members' changes applied together to the round's base spec text."""

    members: list[str]  # proposal ids, best first
    best: str  # the member the combination must not fall behind (members[0])
    changes: list[SpecChange]
    spec_text: str
    plan: Plan
    diff: str


class CombineInput(_Model):
    """``improve_combine``: the round's proposals and the spec text they were made from."""

    spec_text: str
    spec_path: str
    proposals: list[Proposal]


class Combining(_Model):
    """What ``improve_combine`` found: a combination to verify, or why there is none."""

    combination: Combination | None = None
    detail: str


class CombineRecordInput(_Model):
    """``improve_record_combined``: the second wave's runs, beside the first wave's."""

    improve_run_id: str
    created_at: str
    spec_text: str
    spec_path: str = ""
    prepared: Prepared
    m: int  # candidates in the round's Holm family (the first wave)
    members: list[Proposal]
    combination: Combination
    baseline_runs: list[str]
    best_runs: list[str]  # the best member's runs, aligned with baseline_runs
    combined_runs: list[str]
    #: With the spec's cases: the current spec's and the combination's case verdicts (by case,
    #: by repeat), so the combination is gated by the cases like any candidate.
    case_verdicts: list[list[list[bool | None]]] = Field(default_factory=list)


def _surfaces(p: Proposal) -> set[tuple[str, str]]:
    return {(c.stage, c.field) for c in p.changes}


def choose(proposals: Sequence[Proposal]) -> list[Proposal]:
    """The verified, still-proposed proposals best first, without those that touch a
    ``(stage, field)`` a better one changes."""
    ranked = sorted(
        (p for p in proposals if p.verdict == "verified" and p.status == "proposed"),
        key=lambda p: (-p.ci_low, p.id),
    )
    chosen: list[Proposal] = []
    taken: set[tuple[str, str]] = set()
    for p in ranked:
        if _surfaces(p) & taken:
            continue
        chosen.append(p)
        taken |= _surfaces(p)
    return chosen


def combine(
    base_text: str, proposals: Sequence[Proposal], *, filename: str, base_dir: Path | None
) -> Combining:
    """The combination of ``proposals`` (see the module docstring), or why there is none."""
    members: list[Proposal] = []
    changes: list[SpecChange] = []
    text, plan = base_text, None
    dropped: list[str] = []
    for p in choose(proposals):
        try:
            new_text = apply_changes(
                base_text, [*changes, *p.changes], filename=filename, base_dir=base_dir
            )
            new_plan = compile_spec(load_spec_text(new_text, filename, base_dir=base_dir))
        except (EditError, SpecError) as exc:
            dropped.append(f"{p.id} does not apply beside the others ({exc})")
            continue
        members.append(p)
        changes += p.changes
        text, plan = new_text, new_plan
    if len(members) < 2 or plan is None:
        why = "; ".join(dropped) or "they change the same stage fields"
        return Combining(
            detail=f"{len(members)} verified change(s) can be combined, 2 are needed: {why}"
        )
    return Combining(
        combination=Combination(
            members=[p.id for p in members],
            best=members[0].id,
            changes=changes,
            spec_text=text,
            plan=plan,
            diff=unified_diff(base_text, text, filename),
        ),
        detail=f"{len(members)} verified changes combined: {', '.join(p.id for p in members)}"
        + (f"; left out: {'; '.join(dropped)}" if dropped else ""),
    )


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _cost(scored: Scored, keep: Sequence[int], in_usd: bool) -> float | None:
    values = scored.usd if in_usd else scored.units
    if not keep or len(values) <= max(keep):
        return None
    return _mean([values[i] for i in keep])


def _interval(h: HolmResult, level: str) -> str:
    return f"{level} interval [{h.adj_ci_low:+.3f}, {h.adj_ci_high:+.3f}]"


def decide_combined(
    plan: Plan,
    members: Sequence[Proposal],
    m: int,
    baseline: Scored,
    best: Scored,
    combined: Scored,
) -> Judged:
    """Decide the combination against the baseline and against the best single member
    (``best``, aligned with ``baseline``), both at level ``0.05 / (m + 1)``."""
    si = plan.self_improvement
    margin = si.noninferiority_margin if si is not None else 0.02
    saving = all(p.test is not None and p.test.kind == "non_inferiority" for p in members)
    keep = [
        i
        for i, (b, s, c) in enumerate(zip(baseline.hqs, best.hqs, combined.hqs, strict=True))
        if b is not None and s is not None and c is not None
    ]
    bs = [float(baseline.hqs[i] or 0.0) for i in keep]
    ss = [float(best.hqs[i] or 0.0) for i in keep]
    cs = [float(combined.hqs[i] or 0.0) for i in keep]
    alpha = FAMILY_ALPHA / (m + 1)
    (vs_base,) = holm(
        [[c - b for b, c in zip(bs, cs, strict=True)]],
        [-margin if saving else MIN_GAIN],
        alpha=alpha,
    )
    (vs_best,) = holm([[c - s for s, c in zip(ss, cs, strict=True)]], [-margin], alpha=alpha)
    in_usd = any(baseline.usd) or any(combined.usd)
    b_cost, c_cost = _cost(baseline, keep, in_usd), _cost(combined, keep, in_usd)
    unit = "usd" if in_usd else "tier units"
    delta, lo, hi = paired_verdict(bs, cs)
    gain_best, _, _ = paired_verdict(ss, cs)
    test = VerificationTest(
        kind="non_inferiority" if saving else "superiority",
        margin=margin if saving else 0.0,
        m=m + 1,
        holm_rank=1,
        alpha_adj=round(alpha, 5),
        p_one_sided=vs_base.p_one_sided,
        adj_ci_low=vs_base.adj_ci_low,
        adj_ci_high=vs_base.adj_ci_high,
        baseline_cost=b_cost,
        candidate_cost=c_cost,
        cost_unit=unit,
    )
    level = f"{100 * (1 - alpha):.1f}%"
    if len(keep) < 2:
        verdict, detail = (
            "failed",
            (
                f"combination of {len(members)} changes: only {len(keep)} of {len(baseline.hqs)} "
                "inputs have scores for the baseline, the best single and the combination"
            ),
        )
    else:
        falls = (c_cost or 0.0) < (b_cost or 0.0)
        base_ok = vs_base.passed and (falls or not saving)
        kind = f"non-inferiority (margin {margin:g})" if saving else "superiority"
        first = (
            f"vs the baseline, {kind}: "
            f"HQS {delta:+.3f} over {len(keep)} pairs, {_interval(vs_base, level)}"
            + (f", cost {b_cost:g} → {c_cost:g} {unit}" if saving else "")
            + (" passes" if base_ok else " does not pass")
        )
        second = (
            f"vs the best single {members[0].id}, non-inferiority (margin {margin:g}): HQS "
            f"{gain_best:+.3f}, {_interval(vs_best, level)}"
            + (" passes" if vs_best.passed else " does not pass")
        )
        verdict = "verified" if base_ok and vs_best.passed else "not_better"
        detail = (
            f"combination of {len(members)} changes, decided at 0.05/{m + 1}: {first}; {second}"
        )
    return Judged(
        verdict=verdict,  # type: ignore[arg-type]
        detail=detail,
        test=test,
        baseline_hqs=bs,
        candidate_hqs=cs,
        delta=delta,
        ci_low=lo,
        ci_high=hi,
    )


def combined_proposal(inp: CombineRecordInput, judged: Judged) -> Proposal:
    """The combination as a proposal of the round: the members' changes and predictions, its
    own lane (:func:`~armature_temporal.improve.lanes.classify`) and verdict."""
    plan = inp.prepared.plan
    assert plan is not None
    combo = inp.combination
    lane, reasons = classify_at(inp.spec_path, inp.spec_text, combo.spec_text)
    digest = hashlib.sha256(f"{inp.improve_run_id}/combined".encode()).hexdigest()[:10]
    fixes = sorted({f for p in inp.members for f in p.predicted_fixes})
    risks = sorted({r for p in inp.members for r in p.predicted_regressions} - set(fixes))
    return Proposal(
        id=f"{plan.name}-p{digest}",
        spec_name=plan.name,
        improve_run_id=inp.improve_run_id,
        created_at=inp.created_at,
        base_spec_hash=plan.spec_hash,
        candidate_spec_hash=combo.plan.spec_hash,
        changes=combo.changes,
        baseline_hqs=judged.baseline_hqs,
        candidate_hqs=judged.candidate_hqs,
        delta=judged.delta,
        ci_low=judged.ci_low,
        ci_high=judged.ci_high,
        verdict=judged.verdict,
        detail=judged.detail,
        diff=combo.diff,
        spec_text=combo.spec_text,
        base_spec_text=inp.spec_text,
        test=judged.test,
        predicted_fixes=fixes,
        predicted_regressions=risks,
        base_failures=inp.members[0].base_failures,
        lane=lane,
        lane_reasons=reasons,
    )
