"""``FanOut``: a stage's child runs (stable ids, retried per ``on_fail``) and its fan-in."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.workflow import ChildWorkflowCancellationType, ChildWorkflowHandle

from armature_temporal.runtime.fanout import (
    CONSENSUS_PROMPT,
    consensus,
    consensus_judge,
    merge_outputs,
    resolve_path,
    split_fairly,
)
from armature_temporal.runtime.models import RunInput, RunResult
from armature_temporal.runtime.progress import child_output, judge_tier
from armature_temporal.spec.compiler import PlanStage
from workflows.interpreter.failures import StageFailure
from workflows.interpreter.llm import LLMStages
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["FanOut"]


class FanOut:
    """Starts one child run of the interpreter per partition (or ``fan_out`` copies), restarts
    failed ones, and combines their outputs: list, merge, first or consensus."""

    def __init__(self, run: RunContext, tracer: Tracer, llm: LLMStages, workflow_name: str) -> None:
        self.run = run
        self.tracer = tracer
        self.llm = llm
        self.workflow_name = workflow_name

    def _child_inputs(
        self, stage: PlanStage, variables: dict[str, Any], items: list[Any] | None = None
    ) -> list[dict[str, Any]]:
        """Each child's run inputs: the parent's context (run inputs and the upstream outputs
        by stage id, as in 0.7.0; with ``isolated``, only the signature.input keys) plus its
        share of the partitioned list — as ``partition``, and under a bare partition_key's
        own name — and ``index`` and ``count``."""
        run = self.run
        keys = run.context_keys.get(stage.id, (list(run.inputs), []))
        base = {k: variables[k] for k in [*keys[0], *keys[1]] if k in variables}
        if stage.isolated:
            base = {k: v for k, v in base.items() if k in (stage.context_keys or [])}
        count = stage.fan_out or 1
        if items is not None:  # partition_source: one child per item
            name = stage.partition_key or "item"
            return [
                {**base, name: item, "partition": [item], "index": i, "count": len(items)}
                for i, item in enumerate(items)
            ]
        if stage.partition_key is None:
            return [{**base, "index": i, "count": count} for i in range(count)]
        try:
            found = resolve_path(variables, stage.partition_key)
        except KeyError as exc:
            raise StageFailure("output_invalid", f"stage {stage.id!r}: {exc}") from None
        if not isinstance(found, list):
            raise StageFailure(
                "output_invalid",
                f"stage {stage.id!r}: partition_key {stage.partition_key!r} "
                f"is {type(found).__name__}, not a list",
            )
        chunks = split_fairly(found, count)
        bare = stage.partition_key if "." not in stage.partition_key else None
        return [
            {
                **base,
                **({bare: c} if bare else {}),
                "partition": c,
                "index": i,
                "count": len(chunks),
            }
            for i, c in enumerate(chunks)
        ]

    async def stage(
        self, stage: PlanStage, variables: dict[str, Any], items: list[Any] | None = None
    ) -> Any:
        run = self.run
        child_plan = run.plan.children[stage.id]
        child_inputs = self._child_inputs(stage, variables, items)
        if not child_inputs:
            workflow.logger.info("stage %s: partition list is empty; no child runs", stage.id)
            return [] if stage.fan_in in ("list", None) else None
        result = run.results[stage.id]
        result.attempts = len(child_inputs)

        async def start_child(i: int, attempt: int) -> ChildWorkflowHandle[Any, RunResult]:
            suffix = "" if attempt == 1 else f"~{attempt}"
            child_id = f"{run.run_id}/{stage.id}/{i}{suffix}"
            result.children[i] = {"id": child_id, "status": "running", "attempt": attempt}
            return await workflow.start_child_workflow(
                self.workflow_name,
                RunInput(
                    plan=child_plan,
                    inputs=child_inputs[i],
                    parent_run_id=run.run_id,
                    outer_policies=[*run.outer_policies, run.own_policy()],
                    verification=run.verification,
                    replicate=run.replicate,
                ),
                id=child_id,
                result_type=RunResult,
                run_timeout=(
                    timedelta(seconds=child_plan.run_timeout_s)
                    if child_plan.run_timeout_s
                    else None
                ),
                cancellation_type=ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
                static_summary=(
                    f"{stage.id} child {i + 1}/{len(child_inputs)}: {child_plan.name}"
                    + (f" (attempt {attempt})" if attempt > 1 else "")
                ),
            )

        result.children = [{} for _ in child_inputs]
        handles = [await start_child(i, 1) for i in range(len(child_inputs))]
        if stage.fan_in == "first":
            done, pending = await workflow.wait(handles, return_when=asyncio.FIRST_COMPLETED)
            for other in pending:
                other.cancel()
            # Wait until the losers have really stopped (their activities see the cancel).
            await asyncio.gather(*pending, return_exceptions=True)
            winner = next(iter(done))
            index = handles.index(winner)
            for k, child in enumerate(result.children):
                child["status"] = "completed" if k == index else "cancelled"
            return child_output(child_plan, winner.result())
        # A failed child follows the stage's on_fail policy: it is started again (new id
        # <run>/<stage>/<i>~<attempt>) until on_fail.loop.max attempts are spent.
        outcomes: list[Any] = list(await asyncio.gather(*handles, return_exceptions=True))
        for attempt in range(2, stage.max_attempts + 2):
            failed = [i for i, o in enumerate(outcomes) if isinstance(o, BaseException)]
            for i, outcome in enumerate(outcomes):
                if not isinstance(outcome, BaseException):
                    result.children[i]["status"] = "completed"
            for i in failed:
                result.children[i]["status"] = "failed"
                result.children[i]["error"] = str(
                    getattr(outcomes[i], "cause", None) or outcomes[i]
                )[:500]
            if not failed:
                break
            if attempt > stage.max_attempts:
                first = result.children[failed[0]]
                raise StageFailure(
                    "dependency_failed",
                    f"stage {stage.id!r}: {len(failed)} of {len(outcomes)} child run(s) failed "
                    f"after {stage.max_attempts} attempt(s); first: {first['id']}: "
                    f"{first.get('error', '')}",
                )
            retried = await asyncio.gather(
                *[await start_child(i, attempt) for i in failed], return_exceptions=True
            )
            for i, outcome in zip(failed, retried, strict=True):
                outcomes[i] = outcome
        outputs = [child_output(child_plan, o) for o in outcomes if isinstance(o, RunResult)]
        return await self._fan_in(stage, outputs)

    async def _fan_in(self, stage: PlanStage, outputs: list[Any]) -> Any:
        if stage.fan_in == "merge":
            merged = merge_outputs(outputs)
            return (
                {**merged.merged, "_conflicts": merged.conflicts}
                if merged.conflicts
                else merged.merged
            )
        if stage.fan_in == "consensus":
            vote = consensus(outputs)
            verdict = {
                "value": vote.value,
                "agreement": vote.agreement,
                "votes": vote.votes,
                "majority": vote.majority,
                "children": len(outputs),
                "reconciled_by": None,
            }
            if not vote.majority:
                verdict.update(await self._reconcile(stage, outputs))
            return verdict
        return outputs

    async def _reconcile(self, stage: PlanStage, outputs: list[Any]) -> dict[str, Any]:
        """No majority: a judge-tier model picks the best-supported child output and says how
        much the children agree (a score the trace keeps)."""
        tier = judge_tier(self.run.plan)
        judge = consensus_judge(stage.id, tier, len(outputs))
        result = self.run.results[stage.id]
        for attempt in range(1, judge.max_attempts + 1):
            llm = await self.llm.call_model(
                judge, tier, CONSENSUS_PROMPT, {}, {"outputs": outputs, "stage": stage.id}, attempt
            )
            self.tracer.attempt(judge, llm, {}, result, tier)
            if llm.valid and isinstance(llm.output, dict):
                choice = int(llm.output["choice"])
                return {
                    "value": outputs[choice],
                    "agreement": float(llm.output["score"]),
                    "reconciled_by": tier,
                    "choice": choice,
                    "rationale": llm.output.get("rationale"),
                }
        raise StageFailure(
            "output_invalid",
            f"stage {stage.id!r}: the children disagree and "
            "the consensus judge gave no valid verdict",
        )


def _seconds(value: float | None) -> timedelta | None:
    return timedelta(seconds=value) if value else None
