"""``LLMStages``: model calls — attempts and retries, tier escalation, loops, tool turns."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from temporalio import workflow

from armature_temporal.knowledge.citing import citation_problem
from armature_temporal.runtime.loop_state import LoopState
from armature_temporal.runtime.models import Lessons, LLMCallInput, LLMCallResult
from armature_temporal.runtime.prompts import needed_variables, stage_context
from armature_temporal.spec.compiler import PlanStage, canonical_json
from armature_temporal.spec.plan import PlanReasoning
from armature_temporal.spec.templating import evaluate, truth
from workflows.interpreter.arms import Arms
from workflows.interpreter.cache import AnswerCache
from workflows.interpreter.confidence import confidence_shortfall, more_confident
from workflows.interpreter.context import ContextWindows
from workflows.interpreter.facts import Facts
from workflows.interpreter.failures import StageFailure
from workflows.interpreter.gates import Gates
from workflows.interpreter.lessons import LessonMemory
from workflows.interpreter.reasoning import counted, reason
from workflows.interpreter.retries import ProviderFailure, call_llm
from workflows.interpreter.retrieval import Retrieval
from workflows.interpreter.state import RunContext
from workflows.interpreter.tool_loop import LLM_TIMEOUT, ToolLoop
from workflows.interpreter.tools import ToolCalls
from workflows.interpreter.tracing import Tracer

__all__ = ["JUDGE_SEES_JUDGED_QUALITY", "LLM_TIMEOUT", "SIM_SEED_FROM_INPUTS", "LLMStages"]

#: workflow.patched id: the simulate provider is seeded by the run's inputs and replicate.
SIM_SEED_FROM_INPUTS = "simulate-seed-from-inputs"
#: workflow.patched id: a judge's call carries the latent quality of the outputs it judges.
JUDGE_SEES_JUDGED_QUALITY = "judge-sees-judged-quality"


class LLMStages:
    """One LLM stage: its arm, its loop iterations, and for each the attempts up the tier
    ladder until an output passes the stage's checks."""

    def __init__(
        self,
        run: RunContext,
        tracer: Tracer,
        gates: Gates,
        tools: ToolCalls,
        arms: Arms,
        lessons: LessonMemory | None = None,
        facts: Facts | None = None,
    ) -> None:
        self.run = run
        self.tracer = tracer
        self.gates = gates
        self.tools = tools
        self.arms = arms
        self.lessons = lessons
        #: The run's facts (the run's own, loaded; an AgentLoop child's answers tools only).
        self.facts = facts or Facts(run, tracer)
        self._sim_seed: str | None = None
        self.cache = AnswerCache(run)
        self.windows = ContextWindows(self)
        self.retrieval = Retrieval(run, tracer)
        self.loop = ToolLoop(self)

    async def stage(self, stage: PlanStage, variables: dict[str, Any]) -> Any:
        assert stage.role is not None
        tier, prompt, params = stage.role.model_tier, stage.role.prompt, {}
        reasoning = stage.role.reasoning
        if stage.arms:
            arm = await self.arms.select(stage)
            tier, prompt, params = arm.model_tier, arm.prompt, dict(arm.params)
            reasoning = arm.reasoning
        # Loaded once per execution of the stage: every attempt and iteration carries them.
        lessons = (
            await self.lessons.load(stage, prompt, variables)
            if self.lessons is not None
            else Lessons()
        )
        knowledge = await self.retrieval.for_stage(stage, variables)
        ladder = [tier]
        if stage.escalate:
            tiers = self.run.plan.tier_ladder
            ladder += tiers[tiers.index(tier) + 1 :]
        if stage.loop is None:
            return await self.attempts(
                stage, ladder, prompt, params, variables, lessons, knowledge, reasoning
            )
        loop = stage.loop
        carried: dict[str, Any] = {}
        output: Any = None
        for num in range(1, loop.max_iterations + 1):
            if num > 1 and loop.backoff_s > 0:
                delay = min(loop.backoff_s * 2 ** (num - 2), loop.backoff_max_s)
                await workflow.sleep(
                    timedelta(seconds=delay),
                    summary=f"{stage.id}: loop backoff {delay:g}s before iteration {num}",
                )
            iteration = {
                "num": num,
                "is_first": num == 1,
                "is_last": num == loop.max_iterations,
                "carry_forward": carried,
            }
            # Carried fields are also variables by name (as in armature-agents 0.7.0).
            iter_vars = {**variables, **carried, loop.iteration_var: iteration}
            output = await self.attempts(
                stage, ladder, prompt, params, iter_vars, lessons, knowledge, reasoning
            )
            self.run.results[stage.id].iterations = num
            if loop.carry_forward is None:
                carried = dict(output) if isinstance(output, dict) else {"_result": output}
            elif isinstance(output, dict):
                carried = carry_paths(output, loop.carry_forward)
            if loop.until is not None and until_met(
                stage, "loop.until", loop.until, iter_vars, output
            ):
                break
        return output

    async def attempts(
        self,
        stage: PlanStage,
        ladder: list[str],
        prompt: str,
        params: dict[str, Any],
        variables: dict[str, Any],
        lessons: Lessons | None = None,
        knowledge: list[dict[str, Any]] | None = None,
        reasoning: PlanReasoning | None = None,
    ) -> Any:
        """Attempts on each tier of the ladder in turn, with the stage's backoff between them;
        each retry sees the previous attempt's error. The first valid output wins: valid by
        its schema, and with ``retrieve: {cite: true}`` citing only passages it was shown."""
        result = self.run.results[stage.id]
        last_error: str | None = None
        last_text: str | None = None
        kept: list[Any] = []  # a valid output that did not meet on_fail.loop.until
        provider_failed = False  # the last attempt's provider failed (not its output)
        doubtful: LLMCallResult | None = None  # the most confident low-confidence output
        for level, tier in enumerate(ladder):
            for attempt in range(1, stage.max_attempts + 1):
                self.run.count_execution(stage.id)
                if attempt > 1 and stage.backoff_s > 0:
                    delay = stage.backoff_s * 2 ** (attempt - 2)
                    if stage.backoff_max_s is not None:
                        delay = min(delay, stage.backoff_max_s)
                    await workflow.sleep(
                        timedelta(seconds=delay),
                        summary=f"{stage.id}: retry backoff {delay:g}s before attempt "
                        f"{result.attempts + 1} (tier {tier})",
                    )
                result.attempts += 1
                result.tier = tier
                result.escalated = level > 0
                call_vars = {
                    **variables,
                    "_retry_attempt": result.attempts - 1,
                    "_last_error": last_error,
                    "_last_result": last_text,
                }
                try:
                    llm = await self.call_model(
                        stage,
                        tier,
                        prompt,
                        params,
                        call_vars,
                        result.attempts,
                        lessons,
                        knowledge,
                        reasoning,
                    )
                except ProviderFailure as exc:
                    # The provider's budget for this call is spent: one failed attempt, which
                    # on_fail retries (and escalates) like an invalid output.
                    last_error, last_text, provider_failed = str(exc), None, True
                    continue
                provider_failed = False
                self.run.spend_tokens(stage.id, llm.prompt_tokens + llm.completion_tokens)
                llm = cited(stage, llm, self.retrieval.shown(stage, knowledge or []))
                unsure = confidence_shortfall(stage, llm)
                self.tracer.attempt(
                    stage,
                    llm,
                    call_vars,
                    result,
                    tier,
                    lessons.ids if lessons else (),
                    unsure,
                    [p["ref"] for p in knowledge or []],
                )
                if llm.simulated_quality is not None:
                    self.run.last_quality[stage.id] = llm.simulated_quality
                if unsure is not None:  # valid but not confident enough: retried like invalid
                    doubtful = more_confident(doubtful, llm)
                    last_error, last_text = unsure, llm.text[:2000]
                    continue
                if llm.valid:
                    until = stage.retry_until
                    if until is None or until_met(
                        stage, "on_fail.loop.until", until, call_vars, llm.output
                    ):
                        return llm.output
                    kept = [llm.output]
                    last_error = f"the until condition {until!r} is not met yet"
                    last_text = llm.text[:2000]
                    continue
                last_error, last_text = llm.error, llm.text[:2000]
        if kept:
            return kept[0]  # retries spent: the last valid output stands, as in 0.7.0
        if doubtful is not None:  # retries spent: the most confident output stands
            result.tier, result.escalated = doubtful.tier, doubtful.tier != ladder[0]
            if doubtful.simulated_quality is not None:
                self.run.last_quality[stage.id] = doubtful.simulated_quality
            return doubtful.output
        if provider_failed:
            raise StageFailure(
                "provider_error",
                f"stage {stage.id!r}: the model call failed after {result.attempts} "
                f"attempt(s) on tier(s) {ladder}: {last_error}",
            )
        raise StageFailure(
            "output_invalid",
            f"stage {stage.id!r}: output invalid after {result.attempts} attempt(s) on "
            f"tier(s) {ladder}: {last_error}",
        )

    async def call_model(
        self,
        stage: PlanStage,
        tier: str,
        prompt: str,
        params: dict[str, Any],
        variables: dict[str, Any],
        attempt: int,
        lessons: Lessons | None = None,
        knowledge: list[dict[str, Any]] | None = None,
        reasoning: PlanReasoning | None = None,
    ) -> LLMCallResult:
        """One attempt: the model call, and for a role with tools the turns of its tool loop
        (each tool call its own activity) until it answers or ``max_turns`` is spent
        (workflows/interpreter/tool_loop.py); with ``reasoning`` (reason_first), a private
        reasoning call first, whose text the answer's prompt carries and whose cost it counts
        (workflows/interpreter/reasoning.py)."""
        assert stage.role is not None
        names, upstream = self.run.context_keys.get(stage.id, ([], []))
        if stage.context_keys is not None:  # signature.input
            names = [k for k in names if k in stage.context_keys]
            upstream = [k for k in upstream if k in stage.context_keys]
        state = LoopState(
            stage_id=stage.id,
            tier=tier,
            prompt=prompt,
            params=params,
            variables=needed_variables(variables, prompt),
            attempt=attempt,
            lessons=list(lessons.texts) if lessons else [],
            knowledge=list(knowledge or []),
            facts=self.facts.block_for(stage),
            context=stage_context(variables, names, upstream, prompt, stage.depends_on),
            sim_seed=self.sim_seed(),
            judged_quality=self.judged_quality(stage),
        )
        if reasoning is None:
            return await self.loop.attempt(stage, state)
        reasoned = await reason(self, stage, reasoning, state)
        state.reasoning = reasoned.text
        return counted(await self.loop.attempt(stage, state), reasoned)

    async def cached_call(
        self, inp: LLMCallInput, *, start_to_close: timedelta, summary: str, what: str
    ) -> LLMCallResult:
        """``call_llm`` through the stage's answer cache (workflows/interpreter/cache.py)."""
        return await self.cache.call(
            inp, lambda: call_llm(inp, start_to_close=start_to_close, summary=summary, what=what)
        )

    def sim_seed(self) -> str | None:
        """The simulate provider's seed for this run: the run inputs' hash and the replicate
        number, so runs with the same inputs and replicate share their noise."""
        if not workflow.patched(SIM_SEED_FROM_INPUTS):
            return None
        if self._sim_seed is None:  # the inputs never change during a run: hash them once
            digest = hashlib.sha256(canonical_json(self.run.inputs).encode("utf-8")).hexdigest()
            self._sim_seed = f"{digest[:16]}/r{self.run.replicate}"
        return self._sim_seed

    def judged_quality(self, stage: PlanStage) -> float | None:
        """For a judge: the mean latent quality of its depends_on stages' simulated outputs."""
        assert stage.role is not None
        if stage.role.type != "judge" or not workflow.patched(JUDGE_SEES_JUDGED_QUALITY):
            return None
        known = [self.run.last_quality[d] for d in stage.depends_on if d in self.run.last_quality]
        return sum(known) / len(known) if known else None

    def evaluated_quality(self, stage: PlanStage) -> float | None:
        """For a stage's ``evaluate`` judge: the latent quality of the stage's simulated output."""
        if not workflow.patched(JUDGE_SEES_JUDGED_QUALITY):
            return None
        return self.run.last_quality.get(stage.id)


def cited(stage: PlanStage, llm: LLMCallResult, shown: list[str]) -> LLMCallResult:
    """A valid answer of a stage with ``retrieve: {cite: true}`` made invalid when it cites no
    passage it was shown (``shown``: in its prompt or by its ``retrieve`` tool calls), or one
    it was not (the error says which), so on_fail retries it."""
    if stage.retrieve is None or not stage.retrieve.cite or not llm.valid:
        return llm
    problem = citation_problem(llm.text, shown)
    if problem is None:
        return llm
    return llm.model_copy(update={"valid": False, "error": f"citations: {problem}", "output": None})


def carry_paths(output: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """The output's values at ``paths`` (dot paths into nested objects), nested the same way;
    a path the output lacks carries nothing (as in 0.7.0)."""
    carried: dict[str, Any] = {}
    for path in paths:
        value: Any = output
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            continue
        target = carried
        *parents, last = path.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return carried


def until_met(
    stage: PlanStage, field: str, expression: str, variables: dict[str, Any], output: Any
) -> bool:
    """An ``until`` expression over an output: the output's fields by name, ``output``, or
    the stage's own id (as armature-agents 0.7.0 specs write it: ``{{ draft.done }}``)."""
    names = {**variables, **(output if isinstance(output, dict) else {})}
    names.update({stage.id: output}, output=output, _result=output)
    try:
        return truth(evaluate(expression, names))
    except Exception as exc:  # jinja raises many types
        raise StageFailure("output_invalid", f"stage {stage.id!r}: {field} failed: {exc}") from exc
