"""The experience loop, one round: distil lessons from the spec's recent trajectories (their
critic and judge scores), admit them (immune scan, near-duplicate merge, quarantine), and
replay-test the quarantined heuristics — memory CI.

A replay test runs the spec's ``experience.verify_runs`` most recent real inputs as child
runs of the interpreter in verification mode, twice each with the same simulator seed
(``replicate``): with the promoted heuristics (baseline) and with those plus the one under
test. A promoted heuristic due for re-verification (``experience.reverify_after_days``) is
replayed with the promoted heuristics less itself, against the same baseline runs (patched
``learn-reverify``). The paired HQS gains decide, Holm-adjusted across the heuristics tested in
the round (:mod:`armature_temporal.experience.verify`); each decision is a heuristic event with
its figures. Run on demand (``armature learn SPEC``) or by the Schedule ``armature schedule SPEC``
creates from ``experience.schedule``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from armature_temporal.experience.learning import (
        LearnInput,
        LearnPrepared,
        LearnRecordInput,
        LearnResult,
    )
    from armature_temporal.spec.compiler import Plan

from workflows.paired import paired_run

__all__ = ["LEARN_WORKFLOW", "REVERIFY_PATCH", "LearnWorkflow"]

LEARN_WORKFLOW = "Learn"
#: workflow.patched id: rounds replay promoted heuristics due for re-verification.
REVERIFY_PATCH = "learn-reverify"
STORE_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=2))


@workflow.defn(name=LEARN_WORKFLOW)
class LearnWorkflow:
    """One learning round. Its ``progress`` query says which phase it is in."""

    def __init__(self) -> None:
        self.phase = "distilling"
        self.runs_done = 0
        self.runs_total = 0

    @workflow.query(name="progress")
    def progress(self) -> dict[str, object]:
        return {"phase": self.phase, "runs_done": self.runs_done, "runs_total": self.runs_total}

    async def _replay(
        self, label: str, plan: Plan, index: int, inputs: dict[str, object], lessons: list[str]
    ) -> str:
        """One replay run; its id."""
        run_id = await paired_run(
            label,
            plan,
            index,
            inputs,
            summary=f"memory CI replay {index + 1} ({label}): {plan.name}",
            lessons=lessons,
        )
        self.runs_done += 1
        return run_id

    @workflow.run
    async def run(self, inp: LearnInput) -> LearnResult:
        prepared: LearnPrepared = await workflow.execute_activity(
            "learn_prepare",
            inp,
            result_type=LearnPrepared,
            start_to_close_timeout=timedelta(minutes=10),
            retry_policy=STORE_RETRY,
            summary="distil lessons from recent runs; admit them; choose replay tests",
        )
        if prepared.stop is not None:
            return prepared.stop
        assert prepared.plan is not None
        plan = prepared.plan
        self.phase = "replaying"
        versions = [("baseline", prepared.baseline)] + [
            (hid, [*prepared.baseline, hid]) for hid in prepared.tests
        ]
        reverify = bool(prepared.reverify) and workflow.patched(REVERIFY_PATCH)
        if reverify:
            versions += [
                (f"without-{hid}", [b for b in prepared.baseline if b != hid])
                for hid in prepared.reverify
            ]
        self.runs_total = len(versions) * len(prepared.inputs)
        ids = await asyncio.gather(
            *(
                self._replay(label, plan, i, inputs, lessons)
                for label, lessons in versions
                for i, inputs in enumerate(prepared.inputs)
            )
        )
        n = len(prepared.inputs)
        k_tests = len(prepared.tests)
        self.phase = "deciding"
        result: LearnResult = await workflow.execute_activity(
            "learn_record",
            LearnRecordInput(
                learn_run_id=workflow.info().workflow_id,
                prepared=prepared,
                baseline_runs=list(ids[:n]),
                candidate_runs=[list(ids[(k + 1) * n : (k + 2) * n]) for k in range(k_tests)],
                reverify_runs=[
                    list(ids[(k + 1) * n : (k + 2) * n])
                    for k in range(k_tests, k_tests + len(prepared.reverify))
                ]
                if reverify
                else [],
            ),
            result_type=LearnResult,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=STORE_RETRY,
            summary="score the replays; promote, reject, keep or retire each heuristic",
        )
        self.phase = "done"
        return result
