"""``ContextWindows``: a tool loop's window kept within its budget — compaction (stubs, or a
summary by the policy's tier), the ``recall`` tool, and the ``context`` trace records.

The window itself is :class:`armature_temporal.runtime.context.ContextKeeper` (pure, in workflow
code); this module adds what needs the run: the summary call (an ``llm_call`` through the answer
cache, retried like any model call) and the trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.runtime.context import (
    RECALL,
    ContextKeeper,
    Turn,
    summary_tokens_limit,
)
from armature_temporal.runtime.context_carry import export_keeper
from armature_temporal.runtime.loop_state import KeeperState, MessageSlice, MessageSliceQuery
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult, ToolCallResult
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.context_window import CHARS_PER_TOKEN, PlanContext
from workflows.interpreter.retries import ProviderFailure

if TYPE_CHECKING:
    from workflows.interpreter.llm import LLMStages

__all__ = ["SUMMARY_PROMPT", "ContextWindows"]

#: The summarizer's task; the turns and the summary so far are variables, never template text.
SUMMARY_PROMPT = (
    "Summarize these turns of an agent's tool loop for the agent itself, which will continue "
    "from your summary: keep every fact, number, name, path and decision it may need later, "
    "and the handle (t<turn>.<call>) of the tool result each came from.\n"
    "{% if previous %}The summary of earlier turns, to fold in:\n{{ previous }}\n{% endif %}"
    "Turns:\n{{ turns }}"
)
#: The summarizer's input is cut to this many window budgets of text (its middle dropped).
SUMMARY_INPUT_BUDGETS = 2
#: How long reading a stored result back for ``recall`` may take.
READ_TIMEOUT = timedelta(seconds=30)


@dataclass
class LoopUsage:
    """What a stage's tool loops have spent so far (all its attempts)."""

    tokens: int = 0
    cost_usd: float = 0.0
    started: datetime | None = None
    stopped: str | None = None


class ContextWindows:
    """Keepers for the tool loops of one run's stages, and their budgets."""

    def __init__(self, stages: LLMStages) -> None:
        self.stages = stages
        self.usage: dict[str, LoopUsage] = {}

    def spent(self, stage: PlanStage, llm: LLMCallResult) -> LoopUsage:
        """Add a model call of the stage's loop to its usage."""
        usage = self.usage.setdefault(stage.id, LoopUsage())
        if usage.started is None:
            usage.started = workflow.now()
        usage.tokens += llm.prompt_tokens + llm.completion_tokens
        usage.cost_usd += llm.cost_usd
        return usage

    def over_budget(self, stage: PlanStage) -> str | None:
        """Why the stage's loop must stop now (a budget of its role is spent), or None."""
        role, usage = stage.role, self.usage.get(stage.id)
        if role is None or usage is None:
            return None
        if role.max_tokens_total is not None and usage.tokens >= role.max_tokens_total:
            return f"max_tokens_total {role.max_tokens_total:,} spent ({usage.tokens:,} tokens)"
        if role.max_cost_usd is not None and usage.cost_usd >= role.max_cost_usd:
            return f"max_cost_usd {role.max_cost_usd:g} spent (${usage.cost_usd:.4f})"
        if role.deadline_s is not None and usage.started is not None:
            elapsed = (workflow.now() - usage.started).total_seconds()
            if elapsed >= role.deadline_s:
                return f"deadline {role.deadline_s:g}s passed ({elapsed:.0f}s since its first call)"
        return None

    def stop(self, stage: PlanStage, keeper: ContextKeeper, reason: str) -> list[dict[str, Any]]:
        """Record that the loop stops for ``reason``; the window for its last, tool-less call."""
        self.usage[stage.id].stopped = reason
        self.stages.tracer.context(
            stage.id,
            tier=None,
            llm=None,
            error=None,
            data={"event": "budget_stop", "reason": reason, **keeper.stats()},
        )
        return [
            *keeper.window(),
            {
                "role": "user",
                "content": f"[The tool loop's budget is spent: {reason}. Answer now from what "
                "you have, without calling tools.]",
            },
        ]

    def progress(self, stage: PlanStage, keeper: ContextKeeper, turn: int) -> None:
        """Show the loop's state: the stage's result (the status query) and a stage_progress
        event. ``window_tokens``: the window the last model call was sent."""
        assert stage.role is not None
        usage = self.usage.get(stage.id) or LoopUsage()
        stats = keeper.stats()
        data: dict[str, Any] = {
            "turn": turn,
            "max_turns": stage.role.max_turns,
            "window_tokens": keeper.sent_tokens,
            "budget": stats["budget"],
            "compactions": stats["compactions"],
            "tokens_total": usage.tokens,
            "cost_usd": round(usage.cost_usd, 6),
        }
        if usage.stopped is not None:
            data["stopped"] = usage.stopped
        run = self.stages.run
        run.results[stage.id].loop = data
        run.events.stage_progress(stage.id, data)

    async def carry(self, keeper: ContextKeeper) -> KeeperState:
        """The keeper as data for the next workflow execution (runtime/context_carry.py), its
        new archives stored first."""
        state, archives = export_keeper(keeper)
        if archives:
            await workflow.execute_local_activity(
                "store_messages",
                archives,
                result_type=list[str],
                start_to_close_timeout=READ_TIMEOUT,
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"archive {len(archives)} span(s) of tool-loop turns",
            )
        return state

    @staticmethod
    def keeper(stage: PlanStage) -> ContextKeeper | None:
        """A new window for one attempt's tool loop (None for a role without tools)."""
        role = stage.role
        if role is None or not role.tools:
            return None
        return ContextKeeper(role.context or PlanContext())

    async def before_call(self, stage: PlanStage, keeper: ContextKeeper, attempt: int) -> None:
        """Compact the window if it is over its budget (summarizing what leaves it when the
        policy names a tier), and trace what was done."""
        if not keeper.turns or not keeper.over_budget():
            return
        before = keeper.tokens()
        evicted = keeper.compact()
        llm = None
        error = None
        tier = keeper.policy.summarize
        if tier is not None and evicted:
            try:
                llm = await self._summarize(stage, keeper, evicted, tier, attempt)
            except ProviderFailure as exc:  # the turns become stubs; the loop goes on
                error = str(exc)
            else:
                if llm.text.strip():
                    keeper.summary = llm.text.strip()
        self.stages.tracer.context(
            stage.id,
            tier=tier if llm is not None else None,
            llm=llm,
            error=error,
            data={
                "event": "compacted",
                "mode": "summary" if keeper.summary is not None else "stubs",
                "turns_out": [t.number for t in evicted],
                "tokens_before": before,
                **keeper.stats(),
            },
        )

    async def _summarize(
        self, stage: PlanStage, keeper: ContextKeeper, evicted: list[Turn], tier: str, attempt: int
    ) -> Any:
        run = self.stages.run
        assert stage.role is not None
        budget = keeper.budget()
        text = _turns_text(evicted, (budget or 8000) * CHARS_PER_TOKEN * SUMMARY_INPUT_BUDGETS)
        summarizer = stage.model_copy(
            update={
                "role": stage.role.model_copy(
                    update={
                        "name": f"{stage.role.name} (context summary)",
                        "type": "worker",
                        "prompt": SUMMARY_PROMPT,
                        "guidance": "",
                        "tools": [],
                        "context": None,
                        "model_tier": tier,
                    }
                ),
                "output_mode": "text",
                "output_schema": None,
                "min_confidence": None,
                "simulate": None,
            }
        )
        first, last = evicted[0].number, evicted[-1].number
        inp = LLMCallInput(
            run_id=run.run_id,
            stage=summarizer,
            tier=run.plan.tiers[tier],
            prompt_template=SUMMARY_PROMPT,
            variables={"previous": keeper.summary or "", "turns": text},
            attempt=attempt,
            params={"temperature": 0, "max_tokens": summary_tokens_limit(budget)},
            spec_name=run.plan.name,
            sim_seed=self.stages.sim_seed(),
        )
        run.count_llm_call(stage.id)
        return await self.stages.cached_call(
            inp,
            start_to_close=timedelta(minutes=5),
            summary=f"{stage.id}: summarize turns {first}-{last} out of the window (tier {tier})",
            what=stage.id,
        )

    async def recall(
        self, stage: PlanStage, keeper: ContextKeeper, call: dict[str, Any]
    ) -> dict[str, Any]:
        """Answer a ``recall`` call from the keeper (reading the message store for a result it
        holds only by reference); traced as a tool call."""
        arguments = call.get("arguments")
        where = keeper.recall_ref(arguments)
        read: tuple[str, int] | None = None
        failed: str | None = None
        if where is not None:
            ref, start, length, key = where
            try:
                got = await workflow.execute_local_activity(
                    "read_message",
                    MessageSliceQuery(ref=ref, start=start, length=length, key=key),
                    result_type=MessageSlice,
                    start_to_close_timeout=READ_TIMEOUT,
                    retry_policy=RetryPolicy(maximum_attempts=3),
                    summary=f"{stage.id}: recall {ref[:12]}",
                )
            except (ActivityError, ApplicationError) as exc:  # local activities raise the latter
                failed = str(exc.cause or exc)
            else:
                read = (got.text, got.total_chars) if got.found else None
        if failed is not None:
            ok, content = (
                False,
                {
                    "error": f"that result could not be read back: {failed}",
                    "error_type": "message_missing",
                },
            )
        else:
            ok, content = keeper.recall(arguments, read)
        result = ToolCallResult(
            ok=ok,
            output={k: v for k, v in content.items() if k != "text"}
            | {"chars": len(content.get("text", ""))}
            if ok
            else {},
            error_type=None if ok else content["error_type"],
            error=None if ok else content["error"],
        )
        self.stages.tracer.tool(stage.id, RECALL, result, False)
        return content


def _turns_text(turns: list[Turn], limit: int) -> str:
    """The turns as plain text for the summarizer, cut in the middle to ``limit`` characters."""
    lines = []
    for turn in turns:
        said = turn.assistant.get("content") or ""
        lines.append(
            f"turn {turn.number}: {'; '.join(turn.calls)}" + (f" — {said}" if said else "")
        )
        for k, handle in enumerate(turn.handles):
            shown = turn.results[k].get("content") if k < len(turn.results) else None
            text = turn.full.get(handle, shown or "[stored; read it with recall]")
            lines.append(f"  result {handle}: {text}")
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    half = max(1, limit // 2)
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters left out ...]\n{text[-half:]}"
