"""HQS, the Harness Quality Score: how well a workflow's harness is doing, from its traces.

For one run::

    HQS = Σ wᵢ·cᵢ / Σ wᵢ   over the components cᵢ that apply to the run

| component | cᵢ | wᵢ |
| --- | --- | --- |
| success | 1 if the run completed, else 0 | 0.30 |
| output_valid | share of model attempts whose output parsed and met the schema | 0.20 |
| judge | mean judge score of the run's judge stages (only specs with judges) | 0.25 |
| latency | min(1, p50 / latency): the version's rolling median latency over this run's | 0.10 |
| happy_path | share of LLM stages that succeeded on the first attempt with no escalation | 0.15 |

A component with nothing to measure (no judges; no latency baseline yet; no LLM stages) is left
out and the weights of the rest renormalised. Latency is relative to the spec's *own* median,
never an absolute constant. Aggregates are computed per spec version (spec_hash) and never mix
versions: a changed spec starts a new series.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from armature_temporal.runtime.traces import TraceRecord

__all__ = ["WEIGHTS", "HQSBreakdown", "median", "run_hqs"]

WEIGHTS: dict[str, float] = {
    "success": 0.30,
    "output_valid": 0.20,
    "judge": 0.25,
    "latency": 0.10,
    "happy_path": 0.15,
}


class HQSBreakdown(BaseModel):
    model_config = ConfigDict(frozen=True)

    hqs: float
    components: dict[str, float]


def median(values: Iterable[float]) -> float | None:
    data = [v for v in values if v is not None]
    return statistics.median(data) if data else None


def run_hqs(records: Sequence[TraceRecord], latency_p50_ms: float | None) -> HQSBreakdown:
    """The HQS of one finished run from its records, given its spec version's p50 latency."""
    end = next((r for r in records if r.kind == "run_end"), None)
    components: dict[str, float] = {}
    if end is not None:
        components["success"] = 1.0 if end.status == "completed" else 0.0
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
        happy = [r.status == "completed" and r.attempt <= 1 and not r.escalated for r in llm_stages]
        components["happy_path"] = sum(happy) / len(happy)
    total = sum(WEIGHTS[k] for k in components)
    score = sum(WEIGHTS[k] * v for k, v in components.items()) / total if total else 0.0
    return HQSBreakdown(
        hqs=round(score, 4), components={k: round(v, 4) for k, v in components.items()}
    )
