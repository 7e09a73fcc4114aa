"""Falsifiable predictions: what a proposal says it will fix and may break, checked next round.

A *failure code* is ``<kind>:<stage>``, read off a :class:`~.models.Diagnosis` with the same
thresholds the proposer uses (``output_invalid``, ``escalated``, ``stage_failed``,
``low_confidence``, ``truncated``, ``low_judge``). A proposal predicts it fixes the codes of
the stage it changes that its surface acts on, and names the codes it risks on that stage
(:func:`predictions`). After it is applied, the next round compares the predictions with the
new version's failures (:func:`verify`), and the drift score says how much of what is failing
now had been verified fixed before (:func:`drift`).
"""

from __future__ import annotations

from collections.abc import Iterable

from armature_temporal.improve.models import Diagnosis, SpecChange, Verification
from armature_temporal.improve.propose import (
    ESCALATION_RATE,
    FAILURE_RATE,
    INVALID_RATE,
    LOW_CONFIDENCE_RATE,
    LOW_JUDGE,
)

__all__ = ["drift", "failures", "predictions", "verify"]

#: The failure kinds each editable field acts on (what a change to it may fix).
FIXES: dict[str, tuple[str, ...]] = {
    "model_tier": (
        "output_invalid",
        "escalated",
        "stage_failed",
        "low_confidence",
        "low_judge",
    ),
    "temperature": ("output_invalid", "escalated", "stage_failed"),
    "description": ("output_invalid", "escalated", "stage_failed"),
    "max_tokens": ("truncated", "output_invalid", "stage_failed"),
    "sources": ("low_judge",),  # enrichment's candidates name their stages themselves
}
#: The failure kinds a change to each field risks on its stage (what it may break): a cooler
#: or more constrained prompt can cost quality; a longer limit can let a reply run on.
RISKS: dict[str, tuple[str, ...]] = {
    "sources": (),  # enrichment: its candidate names the stages it should fix itself
    "model_tier": (),
    "temperature": ("low_judge",),
    "description": ("low_judge",),
    "max_tokens": (),
}


def failures(diagnosis: Diagnosis) -> set[str]:
    """The failure codes (``kind:stage``) a diagnosis shows, by the proposer's thresholds."""
    found: set[str] = set()
    for s in diagnosis.stages:
        if s.runs == 0:
            continue
        checks = {
            "output_invalid": s.invalid_rate >= INVALID_RATE,
            "escalated": s.escalation_rate >= ESCALATION_RATE,
            "stage_failed": s.failure_rate >= FAILURE_RATE,
            "low_confidence": s.low_confidence_rate >= LOW_CONFIDENCE_RATE,
            "truncated": s.truncated > 0,
            "low_judge": s.judge_score is not None and s.judge_score < LOW_JUDGE,
        }
        found.update(f"{kind}:{s.stage}" for kind, bad in checks.items() if bad)
    return found


def predictions(change: SpecChange, diagnosis: Diagnosis) -> tuple[list[str], list[str]]:
    """``(predicted_fixes, predicted_regressions)`` of one change, sorted.

    Fixes: the failures now on the changed stage that its field acts on. Regressions: the
    codes that field risks on that stage which are not failing now.
    """
    now = failures(diagnosis)
    fixes = sorted(
        code for kind in FIXES[change.field] if (code := f"{kind}:{change.stage}") in now
    )
    risks = sorted(
        code for kind in RISKS[change.field] if (code := f"{kind}:{change.stage}") not in now
    )
    return fixes, risks


def drift(current: Iterable[str], ever_fixed: Iterable[str]) -> float:
    """``len(regressed) / max(len(current), 1)``: regressed = failing now ∩ ever verified fixed."""
    now = set(current)
    regressed = now & set(ever_fixed)
    return round(len(regressed) / max(len(now), 1), 4)


def verify(
    *,
    proposal_id: str | None,
    spec_hash: str,
    predicted_fixes: Iterable[str],
    predicted_regressions: Iterable[str],
    before: Iterable[str],
    diagnosis: Diagnosis,
    ever_fixed: Iterable[str],
) -> Verification:
    """Check an applied proposal's predictions against its version's diagnosis.

    ``before``: the failures of the version it was made from. Verified fixes: predicted and
    no longer failing. Missed predictions: predicted fixes still failing, and predicted
    regressions that did not happen. Unexpected regressions: failing now, not before, and not
    predicted. ``ever_fixed`` (earlier rounds' verified fixes) gives the drift score, with
    this round's verified fixes added.
    """
    now = failures(diagnosis)
    fixes = set(predicted_fixes)
    risks = set(predicted_regressions)
    verified = fixes - now
    missed = (fixes & now) | (risks - now)
    unexpected = (now - set(before)) - risks
    fixed = set(ever_fixed) | verified
    return Verification(
        proposal_id=proposal_id,
        spec_hash=spec_hash,
        runs=diagnosis.runs,
        current_failures=sorted(now),
        verified_fixes=sorted(verified),
        missed_predictions=sorted(missed),
        unexpected_regressions=sorted(unexpected),
        regressed=sorted(now & fixed),
        drift=drift(now, fixed),
    )
