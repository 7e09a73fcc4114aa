"""Improvement-loop activities of the second verification wave: combine a round's verified
changes into one candidate (``improve_combine``), then score its runs against the baseline's
and the best single's and keep it as a proposal (``improve_record_combined``).

The decision is :func:`~armature_temporal.improve.combine.decide_combined`; the runs are the
round's own (workflows/improve.py), on the same inputs and replicate numbers as the first wave.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from activities.improve import _scored
from activities.traces import store_for
from armature_temporal.improve.cases import case_check
from armature_temporal.improve.combine import (
    CombineInput,
    CombineRecordInput,
    Combining,
    combine,
    combined_proposal,
    decide_combined,
)
from armature_temporal.improve.decide import gate_cases
from armature_temporal.improve.models import Proposal
from armature_temporal.store.engine import database_url

__all__ = ["improve_combine", "improve_record_combined"]


def _combine(inp: CombineInput) -> Combining:
    return combine(
        inp.spec_text,
        inp.proposals,
        filename=inp.spec_path or "<spec>",
        base_dir=Path(inp.spec_path).parent if inp.spec_path else None,
    )


@activity.defn(name="improve_combine")
async def improve_combine(inp: CombineInput) -> Combining:
    """Apply the round's verified, non-conflicting changes together; the combined candidate."""
    return await asyncio.to_thread(_combine, inp)


def _record_combined(inp: CombineRecordInput) -> Proposal:
    plan = inp.prepared.plan
    assert plan is not None
    ladder = {t: i + 1 for i, t in enumerate(plan.tier_ladder)}
    base, best, combined = _scored(
        inp.baseline_runs, inp.best_runs, inp.combined_runs, ladder=ladder
    )
    judged = decide_combined(plan, inp.members, inp.m, base, best, combined)
    cases = inp.prepared.cases
    if cases is not None and len(inp.case_verdicts) == 2:
        check = case_check(cases.path, cases.descriptions, *inp.case_verdicts)
        judged = gate_cases([judged], [check])[0]
    proposal = combined_proposal(inp, judged)
    store_for(database_url()).save_proposals([proposal])
    return proposal


@activity.defn(name="improve_record_combined")
async def improve_record_combined(inp: CombineRecordInput) -> Proposal:
    """Decide the combined candidate (vs the baseline, vs the best single); keep its proposal."""
    return await asyncio.to_thread(_record_combined, inp)
