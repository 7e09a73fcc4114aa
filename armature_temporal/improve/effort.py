"""Honest effort: what an improve/optimize round spent and why it stopped.

Every round reports the proposals it tried (and those its limits left out), the verification
runs and tokens it spent (counted from the trace store, plus the refiner's own call), why it
stopped (:data:`~armature_temporal.improve.models.StopReason`), and its held-out figure —
improve rounds have no held-out set, and say so. A round whose refiner tier is the tier of
one of the spec's judge stages is flagged: the model that proposed a change would grade it.
Verification cannot swap in another judge tier (it runs the spec's own judge stages as
written; another judge would measure another spec), so the flag says that it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

from armature_temporal.improve.models import RoundEffort, StopReason
from armature_temporal.spec.compiler import Plan

__all__ = ["Spent", "effort_of", "judge_check", "stop_of"]

#: A stopped round's status, as its stop reason.
_STOPS: dict[str, StopReason] = {
    "at_target": "converged",
    "no_candidates": "no_candidate",
    "too_few_traces": "too_few_traces",
}


@dataclass
class Spent:
    """What ``improve_prepare`` spent and found before verification (filled as it goes)."""

    plan: Plan | None = None  # the spec, once compiled
    refiner_tier: str | None = None  # None: the refiner did not run
    refiner_tokens: int = 0
    left_out: int = 0  # proposals over max_candidates or the refiner's K


def judge_check(plan: Plan, refiner_tier: str | None) -> tuple[list[str], bool, str]:
    """The tiers of the spec's judge stages, whether the refiner's tier is one of them, and
    what verification says about it."""
    judges = {
        s.id: s.role.model_tier
        for s in plan.stages
        if s.role is not None and s.role.type == "judge"
    }
    tiers = sorted(set(judges.values()))
    if refiner_tier is None or refiner_tier not in tiers:
        return tiers, False, ""
    graders = sorted(sid for sid, tier in judges.items() if tier == refiner_tier)
    note = (
        f"the refiner's tier {refiner_tier!r} is the tier of judge stage(s) {graders}: the model "
        "that proposed these changes grades them. Verification cannot use another judge tier: "
        "it runs the spec's own judge stages as written (another judge would measure another "
        "spec). Read its verdicts with that in mind, or set self_improvement.refiner_tier to a "
        f"tier no judge stage uses (tiers: {list(plan.tier_ladder)})"
    )
    return tiers, True, note


def stop_of(status: str, left_out: int) -> tuple[StopReason, str]:
    """Why a round with ``status`` stopped, and one sentence saying so."""
    if status in _STOPS:
        reason = _STOPS[status]
        said = {
            "converged": "mean HQS is at target_hqs and nothing drifts",
            "no_candidate": "nothing to propose on the editable surfaces",
            "too_few_traces": "too few runs or distinct inputs to diagnose or verify",
        }
        return reason, said[reason]
    if left_out:
        return "budget", (
            f"verified what its limits allow; {left_out} proposal(s) over max_candidates or "
            "the refiner's K were left out"
        )
    return "tried_all", "every proposal found was verified"


def effort_of(
    plan: Plan,
    spent: Spent,
    status: str,
    *,
    proposals_tried: int = 0,
    runs: int = 0,
    tokens: int = 0,
) -> RoundEffort:
    """A round's effort report from what it spent (``tokens``: its verification runs')."""
    tiers, same, note = judge_check(plan, spent.refiner_tier)
    stop, detail = stop_of(status, spent.left_out)
    return RoundEffort(
        proposals_tried=proposals_tried,
        proposals_left_out=spent.left_out,
        runs=runs,
        tokens=tokens + spent.refiner_tokens,
        refiner_tokens=spent.refiner_tokens,
        stop=stop,
        stop_detail=detail,
        refiner_tier=spent.refiner_tier,
        judge_tiers=tiers,
        same_tier=same,
        judge_note=note,
    )
