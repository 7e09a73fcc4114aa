"""One paired run of a spec version, as the learning loops start them (improve's verification
runs, fine-tune's runs with and without an adapter, the memory CI's replays).

Pair ``index`` of every version runs with ``replicate=index``, so the simulate provider gives
pair i of each version the same noise and the pairs differ from each other (common random
numbers). The run is a child workflow with ``verification=True`` and the id
``<parent>/<label>/<index>``. A verification run never acts: no gate is approved (a stage gate
holds its stage and what depends on it, which are not executed; tool, hook and adapter
approvals are refused), only fully reversible tool calls run, and no bandit is rewarded. The
loops choose its inputs from past runs, never from one in which a gate was rejected
(``armature_temporal.improve.replay``).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from armature_temporal.runtime.models import RunInput, RunResult
    from armature_temporal.spec.compiler import Plan

__all__ = ["RUN_SPEC", "paired_run"]

#: The interpreter workflow's name.
RUN_SPEC = "RunSpec"


async def paired_run(
    label: str,
    plan: Plan,
    index: int,
    inputs: dict[str, object],
    *,
    summary: str,
    lessons: list[str] | None = None,
) -> str:
    """Run pair ``index`` of version ``label``; its workflow id. A run that fails still
    counts (success is part of HQS), so the failure is logged, not raised. ``summary`` is what
    the Web UI shows for it; ``lessons`` pins the lessons every LLM stage carries."""
    parent = workflow.info().workflow_id
    run_id = f"{parent}/{label}/{index}"
    try:
        await workflow.execute_child_workflow(
            RUN_SPEC,
            RunInput(
                plan=plan,
                inputs=dict(inputs),
                parent_run_id=parent,
                verification=True,
                replicate=index,
                lessons=None if lessons is None else list(lessons),
            ),
            id=run_id,
            result_type=RunResult,
            static_summary=summary,
        )
    except ChildWorkflowError as exc:
        workflow.logger.info("%s run %s ended badly: %s", label, run_id, exc)
    return run_id
