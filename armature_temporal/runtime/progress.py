"""Pure views of a run in progress, shared by the interpreter and its tests.

The interpreter workflow keeps the mutable state; these functions only read it: which stages a
stage may see (its ancestors), the ``_transcript`` and ``_diagnostics`` a post_run stage is
given, a child run's output, and the judge tier a fan-out's consensus falls back on.
"""

from __future__ import annotations

from typing import Any

from armature_temporal.runtime.models import RunResult, StageResult
from armature_temporal.spec.compiler import Plan

__all__ = ["ancestors", "child_output", "diagnostics", "judge_tier", "transcript"]


def ancestors(plan: Plan, stage_id: str) -> list[str]:
    """The stage's transitive dependencies, nearest-last-declared first (a stable order)."""
    deps = {s.id: s.depends_on for s in plan.stages}
    seen: list[str] = []
    todo = list(deps[stage_id])
    while todo:
        sid = todo.pop()
        if sid not in seen:
            seen.append(sid)
            todo.extend(deps.get(sid, []))
    return seen


def transcript(results: dict[str, StageResult]) -> list[dict[str, Any]]:
    """What each stage that ran did: the ``_transcript`` variable of post_run stages."""
    return [
        {
            "stage": sid,
            "status": r.status,
            "attempts": r.attempts,
            "tier": r.tier,
            "output": r.output,
            "error": r.error,
        }
        for sid, r in results.items()
        if r.status != "pending"
    ]


def diagnostics(results: dict[str, StageResult]) -> list[dict[str, Any]]:
    """The stages that failed, retried or escalated: the ``_diagnostics`` variable."""
    return [
        {
            "stage": sid,
            "error_type": r.error_type,
            "error": r.error,
            "attempts": r.attempts,
            "escalated": r.escalated,
            "status": r.status,
        }
        for sid, r in results.items()
        if r.error_type is not None or r.attempts > 1 or r.escalated
    ]


def judge_tier(plan: Plan) -> str:
    """The tier judges default to: frontier, else the largest tier the spec has."""
    return "frontier" if "frontier" in plan.tiers else plan.tier_ladder[-1]


def child_output(plan: Plan, result: RunResult) -> Any:
    """A child's output: its sink stage's output, or a dict of sink outputs if several."""
    depended = {d for s in plan.stages for d in s.depends_on}
    sinks = [s.id for s in plan.stages if not s.post_run and s.id not in depended]
    if len(sinks) == 1:
        return result.outputs.get(sinks[0])
    return {sid: result.outputs.get(sid) for sid in sinks}
