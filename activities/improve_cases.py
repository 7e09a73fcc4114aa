"""Improvement-loop activity for a spec's own cases (``self_improvement.cases``): grade one
version's case runs from the trace store (``improve_grade_cases``).

The runs are the round's children (workflows/improve.py), case *c* repeat *r* with
``replicate=r``; grading is ``armature eval``'s (evals/runner.py's ``grade_recorded``), so a
case means the same in a round as on the command line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from activities.traces import store_for
from armature_temporal.evals.assertions import subject_text
from armature_temporal.evals.cases import load_cases
from armature_temporal.evals.runner import answer_stage, grade_recorded
from armature_temporal.improve.cases import FailingCase, GradeCasesInput, GradedCases
from armature_temporal.store.engine import database_url

__all__ = ["improve_grade_cases"]

#: Characters of a failing case's output and reason the refiner is shown.
SHOWN = 400


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN] + "...[truncated]"


async def _answer(
    inp: GradeCasesInput, store: object, run_id: str, stage: str | None
) -> tuple[str | None, str]:
    """The stage graded (``stage``, else the run's answer stage) and its output, as text."""
    records = await asyncio.to_thread(store.records, run_id)  # type: ignore[attr-defined]
    stages = {r.stage_id: r for r in records if r.kind == "stage" and r.stage_id is not None}
    stage = stage or answer_stage(inp.plan, stages)
    if stage is None or stage not in stages:
        return stage, "(no answer)"
    return stage, subject_text(stages[stage].output)


async def _grade(inp: GradeCasesInput) -> GradedCases:
    cases = load_cases(Path(inp.cases.path)).cases
    store = store_for(database_url())
    base_dir = Path(inp.cases.path).parent
    verdicts: list[list[bool | None]] = []
    failing: list[FailingCase] = []
    for case, inputs, runs in zip(cases, inp.cases.inputs, inp.run_ids, strict=True):
        row: list[bool | None] = []
        for repeat, run_id in enumerate(runs):
            run = await grade_recorded(inp.plan, case, repeat, inputs, run_id, store, base_dir)
            row.append(None if run.status == "error" else run.status == "pass")
            if run.status == "fail" and not any(f.case == case.index for f in failing):
                first = next((v for v in run.verdicts if v.status == "fail"), None)
                stage, answer = await _answer(
                    inp, store, run_id, (first.stage if first is not None else None) or case.stage
                )
                failing.append(
                    FailingCase(
                        case=case.index,
                        description=case.description,
                        vars=dict(case.vars),
                        stage=stage,
                        output=_cut(answer),
                        assertion=first.type if first is not None else "",
                        reason=_cut(run.reason),
                        run_id=run_id,
                    )
                )
        verdicts.append(row)
    return GradedCases(verdicts=verdicts, failing=failing)


@activity.defn(name="improve_grade_cases")
async def improve_grade_cases(inp: GradeCasesInput) -> GradedCases:
    """Grade one version's case runs (by case, by repeat) and describe its failing cases."""
    return await _grade(inp)
