"""``AgentLoop``: the later turns of a long tool loop, in a child workflow of its run.

A run takes a loop's first ``context.segment_turns`` turns itself, then starts this child with
the loop's state (runtime/loop_state.py: the window's turns, the rest as references). The child
takes a segment of turns and continues as new with the state it reached — sooner if Temporal
suggests it — so each of its histories holds one segment. It continues the run's trace chain
(the run waits for it, so no record of the run's comes in between) and returns the answer with
every turn's tokens and cost; the run records the attempt as it would have.

It has no gates of its own: people approve the run. A turn that needs a person (a tool call a
rule marks ``require_approval``, a hook on the model call) ends the child with the loop's state
and what to ask; the run asks at its own gate and starts a new child with the decision.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from armature_temporal.runtime.context_carry import restore_keeper
    from armature_temporal.runtime.loop_state import (
        AGENT_LOOP_WORKFLOW,
        AgentLoopInput,
        AgentLoopOutcome,
        ChainHead,
        LoopState,
    )
    from armature_temporal.spec.context_window import PlanContext

# Not under imports_passed_through, as in workflows/run_spec.py: a strict sandbox imports (and
# restricts) the interpreter's code too.
from workflows.interpreter.arms import Arms
from workflows.interpreter.failures import StageFailure
from workflows.interpreter.llm import LLMStages
from workflows.interpreter.retries import ProviderFailure
from workflows.interpreter.state import RunContext
from workflows.interpreter.tool_loop import (
    LOOP_PROGRESS_SIGNAL,
    HandBack,
    HandBackGates,
    segment_turns,
)
from workflows.interpreter.tools import ToolCalls
from workflows.interpreter.tracing import Tracer

__all__ = ["AgentLoopWorkflow"]


async def _signal_parent(run_id: str, stage_id: str, progress: dict[str, Any] | None) -> None:
    """Tell the run how far the loop got (its status and events show it)."""
    if progress is None:
        return
    parent = workflow.info().parent
    target = parent.workflow_id if parent is not None else run_id
    try:
        await workflow.get_external_workflow_handle(target).signal(
            LOOP_PROGRESS_SIGNAL, {"stage": stage_id, "progress": progress}
        )
    except Exception as exc:  # the run is gone (cancelled): nobody to tell
        workflow.logger.warning("loop progress not delivered to %s: %s", target, exc)


@workflow.defn(name=AGENT_LOOP_WORKFLOW)
class AgentLoopWorkflow:
    """Takes turns of one attempt's tool loop for the run ``run_id`` (see the module doc)."""

    def __init__(self) -> None:
        self._run: RunContext | None = None
        self._stage = ""

    @workflow.query(name="progress")
    def progress(self) -> dict[str, Any] | None:
        """The loop's progress now (``temporal workflow query --type progress``); the run shows
        it at the end of each of this child's executions."""
        return self._run.results[self._stage].loop if self._run is not None else None

    @workflow.run
    async def run(self, inp: AgentLoopInput) -> AgentLoopOutcome:
        run = self._run = RunContext(inp.run, inp.run_id, workflow.now())
        self._stage = inp.stage_id
        run.llm_calls, run.executions = inp.llm_calls, inp.executions
        tracer = Tracer(run, inp.run, resume=inp.chain)
        gates = HandBackGates(run, tracer)
        stages = LLMStages(run, tracer, gates, ToolCalls(run, tracer, gates), Arms(run))
        stage = next(s for s in inp.run.plan.stages if s.id == inp.stage_id)
        assert stage.role is not None
        state = inp.state
        policy = stage.role.context or PlanContext()
        assert state.keeper is not None, "a loop reaches its child with its window"
        keeper = restore_keeper(policy, state.keeper)
        stages.loop.load_usage(stage, state)
        run.results[stage.id].loop = state.progress
        first, segment = state.turn, segment_turns(keeper)

        def boundary(s: LoopState) -> bool:
            return s.turn - first >= segment or workflow.info().is_continue_as_new_suggested()

        outcome = AgentLoopOutcome(kind="answer", state=state, chain=inp.chain)
        try:
            answer = await stages.loop.turns(stage, state, keeper, boundary)
        except HandBack as back:
            outcome = AgentLoopOutcome(
                kind="approval",
                state=state,
                chain=inp.chain,
                message=back.message,
                tool_call=back.tool_call,
            )
        except StageFailure as failed:
            outcome = AgentLoopOutcome(
                kind="failure",
                state=state,
                chain=inp.chain,
                message=str(failed),
                error_type=failed.error_type,
                provider=isinstance(failed, ProviderFailure),
            )
        else:
            outcome.answer = answer
        # The window goes on with the next execution, or back to the run for a decision.
        goes_on = outcome.kind == "approval" or (
            outcome.kind == "answer" and outcome.answer is None
        )
        state.keeper = await stages.windows.carry(keeper) if goes_on else None
        stages.loop.save_usage(stage, state)
        await tracer.flush(keep_trying=True)  # stored before the run (or the next) goes on
        chain = ChainHead(seq=tracer.chain.seq, head=tracer.chain.head)
        if outcome.kind == "answer" and outcome.answer is None:  # a segment's worth: go on
            await _signal_parent(inp.run_id, stage.id, run.results[stage.id].loop)
            workflow.continue_as_new(
                inp.model_copy(
                    update={
                        "state": state,
                        "chain": chain,
                        "llm_calls": run.llm_calls,
                        "executions": run.executions,
                        "segment": inp.segment + 1,
                        "cache_kept": inp.cache_kept + stages.cache.kept,
                    }
                )
            )
        return outcome.model_copy(
            update={
                "state": state,
                "chain": chain,
                "llm_calls": run.llm_calls,
                "executions": run.executions,
                "cache_kept": inp.cache_kept + stages.cache.kept,
                "segments": inp.segment,
            }
        )
