"""Diagnose a spec version from its traces: per LLM stage, how often its output was invalid,
how often it escalated, failed, got through first time or was refused for low confidence, on
which tiers, and what judges thought of it. The proposals in :mod:`.propose` are read off this."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from armature_temporal.improve.models import Diagnosis, StageStats
from armature_temporal.improve.replay import replay_inputs
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.spec.compiler import Plan
from armature_temporal.views.report import RunTrace

__all__ = ["diagnose"]

#: Provider finish reasons and error texts that mean "cut off by the token limit".
_TRUNCATION_MARKERS = ("finish_reason=length", "max_tokens", "truncated", "length limit")


def _truncated(record: TraceRecord) -> bool:
    if record.data.get("finish_reason") == "length":
        return True
    error = (record.error or "").lower()
    return record.output_valid is False and any(m in error for m in _TRUNCATION_MARKERS)


def _judged_scores(plan: Plan, runs: Sequence[RunTrace]) -> dict[str, list[float]]:
    """Judge scores by the stage they judge: a judge stage's upstream LLM stages."""
    targets = {
        s.id: [d for d in s.depends_on if plan.stage(d).role is not None]
        for s in plan.stages
        if s.role is not None and s.role.type == "judge"
    }
    scores: dict[str, list[float]] = {}
    for run in runs:
        for r in run.records:
            if r.kind == "stage" and r.stage_id in targets and r.judge_score is not None:
                for target in targets[r.stage_id]:
                    scores.setdefault(target, []).append(r.judge_score)
    return scores


def _stage_stats(stage_id: str, runs: Sequence[RunTrace], judged: list[float]) -> StageStats:
    attempts = [
        r for run in runs for r in run.records if r.kind == "attempt" and r.stage_id == stage_id
    ]
    finals = [
        r
        for run in runs
        for r in run.records
        if r.kind == "stage" and r.stage_id == stage_id and r.status in ("completed", "failed")
    ]
    n = len(finals)
    invalid = sum(1 for a in attempts if a.output_valid is False)
    rated = [a for a in attempts if a.output_valid is not None]
    valid = [a for a in attempts if a.output_valid]
    unsure = sum(1 for a in valid if a.error_type == "low_confidence")
    escalated = sum(1 for f in finals if f.escalated)
    failed = sum(1 for f in finals if f.status == "failed")
    first_try = sum(
        1 for f in finals if f.status == "completed" and f.attempt <= 1 and not f.escalated
    )
    return StageStats(
        stage=stage_id,
        runs=n,
        attempts=len(attempts),
        invalid_rate=round(invalid / len(rated), 4) if rated else 0.0,
        escalation_rate=round(escalated / n, 4) if n else 0.0,
        failure_rate=round(failed / n, 4) if n else 0.0,
        first_try_rate=round(first_try / n, 4) if n else 0.0,
        judge_score=round(sum(judged) / len(judged), 4) if judged else None,
        tiers=dict(Counter(a.tier for a in attempts if a.tier)),
        finished_tiers=dict(Counter(f.tier for f in finals if f.status == "completed" and f.tier)),
        error_types=dict(Counter(f.error_type for f in finals if f.error_type)),
        truncated=sum(1 for a in attempts if _truncated(a)),
        low_confidence_rate=round(unsure / len(valid), 4) if valid else 0.0,
        mean_cost_usd=round(sum(a.cost_usd for a in attempts) / n, 6) if n else 0.0,
        mean_latency_ms=round(sum(f.latency_ms for f in finals) / n, 1) if n else 0.0,
    )


def diagnose(plan: Plan, runs: Sequence[RunTrace], *, sample: int = 20) -> Diagnosis:
    """What the finished runs of ``plan``'s version (its spec_hash) say, stage by stage.

    ``runs`` may hold any runs of the spec; other versions, unfinished runs and verification
    runs are ignored. ``sample_inputs`` keeps up to ``sample`` distinct inputs, newest first.
    """
    mine = [
        r
        for r in runs
        if r.spec_hash == plan.spec_hash
        and r.status not in ("running", "waiting_gate")
        and r.finished_at is not None
        and not r.verification
    ]
    judged = _judged_scores(plan, mine)
    stages = [
        _stage_stats(s.id, mine, judged.get(s.id, [])) for s in plan.stages if s.role is not None
    ]
    scores = [r.hqs for r in mine if r.hqs is not None]
    seen: set[str] = set()
    inputs: list[dict[str, Any]] = []
    for run in sorted(mine, key=lambda r: r.started_at, reverse=True):
        if len(inputs) >= sample:
            break
        value = replay_inputs(run)
        if value is None:
            continue
        key = json.dumps(value, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            inputs.append(value)
    return Diagnosis(
        spec_name=plan.name,
        spec_hash=plan.spec_hash,
        runs=len(mine),
        mean_hqs=round(sum(scores) / len(scores), 4) if scores else None,
        stages=stages,
        sample_inputs=inputs,
    )
