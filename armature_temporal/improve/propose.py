"""Candidate spec changes read off a :class:`~.models.Diagnosis`, and the paired statistics
that decide whether a candidate verified.

Each candidate is one change to one editable surface (``self_improvement.editable_surfaces``),
so a verified gain is attributable to that change. The rules, in the order candidates are
offered (within a rule, the stage with the stronger evidence first):

| evidence in the stage's traces | change |
| --- | --- |
| attempts cut off by the token limit | ``max_tokens`` doubled |
| invalid, escalated, failed or low-confidence (≥ 20/20/10/20%) | ``model_tier`` up (†) |
| invalid output ≥ 20% at temperature > 0.3 | ``temperature`` halved |
| invalid output ≥ 20% on a JSON stage | ``description`` + an explicit output instruction |
| judges score it below 0.7 | ``model_tier`` up (†), if not already proposed |
| easy: every run done at its first try, no low judge | ``model_tier`` one down (‡) |

(†) to the tier that most often finished the stage after escalating, else the next one up.
(‡) a cost-saving change (:func:`cost_saving`): verified by non-inferiority, not superiority.

New description text passes the prompt-input scanner first (it enters prompts); a flagged
text is never proposed. Nothing here claims a change helps: :func:`paired_verdict` decides
that from runs of both versions on the same inputs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from armature_temporal.improve.models import Diagnosis, SpecChange, StageStats
from armature_temporal.spec.compiler import Plan, PlanStage

__all__ = [
    "JSON_INSTRUCTION",
    "MIN_GAIN",
    "candidates",
    "cost_saving",
    "paired_verdict",
]

INVALID_RATE = 0.2
ESCALATION_RATE = 0.2
FAILURE_RATE = 0.1
LOW_CONFIDENCE_RATE = 0.2
LOW_JUDGE = 0.7
JSON_INSTRUCTION = (
    "Your answer is parsed as JSON: give one JSON object that matches the schema, with no "
    "text around it."
)
#: A change judged by superiority verifies when the low end of its Holm-adjusted interval of
#: the mean paired HQS gain is above this (see improve/decide.py).
MIN_GAIN = 0.0


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _tier_up(plan: Plan, stage: PlanStage, stats: StageStats) -> tuple[str, str] | None:
    assert stage.role is not None
    ladder = plan.tier_ladder
    current = stage.role.model_tier
    if current not in ladder:
        return None
    here = ladder.index(current)
    higher = {
        t: n for t, n in stats.finished_tiers.items() if t in ladder and ladder.index(t) > here
    }
    if higher:
        tier = max(higher, key=lambda t: (higher[t], -ladder.index(t)))
        done = sum(stats.finished_tiers.values())
        return tier, f"it finished on {tier} in {higher[tier]} of {done} runs"
    if here + 1 < len(ladder):
        return ladder[here + 1], f"{ladder[here + 1]} is the next tier up"
    return None


def _unsure(stats: StageStats) -> str:
    rate = stats.low_confidence_rate
    return f", {_pct(rate)} of valid outputs refused for low confidence" if rate else ""


def _effective(plan: Plan, stage: PlanStage, field: str) -> Any:
    """The role's ``temperature`` / ``max_tokens``, else its tier's, else None."""
    assert stage.role is not None
    value = getattr(stage.role, field)
    if value is not None:
        return value
    tier = plan.tiers.get(stage.role.model_tier)
    return getattr(tier, field, None) if tier is not None else None


def _scanned(text: str) -> bool:
    """True when the prompt-input scanner finds nothing in ``text``."""
    from armature_temporal.scanner import scan

    return not scan(text).flagged


def candidates(
    plan: Plan,
    diagnosis: Diagnosis,
    surfaces: Sequence[str],
    *,
    current: dict[str, dict[str, object]] | None = None,
    limit: int = 3,
) -> list[SpecChange]:
    """Up to ``limit`` single changes worth verifying, strongest evidence first.

    ``surfaces`` are ``stage.field`` strings the spec allows to change. ``current`` gives the
    values written in the spec text now (``{stage: {field: value}}``, absent = not written),
    which a change records as ``old`` so applying it later can tell if the spec moved on.
    """
    allowed = set(surfaces)
    written = current or {}
    found: list[tuple[float, SpecChange]] = []

    def add(weight: float, stage: str, field: str, new: object, why: str) -> None:
        if f"{stage}.{field}" not in allowed:
            return
        if any(c.stage == stage and c.field == field for _, c in found):
            return
        old = written.get(stage, {}).get(field)
        if old == new:
            return
        found.append(
            (weight, SpecChange(stage=stage, field=field, old=old, new=new, why=why))  # type: ignore[arg-type]
        )

    for stats in diagnosis.stages:
        if stats.runs == 0:
            continue
        stage = plan.stage(stats.stage)
        if stage.role is None:
            continue
        tokens = _effective(plan, stage, "max_tokens")
        if stats.truncated:
            new_tokens = tokens * 2 if tokens else 2048
            add(
                40 + stats.truncated / max(stats.attempts, 1),
                stage.id,
                "max_tokens",
                new_tokens,
                f"{stats.truncated} of {stats.attempts} attempts were cut off by the token limit "
                f"({tokens or 'provider default'})",
            )
        struggling = (
            stats.invalid_rate >= INVALID_RATE
            or stats.escalation_rate >= ESCALATION_RATE
            or stats.failure_rate >= FAILURE_RATE
            or stats.low_confidence_rate >= LOW_CONFIDENCE_RATE
        )
        if struggling and (up := _tier_up(plan, stage, stats)):
            tier, where = up
            add(
                30
                + stats.invalid_rate
                + stats.escalation_rate
                + stats.failure_rate
                + stats.low_confidence_rate,
                stage.id,
                "model_tier",
                tier,
                f"on {stage.role.model_tier}: {_pct(stats.invalid_rate)} of attempts invalid, "
                f"{_pct(stats.escalation_rate)} of runs escalated, {_pct(stats.failure_rate)} "
                f"failed{_unsure(stats)}; {where}",
            )
        temperature = _effective(plan, stage, "temperature")
        if stats.invalid_rate >= INVALID_RATE and temperature is not None and temperature > 0.3:
            add(
                20 + stats.invalid_rate,
                stage.id,
                "temperature",
                round(temperature / 2, 2),
                f"{_pct(stats.invalid_rate)} of attempts invalid at temperature {temperature:g}",
            )
        if (
            stats.invalid_rate >= INVALID_RATE
            and stage.output_mode != "text"
            and JSON_INSTRUCTION not in stage.role.prompt
        ):
            text = stage.role.prompt.rstrip("\n") + "\n" + JSON_INSTRUCTION + "\n"
            if _scanned(text):
                add(
                    10 + stats.invalid_rate,
                    stage.id,
                    "description",
                    text,
                    f"{_pct(stats.invalid_rate)} of attempts did not parse or meet the schema",
                )
        low_judge = stats.judge_score is not None and stats.judge_score < LOW_JUDGE
        if low_judge and (up := _tier_up(plan, stage, stats)):
            judged = stats.judge_score or 0.0
            add(
                5 + (LOW_JUDGE - judged),
                stage.id,
                "model_tier",
                up[0],
                f"judges scored it {judged:.2f} on average (below {LOW_JUDGE}); {up[1]}",
            )
        easy = (
            stats.first_try_rate >= 1.0
            and stats.invalid_rate == stats.escalation_rate == stats.failure_rate == 0
            and not stats.truncated
            and stats.low_confidence_rate < LOW_CONFIDENCE_RATE
            and (stats.judge_score is None or stats.judge_score >= LOW_JUDGE)
        )
        ladder = plan.tier_ladder
        tier_now = stage.role.model_tier
        if easy and tier_now in ladder and ladder.index(tier_now) > 0:
            down = ladder[ladder.index(tier_now) - 1]
            add(
                1 + stats.runs / 1000,
                stage.id,
                "model_tier",
                down,
                f"on {tier_now} it finished at its first try in all {stats.runs} runs; {down} is "
                "the next tier down (cheaper; verified by non-inferiority)",
            )
    # Rule order first (the table above), then the strength of the evidence within a rule.
    found.sort(key=lambda wc: -wc[0])
    return [c for _, c in found[:limit]]


def cost_saving(plan: Plan, change: SpecChange) -> bool:
    """True when ``change`` can only cut cost: a ``model_tier`` lower on the tier ladder, or a
    ``max_tokens`` below the stage's effective one. Descriptions, temperatures and added
    documents never are."""
    if change.field == "sources":
        return False
    stage = plan.stage(change.stage)
    if stage.role is None:
        return False
    if change.field == "model_tier":
        ladder = plan.tier_ladder
        now = stage.role.model_tier
        return (
            now in ladder and change.new in ladder and ladder.index(change.new) < ladder.index(now)
        )
    if change.field == "max_tokens":
        now = _effective(plan, stage, "max_tokens")
        return now is not None and isinstance(change.new, int) and change.new < now
    return False


def paired_verdict(
    baseline: Sequence[float], candidate: Sequence[float], *, resamples: int = 4000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean paired HQS difference (candidate − baseline) and its 95% bootstrap interval.

    Pairs are the same input run under both versions. The bootstrap resamples pairs (seeded:
    the same scores give the same interval). With fewer than two pairs the interval is the
    whole range [-1, 1]: nothing can verify on one input.
    """
    if len(baseline) != len(candidate):
        raise ValueError(
            f"paired scores need equal lengths, got {len(baseline)} and {len(candidate)}"
        )
    diffs = [c - b for b, c in zip(baseline, candidate, strict=True)]
    if not diffs:
        return 0.0, -1.0, 1.0
    mean = sum(diffs) / len(diffs)
    if len(diffs) < 2:
        return round(mean, 4), -1.0, 1.0
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choice(diffs) for _ in range(n)) / n for _ in range(resamples))
    lo = means[math.floor(0.025 * (resamples - 1))]
    hi = means[math.ceil(0.975 * (resamples - 1))]
    return round(mean, 4), round(lo, 4), round(hi, 4)
