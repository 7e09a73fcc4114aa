"""How far to trust a stage's confidence: per LLM stage, its final outputs' confidence against
what happened to them (the dashboard's calibration section).

A stage's **final output** in a run is the output the stage returned: the last attempt that was
accepted (valid, not refused for low confidence), or, when every valid attempt was refused for
low confidence, the most confident of them (the earliest on a tie) — the interpreter's own rule
(``workflows/interpreter/confidence.py``). With loops, the last iteration's.

Its **outcome** is good when the judge of the stage scored it ≥ 0.5 — the stage's ``evaluate``
criteria (their mean), else a judge stage that depends on it — else when its gate approved it.
Outputs with neither are not calibrated (but still count for the hedging rate).

- **Reliability table**: final outputs binned by confidence (:data:`BINS` equal bins); per bin
  the mean confidence and the observed good rate. Calibrated confidence has the two equal.
- **Brier score**: mean of ``(confidence - good)²`` over judged outputs (0 best; 0.25 is what
  always saying 0.5 scores).
- **Hedging rate**: the share of final outputs that hedge: whose confidence came from the hedge
  detector and is below the stage's ``min_confidence`` (or :data:`HEDGED_BELOW` where the stage
  sets none). Traces do not carry the simulator's own hedge coin, so this is the detector's
  reading on simulate tiers too (the acceptance test checks it against the simulator's
  hedging sentences).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Literal

from armature_temporal.runtime.traces import LOW_QUALITY_THRESHOLD, TraceRecord
from armature_temporal.views.report import RunTrace, _View

__all__ = [
    "BINS",
    "HEDGED_BELOW",
    "ReliabilityBin",
    "StageCalibration",
    "brier_score",
    "build_calibration",
    "final_attempts",
    "reliability_bins",
    "stage_outcomes",
]

#: Equal-width confidence bins of the reliability table.
BINS = 5
#: A detector confidence below this is a hedged output, in a stage without min_confidence.
HEDGED_BELOW = 0.5


class ReliabilityBin(_View):
    low: float
    high: float
    outputs: int
    mean_confidence: float | None
    good_rate: float | None


class StageCalibration(_View):
    """One LLM stage of one spec version."""

    stage_id: str
    final_outputs: int  # final outputs that carry a confidence
    sources: dict[str, int]  # of those, by confidence source
    min_confidence: float | None  # the threshold its attempts were held to, if any
    low_confidence_attempts: int  # attempts refused for low confidence
    judged: int  # final outputs with an outcome (judge or gate)
    outcome: Literal["judge", "gate", "mixed"] | None
    good_rate: float | None
    brier: float | None
    bins: list[ReliabilityBin]
    hedged: int  # final outputs the hedge detector scored below the threshold
    hedging_rate: float | None


def _confidence(record: TraceRecord) -> float | None:
    value = record.data.get("confidence")
    return float(value) if isinstance(value, int | float) else None


def final_attempts(records: Sequence[TraceRecord]) -> dict[str, TraceRecord]:
    """One run's final attempt per stage (see the module docstring for the rule)."""
    by_stage: dict[str, dict[int, list[TraceRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.kind == "attempt" and r.stage_id:
            by_stage[r.stage_id][r.iteration or 0].append(r)
    finals: dict[str, TraceRecord] = {}
    for stage_id, iterations in by_stage.items():
        attempts = iterations[max(iterations)]
        accepted = [a for a in attempts if a.output_valid and a.error_type is None]
        if accepted:
            finals[stage_id] = accepted[-1]
            continue
        doubtful = [a for a in attempts if a.output_valid and a.error_type == "low_confidence"]
        best: TraceRecord | None = None
        for a in doubtful:
            if best is None or (_confidence(a) or 0.0) > (_confidence(best) or 0.0):
                best = a
        if best is not None:
            finals[stage_id] = best
    return finals


def stage_outcomes(run: RunTrace) -> dict[str, tuple[bool, str]]:
    """Per judged stage: (good, "judge" | "gate")."""
    evaluated: dict[str, float] = {}
    judged: dict[str, list[float]] = defaultdict(list)
    gated: dict[str, bool] = {}
    for r in run.records:
        if r.kind == "evaluation" and r.stage_id and r.judge_score is not None:
            evaluated[r.stage_id] = r.judge_score
        elif r.kind == "stage" and r.role_type == "judge" and r.judge_score is not None:
            for target in r.data.get("judges") or _provenance_targets(run, r.stage_id):
                judged[target].append(r.judge_score)
        elif r.kind == "gate" and r.stage_id and r.status in ("approve", "reject"):
            gated[r.stage_id] = r.status == "approve"
    out: dict[str, tuple[bool, str]] = {}
    for stage_id, good in gated.items():
        out[stage_id] = (good, "gate")
    for stage_id, scores in judged.items():
        out[stage_id] = (sum(scores) / len(scores) >= LOW_QUALITY_THRESHOLD, "judge")
    for stage_id, score in evaluated.items():
        out[stage_id] = (score >= LOW_QUALITY_THRESHOLD, "judge")
    return out


def _provenance_targets(run: RunTrace, judge_id: str | None) -> list[str]:
    """Runs traced before judge stage records named what they judge: the non-judge stages
    whose outputs the judge's last attempt was given."""
    attempts = [r for r in run.records if r.kind == "attempt" and r.stage_id == judge_id]
    if not attempts:
        return []
    judges = {r.stage_id for r in run.records if r.kind == "stage" and r.role_type == "judge"}
    provenance = attempts[-1].inputs_provenance or {}
    return [
        v.removeprefix("stage:")
        for v in provenance.values()
        if v.startswith("stage:") and v.removeprefix("stage:") not in judges
    ]


def reliability_bins(pairs: Sequence[tuple[float, bool]], bins: int = BINS) -> list[ReliabilityBin]:
    """(confidence, good) pairs in ``bins`` equal-width bins over [0, 1] (1.0 in the last)."""
    grouped: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for confidence, good in pairs:
        grouped[min(bins - 1, max(0, int(confidence * bins)))].append((confidence, good))
    return [
        ReliabilityBin(
            low=round(i / bins, 4),
            high=round((i + 1) / bins, 4),
            outputs=len(group),
            mean_confidence=round(sum(c for c, _ in group) / len(group), 4) if group else None,
            good_rate=round(sum(g for _, g in group) / len(group), 4) if group else None,
        )
        for i, group in enumerate(grouped)
    ]


def brier_score(pairs: Sequence[tuple[float, bool]]) -> float | None:
    """Mean squared difference between confidence and outcome (1 good, 0 not)."""
    if not pairs:
        return None
    return round(sum((c - float(g)) ** 2 for c, g in pairs) / len(pairs), 4)


def _hedged(record: TraceRecord, confidence: float) -> bool:
    threshold = record.data.get("min_confidence")
    below = confidence < (threshold if isinstance(threshold, int | float) else HEDGED_BELOW)
    return record.data.get("confidence_source") == "hedging" and below


def build_calibration(runs: Sequence[RunTrace]) -> list[StageCalibration]:
    """Per LLM stage whose attempts carry a confidence, over the runs of one spec version."""
    finals: dict[str, list[tuple[TraceRecord, float]]] = defaultdict(list)
    pairs: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    kinds: dict[str, set[str]] = defaultdict(set)
    refused: Counter[str] = Counter()
    thresholds: dict[str, float] = {}
    for run in runs:
        outcomes = stage_outcomes(run)
        for r in run.records:
            if r.kind == "attempt" and r.stage_id and r.error_type == "low_confidence":
                refused[r.stage_id] += 1
            if r.kind == "attempt" and isinstance(r.data.get("min_confidence"), int | float):
                thresholds[r.stage_id or ""] = float(r.data["min_confidence"])
        for stage_id, record in final_attempts(run.records).items():
            confidence = _confidence(record)
            if confidence is None:
                continue
            finals[stage_id].append((record, confidence))
            if stage_id in outcomes:
                good, kind = outcomes[stage_id]
                pairs[stage_id].append((confidence, good))
                kinds[stage_id].add(kind)
    out = []
    for stage_id in sorted(finals):
        stage_finals = finals[stage_id]
        hedges = [_hedged(r, c) for r, c in stage_finals]
        judged = pairs[stage_id]
        seen = kinds[stage_id]
        outcome: Literal["judge", "gate", "mixed"] | None = None
        if len(seen) > 1:
            outcome = "mixed"
        elif seen:
            outcome = "gate" if "gate" in seen else "judge"
        out.append(
            StageCalibration(
                stage_id=stage_id,
                final_outputs=len(stage_finals),
                sources=dict(
                    Counter(str(r.data.get("confidence_source")) for r, _ in stage_finals)
                ),
                min_confidence=thresholds.get(stage_id),
                low_confidence_attempts=refused[stage_id],
                judged=len(judged),
                outcome=outcome,
                good_rate=round(sum(g for _, g in judged) / len(judged), 4) if judged else None,
                brier=brier_score(judged),
                bins=reliability_bins(judged),
                hedged=sum(hedges),
                hedging_rate=round(sum(hedges) / len(hedges), 4),
            )
        )
    return out
