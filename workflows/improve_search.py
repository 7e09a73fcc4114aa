"""A round's reflective frontier search (``self_improvement.search_runs``), in the manner of
GEPA: deterministic workflow code over improve/frontier.py.

Every version scored on the spec's cases is a member (the current spec, the round's proposed
candidates, then the search's own). Until the next candidate would overspend the budget (in
case runs), every case is passed by some member, or three tries in a row make nothing new, each
step makes one candidate: every second step, when two frontier members win different cases,
their changes merged surface by surface; otherwise a child of a parent drawn from the frontier
by cases won, proposed by the refiner shown the parent's failing cases (``improve_reflect``).
Each candidate runs every case × repeat with shared noise and joins the members. At the end,
the search's candidates still on the frontier join the round's candidates: verified by the
paired HQS interval in the round's Holm family, and gated by the cases, like the others (the
cases chose them; the verification inputs are the spec's recent inputs, not the cases).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from armature_temporal.improve.cases import CaseSet, GradedCases, pass_rates
    from armature_temporal.improve.frontier import (
        Member,
        SearchReport,
        SearchStopReason,
        changes_key,
        frontier,
        merge,
        merge_pair,
        sample_parent,
        solved,
        wins,
    )
    from armature_temporal.improve.models import Candidate, ImproveInput, Prepared, SpecChange
    from armature_temporal.improve.search import Made, MergeInput, ReflectInput
    from armature_temporal.spec.compiler import Plan

__all__ = ["frontier_search"]

RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=2))
#: Tries in a row that make no new candidate before the search stops (no_candidate).
MAX_MISSES = 3

RunCases = Callable[[str, Plan, CaseSet], Awaitable[GradedCases]]


async def frontier_search(
    inp: ImproveInput, prepared: Prepared, graded: list[GradedCases], run_cases: RunCases
) -> tuple[list[Candidate], list[GradedCases], SearchReport]:
    """Search from the round's scored versions (``graded``: the current spec first, then each
    of ``prepared.candidates``); the search's candidates left on the frontier, their case
    grades, and the report."""
    plan, cases = prepared.plan, prepared.cases
    assert plan is not None and cases is not None and prepared.diagnosis is not None
    si = plan.self_improvement
    assert si is not None
    tier = si.refiner_tier or plan.tier_ladder[-1]
    members = [Member(id="current", scores=pass_rates(graded[0].verdicts), origin="current")]
    members += [
        Member(
            id=f"candidate-{k + 1}",
            changes=[*c.ancestry, c.change],
            scores=pass_rates(g.verdicts),
            parents=["current"],
        )
        for k, (c, g) in enumerate(zip(prepared.candidates, graded[1:], strict=True))
    ]
    failing = {m.id: g.failing for m, g in zip(members, graded, strict=True)}
    made: dict[str, tuple[Candidate, GradedCases]] = {}
    tried = {changes_key(m.changes) for m in members}
    tried_changes: list[SpecChange] = [c for m in members for c in m.changes]
    rng = random.Random(f"{plan.spec_hash}/frontier")
    spent = step = misses = 0
    notes: list[str] = []
    stop: SearchStopReason
    while True:
        front = frontier(members)
        if solved(front):
            stop = "converged"
            break
        if spent + cases.runs > si.search_runs:
            stop = "budget"
            break
        if misses >= MAX_MISSES:
            stop = "no_candidate"
            break
        pair = merge_pair(front, rng, tried) if step % 2 == 1 else None
        step += 1
        if pair is not None:
            origin, parents = "merged", [pair[0].id, pair[1].id]
            result: Made = await workflow.execute_activity(
                "improve_merge",
                MergeInput(
                    spec_text=inp.spec_text,
                    spec_path=inp.spec_path,
                    changes=merge(pair[0], pair[1], wins(front)),
                ),
                result_type=Made,
                start_to_close_timeout=timedelta(minutes=2),
                retry_policy=RETRY,
                summary=f"merge {pair[0].id} and {pair[1].id}, which win different cases",
            )
        else:
            parent = sample_parent(front, rng)
            origin, parents = "reflected", [parent.id]
            result = await workflow.execute_activity(
                "improve_reflect",
                ReflectInput(
                    spec_text=inp.spec_text,
                    spec_path=inp.spec_path,
                    plan=plan,
                    diagnosis=prepared.diagnosis,
                    parent=parent.changes,
                    failing=failing[parent.id],
                    tried=tried_changes,
                    refiner_tier=tier,
                ),
                result_type=Made,
                start_to_close_timeout=timedelta(minutes=5),
                retry_policy=RETRY,
                summary=f"the refiner reflects on {parent.id}'s failing cases",
            )
        notes += result.notes
        cand = result.candidate
        changes = [*cand.ancestry, cand.change] if cand is not None else []
        if cand is None or changes_key(changes) in tried:
            misses += 1
            continue
        misses = 0
        tried.add(changes_key(changes))
        tried_changes.append(cand.change)
        mid = f"search-{len(made) + 1}"
        scored = await run_cases(mid, cand.plan, cases)
        spent += cases.runs
        made[mid] = (cand, scored)
        failing[mid] = scored.failing
        members.append(
            Member(
                id=mid,
                changes=changes,
                scores=pass_rates(scored.verdicts),
                parents=parents,
                origin=origin,  # type: ignore[arg-type]
            )
        )
    front = frontier(members)
    kept = [m.id for m in front if m.id in made]
    report = SearchReport(
        budget_runs=si.search_runs,
        spent_runs=spent,
        tried=len(made),
        stop_reason=stop,
        cases=list(cases.descriptions),
        members=members,
        frontier=[m.id for m in front],
        notes=notes,
    )
    return [made[k][0] for k in kept], [made[k][1] for k in kept], report
