"""HQS, the Harness Quality Score: how well a workflow's harness is doing, from its traces.

For one run::

    HQS = Σ wᵢ·cᵢ / Σ wᵢ   over the components cᵢ that apply to the run

| component | cᵢ (each in [0, 1]) | default wᵢ |
| --- | --- | --- |
| output_valid | share of model attempts whose output parsed and met the schema | 0.35 |
| success | 1 if the run completed, else 0 | 0.25 |
| judge | mean score of the run's judge stages (:func:`judge_score`) | 0.20 |
| latency | ``min(1, p50 / latency)``, see below | 0.10 |
| happy_path | share of LLM stages that completed on the first attempt, not escalated | 0.10 |

These are the weights of armature-agents 0.7.0's definition (0.35 output_valid + 0.25 success
+ 0.20 judge + 0.10 latency + 0.10 happy_path). A spec may set its own
(``hqs: {weights: {judge: 0.5}}``, compiled to ``Plan.hqs_weights``): the weights it names
replace the defaults, the others keep them; the run records them in its ``run_start`` record
(``data["hqs_weights"]``), where :func:`run_hqs` reads them.

``latency`` is ``min(1, latency_p50_ms / run_latency_ms)``. ``run_latency_ms`` is this run's
wall time from start to end as the workflow measured it (``run_end.latency_ms``; time waiting
at gates and for approvals included). ``latency_p50_ms`` is the median of the same measure
over the runs of the *same spec version* (spec_hash) the trace store had already finished when
this run ended, the most recently started ``trace_store.LATENCY_WINDOW`` (50)
of them; this run is not among them. A run as fast as that median or faster scores 1, one twice
as slow 0.5; a version's first run has no baseline, so no latency component. It is relative to
the spec's own history, never an absolute constant (0.7.0 used
``max(0, 1 - avg_latency_ms / 5000)``, which punishes a spec for being slow by nature).

``judge`` takes each judge stage's score from its output: the first of ``score``,
``quality_score``, ``confidence`` that is a number in [0, 1] (0.7.0's quorum score). Stages of
other role types never score.

A verification run never approves a gate: the gated stage is skipped (error type
``verification_gate``) once it has run up to its gate, and counts as completed for
``happy_path``; the stages after the gate are not executed (:func:`not_executed`) and not
scored. ``left_out`` names more stages to leave out (a paired comparison leaves out, on both
sides, what either side did not execute); a run that failed only in stages left out counts as a
success.

A component with nothing to measure (no judge scored; no latency baseline yet, or no latency;
no model attempts; no LLM stages; no run end) is left out and the weights of the rest
renormalised, as is a component whose weight is 0. Aggregates are computed per spec version
(spec_hash) and never mix versions: a changed spec, weights included, starts a new series.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.spec.checks import JUDGE_SCORE_KEYS

__all__ = [
    "JUDGE_SCORE_KEYS",
    "WEIGHTS",
    "HQSBreakdown",
    "hqs_weights",
    "judge_score",
    "median",
    "not_executed",
    "run_hqs",
]

#: The default weights (armature-agents 0.7.0's definition).
WEIGHTS: dict[str, float] = {
    "output_valid": 0.35,
    "success": 0.25,
    "judge": 0.20,
    "latency": 0.10,
    "happy_path": 0.10,
}


class HQSBreakdown(BaseModel):
    model_config = ConfigDict(frozen=True)

    hqs: float
    components: dict[str, float]


def median(values: Iterable[float]) -> float | None:
    data = [v for v in values if v is not None]
    return statistics.median(data) if data else None


def hqs_weights(overrides: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The weights a run is scored with: the defaults, with ``overrides`` replacing some.

    Raises:
        ValueError: an unknown component, a weight that is not a finite number >= 0, or
            weights that sum to 0.
    """
    weights = dict(WEIGHTS)
    for key, value in (overrides or {}).items():
        if key not in WEIGHTS:
            raise ValueError(f"HQS weight {key!r} is not a component; components: {list(WEIGHTS)}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"HQS weight {key!r} must be a number >= 0, got {value!r}")
        weights[key] = float(value)
    if sum(weights.values()) <= 0:
        raise ValueError("HQS weights sum to 0; give at least one component a positive weight")
    return weights


def judge_score(output: Any) -> float | None:
    """A judge stage's score from its output: the first of ``score``, ``quality_score``,
    ``confidence`` that is a number in [0, 1]; None when none is.

    A key whose value is out of range, not a number, or a bool is passed over, so
    ``{"score": 7, "confidence": 0.8}`` scores 0.8. The caller checks that the stage is a judge.
    """
    if not isinstance(output, Mapping):
        return None
    for key in JUDGE_SCORE_KEYS:
        value = output.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if 0.0 <= value <= 1.0:  # NaN fails both comparisons
            return float(value)
    return None


def _recorded_weights(records: Sequence[TraceRecord]) -> Mapping[str, Any] | None:
    start = next((r for r in records if r.kind == "run_start"), None)
    recorded = start.data.get("hqs_weights") if start is not None else None
    return recorded if isinstance(recorded, Mapping) else None


def run_hqs(
    records: Sequence[TraceRecord],
    latency_p50_ms: float | None,
    weights: Mapping[str, float] | None = None,
    *,
    left_out: Collection[str] = (),
) -> HQSBreakdown:
    """The HQS of one finished run from its records, given its spec version's p50 latency.

    Args:
        records: The run's trace records.
        latency_p50_ms: Median latency of the version's recent finished runs; None leaves
            the latency component out.
        weights: Weights to score with (see :func:`hqs_weights`); default the ones the run
            recorded in its ``run_start`` record, else the defaults.
        left_out: Stage ids whose records are not scored, beside those the run itself did
            not execute (see the module's docstring).

    Raises:
        ValueError: weights that :func:`hqs_weights` refuses.
    """
    used = hqs_weights(weights if weights is not None else _recorded_weights(records))
    end = next((r for r in records if r.kind == "run_end"), None)
    components: dict[str, float] = {}
    skip = not_executed(records) | frozenset(left_out)
    if end is not None:
        components["success"] = 1.0 if _succeeded(end, records, skip) else 0.0
    if skip:
        records = [r for r in records if r.stage_id not in skip]
    attempts = [
        r.output_valid for r in records if r.kind == "attempt" and r.output_valid is not None
    ]
    if attempts:
        components["output_valid"] = sum(attempts) / len(attempts)
    scores = [
        r.judge_score
        for r in records
        if r.kind == "stage" and r.role_type == "judge" and r.judge_score is not None
    ]
    if scores:
        components["judge"] = sum(scores) / len(scores)
    if end is not None and latency_p50_ms and end.latency_ms > 0:
        components["latency"] = min(1.0, latency_p50_ms / end.latency_ms)
    llm_stages = [r for r in records if r.kind == "stage" and r.role_type is not None]
    if llm_stages:
        happy = [_reached_its_end(r) and r.attempt <= 1 and not r.escalated for r in llm_stages]
        components["happy_path"] = sum(happy) / len(happy)
    total = sum(used[k] for k in components)
    score = sum(used[k] * v for k, v in components.items()) / total if total else 0.0
    return HQSBreakdown(
        hqs=round(score, 4), components={k: round(v, 4) for k, v in components.items()}
    )


def not_executed(records: Sequence[TraceRecord]) -> frozenset[str]:
    """The stages a verification run did not execute because they come after a gate it never
    approved (``data.verification_gate`` names that gate; the gated stage itself ran up to its
    gate and is not among them)."""
    return frozenset(
        r.stage_id
        for r in records
        if r.kind == "stage"
        and r.stage_id is not None
        and r.error_type == "verification_gate"
        and r.data.get("verification_gate") not in (None, r.stage_id)
    )


def _reached_its_end(stage: TraceRecord) -> bool:
    """A stage record of a stage that completed, or that ran up to a gate a verification run
    never approves."""
    return stage.status == "completed" or stage.error_type == "verification_gate"


def _succeeded(end: TraceRecord, records: Sequence[TraceRecord], left_out: Collection[str]) -> bool:
    """The run completed; or, with stages left out, every stage that failed is one of them."""
    if end.status == "completed":
        return True
    if not left_out:
        return False
    bad = [
        r for r in records if r.kind == "stage" and r.status in ("failed", "rejected", "cancelled")
    ]
    return bool(bad) and all(r.stage_id in left_out for r in bad)
