"""``ToolLoop``: one model attempt's tool-calling loop, turn by turn, from a :class:`LoopState`
— in the run's own workflow for its first ``context.segment_turns`` turns, then in an
``AgentLoop`` child workflow (workflows/agent_loop.py) that continues as new every segment, so
that no workflow history holds more than one segment of turns (runtime/loop_state.py).

The same code takes every turn wherever it runs. What differs is how a turn waits for a person:
the run waits on its gate (``Gates``) itself; the child, which has no gates of its own (people
approve the run, by its id), hands the loop back to the run (:class:`HandBack`) with the turn's
state, and the run starts a new child with the decision once it has one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio import workflow

from armature_temporal.knowledge.citing import RETRIEVE_TOOL
from armature_temporal.runtime.context import RECALL, RECALL_TOOL, ContextKeeper
from armature_temporal.runtime.loop_state import (
    AGENT_LOOP_WORKFLOW,
    AgentLoopInput,
    AgentLoopOutcome,
    ChainHead,
    LoopState,
    PendingTurn,
)
from armature_temporal.runtime.models import (
    GateDecision,
    LLMCallInput,
    LLMCallResult,
    RunInput,
    ToolApproval,
)
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.context_window import DEFAULT_SEGMENT_TURNS
from armature_temporal.spec.knowledge import RETRIEVE_TOOL_NAME
from armature_temporal.spec.mcp import MCP_PREFIX, offered, tool_definitions
from workflows.interpreter import spans
from workflows.interpreter.context import LoopUsage
from workflows.interpreter.facts import FACT_TOOL_NAMES, fact_tool_definitions
from workflows.interpreter.failures import StageFailure
from workflows.interpreter.gates import Gates
from workflows.interpreter.retries import ProviderFailure

if TYPE_CHECKING:
    from workflows.interpreter.llm import LLMStages

__all__ = [
    "AGENT_LOOP_CHILD",
    "LLM_TIMEOUT",
    "LOOP_PROGRESS_SIGNAL",
    "HandBack",
    "HandBackGates",
    "ToolLoop",
    "segment_turns",
]

LLM_TIMEOUT = timedelta(minutes=5)
#: workflow.patched id: a model's call of a tool its role does not offer is refused unrun.
OFFERED_TOOLS_ONLY = "offered-tools-only"
#: workflow.patched id: a loop past its first segment continues in an AgentLoop child.
AGENT_LOOP_CHILD = "agent-loop-child"
#: The signal a child reports its progress with, and the fields (and types) the run takes.
LOOP_PROGRESS_SIGNAL = "loop_progress"
PROGRESS_FIELDS: dict[str, type | tuple[type, ...]] = {
    "turn": int,
    "max_turns": int,
    "window_tokens": int,
    "budget": (int, type(None)),
    "compactions": int,
    "tokens_total": int,
    "cost_usd": (int, float),
    "stopped": str,
}


class HandBack(Exception):
    """The child's loop needs a person's decision: on ``tool_call``, or (None) on the model
    call a hook stopped."""

    def __init__(self, message: str, tool_call: ToolApproval | None) -> None:
        super().__init__(message)
        self.message = message
        self.tool_call = tool_call


class HandBackGates(Gates):
    """The child's gates: every wait hands the loop back to the run that owns the gates."""

    async def wait(
        self,
        gate_id: str,
        message: str,
        timeout_s: float | None,
        on_timeout: str,
        *,
        unattended: Literal["approve", "reject"] = "reject",
        tool_call: ToolApproval | None = None,
    ) -> GateDecision:
        raise HandBack(message, tool_call)


class ToolLoop:
    """Turns of one attempt's loop for a :class:`~workflows.interpreter.llm.LLMStages`."""

    def __init__(self, stages: LLMStages) -> None:
        self.stages = stages
        self.run = stages.run
        self.windows = stages.windows
        #: Stage id -> the AgentLoop child running its loop now.
        self.children: dict[str, str] = {}

    # --- the turns ----------------------------------------------------------------------------

    async def turns(
        self,
        stage: PlanStage,
        state: LoopState,
        keeper: ContextKeeper | None,
        boundary: Callable[[LoopState], bool],
    ) -> LLMCallResult | None:
        """Take turns until the model answers (its answer, with every turn's tokens and cost),
        or until ``boundary`` says this execution has taken enough (None; ``state`` holds where
        the loop is). Raises StageFailure (ProviderFailure for a provider's), or HandBack."""
        assert stage.role is not None
        run = self.run
        timeout = timedelta(seconds=stage.timeout_s) if stage.timeout_s else LLM_TIMEOUT
        if state.pending is not None:  # a turn handed back mid-way: its remaining calls
            await self._tool_calls(stage, state, keeper)
        while state.turn < stage.role.max_turns:
            if boundary(state):
                return None
            # A spent budget (role.max_tokens_total, max_cost_usd, deadline): one last call,
            # without tools, for the answer.
            stopped = self.windows.over_budget(stage) if keeper and keeper.turns else None
            final = self.windows.stop(stage, keeper, stopped) if keeper and stopped else None
            if keeper is not None and final is None:
                await self.windows.before_call(stage, keeper, state.attempt)
            has_tools = bool(stage.role.tools) and final is None
            tools = [t for t in stage.role.tools if has_tools and not _engine_tool(t)]
            pinned = tool_definitions(run.plan.mcp_servers, list(stage.role.tools))
            if RETRIEVE_TOOL_NAME in stage.role.tools:  # the engine answers it, like recall
                pinned.append(RETRIEVE_TOOL)
            pinned += fact_tool_definitions(stage.role.tools)
            run.count_llm_call(stage.id)
            turn = state.turn
            summary = (
                f"{stage.id}: {stage.role.name} ({stage.role.type}, tier {state.tier}, "
                f"attempt {state.attempt}{f', turn {turn + 1}' if turn else ''})"
            )
            llm = await self.stages.cached_call(
                LLMCallInput(
                    run_id=run.run_id,
                    stage=stage,
                    tier=run.plan.tiers[state.tier],
                    prompt_template=state.prompt,
                    mission=run.plan.mission,
                    variables=state.variables,
                    attempt=state.attempt,
                    params=state.params,
                    tools=tools,
                    transcript=final
                    if final is not None
                    else keeper.window()
                    if keeper is not None
                    else [],
                    turn=turn,
                    spec_name=run.plan.name,
                    approved=state.approved,
                    context=state.context,
                    tool_modules=run.plan.tool_modules if has_tools else [],
                    sim_seed=state.sim_seed,
                    judged_quality=state.judged_quality,
                    lessons=state.lessons,
                    knowledge=state.knowledge,
                    facts=state.facts,
                    extra_tools=(
                        [RECALL_TOOL] if has_tools and keeper and keeper.recallable else []
                    )
                    + (pinned if has_tools else []),
                    count_tokens=has_tools and keeper is not None and keeper.policy.enabled,
                    reasoning=state.reasoning,
                ),
                start_to_close=timeout,
                summary=summary,
                what=stage.id,
            )
            if keeper is not None:
                self.windows.spent(stage, llm)
                keeper.context_window = keeper.context_window or llm.context_window
                if final is None:
                    keeper.counted(llm.base_tokens, llm.message_tokens)
            if llm.needs_approval is not None and not state.approved:
                decision = await self.ask(
                    stage, f"a hook asks for approval: {llm.needs_approval}", None
                )
                if decision.decision == "reject":
                    raise _model_call_refused(stage, decision)
                state.approved = True
                continue
            if not llm.tool_calls:
                if keeper is not None and final is not None:  # the stop, for followers
                    self.windows.progress(stage, keeper, turn)
                return _with_earlier_turns(llm, state)
            if final is not None:
                raise StageFailure(
                    "tool_error",
                    f"stage {stage.id!r}: its tool loop stopped ({stopped}) and the model still "
                    "called tools instead of answering",
                )
            state.prompt_tokens += llm.prompt_tokens
            state.completion_tokens += llm.completion_tokens
            state.cost_usd += llm.cost_usd
            state.latency_ms += llm.latency_ms
            state.turn += 1
            state.pending = PendingTurn(llm=llm)
            await self._tool_calls(stage, state, keeper)
        raise StageFailure(
            "tool_error",
            f"stage {stage.id!r}: no final answer after "
            f"{stage.role.max_turns} turns (role.max_turns)",
        )

    async def _tool_calls(
        self, stage: PlanStage, state: LoopState, keeper: ContextKeeper | None
    ) -> None:
        """The pending turn's tool calls not yet made (each its own activity), then the turn
        joins the window."""
        pending = state.pending
        assert pending is not None and keeper is not None, "only a role with tools calls tools"
        calls = pending.llm.tool_calls
        names = offered(self.run.plan.mcp_servers, list(stage.role.tools if stage.role else []))
        for call in calls[len(pending.results) :]:
            engine = call["name"] in (RECALL, RETRIEVE_TOOL_NAME, *FACT_TOOL_NAMES)
            with spans.tool_span(
                call["name"], call.get("id"), stage.id, self.run.run_id, engine=engine
            ) as span:
                content, ref = await self._tool_call(stage, state, keeper, call, names)
                error = content.get("error") if isinstance(content, dict) else None
                spans.tool_outcome(
                    span,
                    error is None,
                    content.get("error_type") if error is not None else None,
                    str(error) if error is not None else None,
                )
            pending.results.append((call, json.dumps(content, default=str), ref))
        keeper.add_turn(_assistant_turn(pending.llm), pending.results)
        state.pending = None
        self.windows.progress(stage, keeper, state.turn)

    async def _tool_call(
        self,
        stage: PlanStage,
        state: LoopState,
        keeper: ContextKeeper,
        call: dict[str, Any],
        names: dict[str, str],
    ) -> tuple[Any, str | None]:
        """One of a turn's tool calls: its content for the model, and its stored result's
        reference (a context policy keeps large results out of the transcript)."""
        ref = None
        if call["name"] == RECALL and keeper.recallable:
            content = await self.windows.recall(stage, keeper, call)
        elif call["name"] == RETRIEVE_TOOL_NAME and RETRIEVE_TOOL_NAME in names:
            content = await self.stages.retrieval.tool(stage, call["arguments"])
        elif call["name"] in FACT_TOOL_NAMES and call["name"] in names:
            content = await self.stages.facts.tool(stage, call["name"], call["arguments"])
        elif call["name"] not in names and workflow.patched(OFFERED_TOOLS_ONLY):
            # A model (or what it read) asking for a tool the role does not offer: refused
            # here, never run, whatever the policy would say.
            content = {
                "error": f"tool {call['name']!r} is not offered to this stage; its tools: "
                f"{sorted(names)}",
                "error_type": "unknown_tool",
            }
        else:
            decided, state.decision = state.decision, None  # the call that waited for it
            tool = await self.stages.tools.call(
                stage,
                names.get(call["name"], call["name"]),
                call["arguments"],
                state.variables,
                render_args=False,
                store_result=keeper.policy.enabled,
                decided=decided,
            )
            content = (
                tool.output if tool.ok else {"error": tool.error, "error_type": tool.error_type}
            )
            ref = tool.content_ref
        return content, ref

    async def ask(
        self, stage: PlanStage, message: str, tool_call: ToolApproval | None
    ) -> GateDecision:
        """A person's decision, at the stage's next mid-stage gate (``<stage>#<n>``)."""
        seq = self.run.next_approval(stage.id)
        return await self.stages.gates.wait(
            f"{stage.id}#{seq}", message, None, "fail", tool_call=tool_call
        )

    # --- in the run: the first segment, then the child ----------------------------------------

    async def attempt(self, stage: PlanStage, state: LoopState) -> LLMCallResult:
        """One attempt's loop from the run's workflow: its first segment here, the rest in
        AgentLoop children."""
        keeper = self.windows.keeper(stage)
        segment = segment_turns(keeper)

        def boundary(s: LoopState) -> bool:
            return (
                keeper is not None
                and keeper.policy.enabled
                and s.turn >= segment
                and workflow.patched(AGENT_LOOP_CHILD)
            )

        answer = await self.turns(stage, state, keeper, boundary)
        if answer is not None:
            return answer
        assert keeper is not None
        return await self._delegate(stage, state, keeper)

    async def _delegate(
        self, stage: PlanStage, state: LoopState, keeper: ContextKeeper
    ) -> LLMCallResult:
        """Run the loop's later turns in AgentLoop children, waiting on the run's gates for
        what they hand back."""
        run, tracer = self.run, self.stages.tracer
        state.keeper = await self.windows.carry(keeper)
        self.save_usage(stage, state)
        child = 0
        while True:
            child += 1
            # The child's records follow these in the chain (a gate's decision, after the
            # first): stored first.
            await tracer.flush(keep_trying=True)
            chain = tracer.chain
            child_id = f"{run.run_id}.{stage.id}.a{state.attempt}.loop{child}"
            self.children[stage.id] = child_id
            self.show(stage.id, {**(state.progress or {}), "child": child_id})
            outcome: AgentLoopOutcome = await workflow.execute_child_workflow(
                AGENT_LOOP_WORKFLOW,
                AgentLoopInput(
                    run=RunInput(
                        plan=run.plan,
                        inputs=run.inputs,
                        outer_policies=run.outer_policies,
                        verification=run.verification,
                        replicate=run.replicate,
                    ),
                    run_id=run.run_id,
                    stage_id=stage.id,
                    state=state,
                    chain=ChainHead(seq=chain.seq, head=chain.head),
                    llm_calls=run.llm_calls,
                    executions=run.executions,
                ),
                id=child_id,
                result_type=AgentLoopOutcome,
                task_queue=workflow.info().task_queue,
                static_summary=f"{stage.id}: tool loop from turn {state.turn + 1} "
                f"(attempt {state.attempt})",
            )
            del self.children[stage.id]
            chain.seq, chain.head = outcome.chain.seq, outcome.chain.head
            run.llm_calls, run.executions = outcome.llm_calls, outcome.executions
            self.stages.cache.kept += outcome.cache_kept
            state = outcome.state
            self.load_usage(stage, state)
            if state.progress is not None:
                self.show(stage.id, state.progress)
            if outcome.kind == "answer":
                assert outcome.answer is not None
                return outcome.answer
            if outcome.kind == "failure":
                if outcome.provider:
                    raise ProviderFailure(outcome.message)
                raise StageFailure(outcome.error_type or "tool_error", outcome.message)
            decision = await self.ask(stage, outcome.message, outcome.tool_call)
            if outcome.tool_call is not None:
                state.decision = decision
            elif decision.decision == "reject":
                raise _model_call_refused(stage, decision)
            else:
                state.approved = True

    def show(self, stage_id: str, progress: dict[str, Any]) -> None:
        """The loop's progress as the run shows it: its status, and a stage_progress event."""
        self.run.results[stage_id].loop = progress
        self.run.events.stage_progress(stage_id, progress)

    def child_progress(self, sent: Any) -> str | None:
        """Take a ``loop_progress`` signal's progress (a child reports at the end of each of
        its executions); why it is refused, or None. Only a stage whose loop is in a child
        takes one, and only the fields progress has, of their types (a signal can come from
        anyone who can reach Temporal: it can change what progress shows, nothing else)."""
        if not isinstance(sent, dict) or not isinstance(sent.get("stage"), str):
            return 'not a loop progress report: send {"stage": "<stage>", "progress": {...}}'
        stage_id, progress = sent["stage"], sent.get("progress")
        if stage_id not in self.children:
            return f"stage {stage_id!r} has no tool loop running in a child"
        if not isinstance(progress, dict) or not isinstance(progress.get("turn"), int):
            return "progress must be an object with an integer turn"
        kept = {
            k: v
            for k, v in progress.items()
            if k in PROGRESS_FIELDS and isinstance(v, PROGRESS_FIELDS[k])
        }
        self.show(stage_id, {**kept, "child": self.children[stage_id]})
        return None

    # --- the stage's budgets across executions ----------------------------------------------

    def save_usage(self, stage: PlanStage, state: LoopState) -> None:
        """Put what the stage's loops spent so far into ``state``."""
        usage = self.windows.usage.get(stage.id) or LoopUsage()
        state.used_tokens, state.used_cost_usd = usage.tokens, usage.cost_usd
        state.started, state.stopped = usage.started, usage.stopped
        state.progress = self.run.results[stage.id].loop

    def load_usage(self, stage: PlanStage, state: LoopState) -> None:
        """Take what the stage's loops spent from ``state``."""
        self.windows.usage[stage.id] = LoopUsage(
            state.used_tokens, state.used_cost_usd, state.started, state.stopped
        )


def _model_call_refused(stage: PlanStage, decision: GateDecision) -> StageFailure:
    """The stage's failure when a person refused the model call a hook stopped."""
    return StageFailure(
        "policy_blocked",
        f"stage {stage.id!r}: the model call was refused at approval: {decision.comment or ''}",
    )


def segment_turns(keeper: ContextKeeper | None) -> int:
    """Turns a workflow execution takes of a loop before the next takes over."""
    if keeper is None:
        return DEFAULT_SEGMENT_TURNS
    return keeper.policy.segment_turns or DEFAULT_SEGMENT_TURNS


def _with_earlier_turns(llm: LLMCallResult, state: LoopState) -> LLMCallResult:
    """The answer of a tool loop, its tokens, cost and latency those of the whole attempt (every
    turn), so that the attempt's trace record and the run's totals count them."""
    if not state.turn:
        return llm
    return llm.model_copy(
        update={
            "prompt_tokens": llm.prompt_tokens + state.prompt_tokens,
            "completion_tokens": llm.completion_tokens + state.completion_tokens,
            "cost_usd": llm.cost_usd + state.cost_usd,
            "latency_ms": llm.latency_ms + state.latency_ms,
        }
    )


def _assistant_turn(llm: LLMCallResult) -> dict[str, Any]:
    """The model's tool-calling reply as a chat message for the next turn."""
    return {
        "role": "assistant",
        "content": llm.text or None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for c in llm.tool_calls
        ],
    }


def _engine_tool(name: str) -> bool:
    """A tool the engine answers or an MCP server runs, never the tools worker's registry."""
    return name.startswith(MCP_PREFIX) or name == RETRIEVE_TOOL_NAME or name in FACT_TOOL_NAMES
