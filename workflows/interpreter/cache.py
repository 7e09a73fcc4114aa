"""``AnswerCache``: the run path of a stage's answer cache (``cache:``; spec/caching.py).

Before a model call the local activity ``cache_lookup`` looks for a servable answer: exact (same
request key), then semantic (nearest earlier task of the partition above the threshold,
confirmed by ``verify_tier`` when one is set). A hit is the attempt: traced with
``data.cache`` = ``exact`` or ``semantic`` (and ``cache_entry``, ``similarity``,
``source_run``, ``saved_cost_usd``), cost 0, tokens 0, the lookup's latency. A miss calls the
model; a valid answer is kept (``cache_keep``) as a pending entry, and at the run's end
``cache_settle`` makes this run's entries servable, or withholds them with the reason: the run
did not complete, a gate or approval was rejected, or a judge (or the stage's ``evaluate``)
scored the stage below 0.5. Verification runs never serve or keep. A store that is down costs
the cache, never the run. Everything here is behind ``workflow.patched("stage-cache")``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.cache.keys import effective_temperature
from armature_temporal.cache.models import (
    LOW_SCORE,
    CacheHit,
    CacheKeep,
    CacheLookup,
    CacheProbe,
    CacheSettle,
)
from armature_temporal.runtime.hqs import judge_score
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult
from armature_temporal.spec.caching import StageCache
from armature_temporal.spec.compiler import DEFAULT_JUDGE_SCHEMA, PlanRole, PlanStage
from workflows.interpreter import spans
from workflows.interpreter.confidence import confidence_shortfall
from workflows.interpreter.state import RunContext

__all__ = ["STAGE_CACHE", "VERIFY_PROMPT", "AnswerCache"]

#: workflow.patched id: LLM stages consult and fill the answer cache.
STAGE_CACHE = "stage-cache"
_QUICK = RetryPolicy(maximum_attempts=3, maximum_interval=timedelta(seconds=5))
_TIMEOUT = timedelta(seconds=60)
#: The verify tier's prompt: does the earlier answer answer this task too?
VERIFY_PROMPT = (
    "An answer was written for an earlier task. Decide whether it answers the new task just as "
    "well: same question, same constraints, same facts asked for.\n\nEarlier task:\n"
    "{{ source_task }}\n\nNew task:\n{{ task }}\n\nEarlier answer:\n{{ answer }}\n\n"
    "Score 1 if the answer serves the new task as it stands, 0 if it does not."
)


class AnswerCache:
    """Lookup before, keep after, settle at the end; :meth:`call` wraps one model call."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.kept = 0
        #: (stage, entry) pairs served in this run: asked again, the stage refused that answer
        #: (its until, a check, its confidence), so the model answers instead.
        self.served: set[tuple[str, str]] = set()

    def modes(self, inp: LLMCallInput) -> tuple[StageCache, bool, bool] | None:
        """``(config, exact, semantic)`` for this call, or None when the cache is off for it:
        verification runs, tool loops, and stages that ask for neither."""
        stage = inp.stage
        if self.run.verification or stage.role is None or stage.role.tools or inp.tools:
            return None
        if inp.turn or inp.transcript or inp.approved:
            return None
        config = stage.cache or StageCache()
        exact = config.exact if config.exact is not None else effective_temperature(inp) == 0
        if not (exact or config.semantic):
            return None
        return config, exact, config.semantic

    async def call(
        self, inp: LLMCallInput, model_call: Callable[[], Awaitable[LLMCallResult]]
    ) -> LLMCallResult:
        """The call's answer: from the cache on a hit, else from ``model_call`` (kept)."""
        modes = self.modes(inp)
        if modes is None or not workflow.patched(STAGE_CACHE):
            return await model_call()
        config, exact, semantic = modes
        lookup = CacheLookup(
            call=inp,
            config=config,
            spec_hash=self.run.plan.spec_hash,
            exact=exact,
            semantic=semantic,
        )
        try:
            probe = await workflow.execute_local_activity(
                "cache_lookup",
                lookup,
                result_type=CacheProbe,
                start_to_close_timeout=_TIMEOUT,
                retry_policy=_QUICK,
                summary=f"{inp.stage.id}: cache lookup",
            )
        except (ActivityError, ApplicationError) as exc:
            workflow.logger.warning("cache lookup failed, calling the model: %s", exc)
            return await model_call()
        if probe.skipped is not None:
            return await model_call()
        hit = probe.hit
        verify = config.verify_tier
        if hit is not None and hit.kind == "semantic" and verify is not None:
            hit = hit if await self._confirmed(inp, verify, probe.task, hit) else None
        if hit is not None and (inp.stage.id, hit.entry_id) in self.served:
            hit = None  # served before in this run and refused: not again
        if hit is not None:
            self.served.add((inp.stage.id, hit.entry_id))
            spans.note({"armature.cache.hit": True, "armature.cache.kind": hit.kind})
            await self._record_hit(inp, probe, hit)
            return _served(inp, probe, hit)
        llm = await model_call()
        sure = confidence_shortfall(inp.stage, llm) is None  # a refused answer is never kept
        if llm.valid and sure and not llm.tool_calls and llm.needs_approval is None:
            await self._keep(inp, config, semantic, probe, llm)
        return llm

    async def _confirmed(self, inp: LLMCallInput, tier: str, task: str, hit: CacheHit) -> bool:
        """The verify tier's judgement of a semantic hit: a score of 0.5 or more confirms."""
        from workflows.interpreter.retries import ProviderFailure, call_llm

        judge = PlanStage(
            id=inp.stage.id,
            kind="llm",
            role=PlanRole(
                name="Cache verifier", type="judge", prompt=VERIFY_PROMPT, model_tier=tier
            ),
            output_mode="json",
            output_schema=DEFAULT_JUDGE_SCHEMA,
        )
        try:
            verdict = await call_llm(
                LLMCallInput(
                    run_id=inp.run_id,
                    stage=judge,
                    tier=self.run.plan.tiers[tier],
                    prompt_template=VERIFY_PROMPT,
                    variables={"task": task, "source_task": hit.source_task, "answer": hit.text},
                    attempt=inp.attempt,
                    spec_name=inp.spec_name,
                    sim_seed=f"{inp.sim_seed or inp.run_id}/cache-verify",
                ),
                start_to_close=timedelta(minutes=5),
                summary=f"{inp.stage.id}: verify a semantic cache hit (tier {tier})",
                what=f"{inp.stage.id}: cache verify",
            )
        except (ActivityError, ProviderFailure) as exc:
            workflow.logger.warning("cache verification failed, calling the model: %s", exc)
            return False
        score = judge_score(verdict.output) if verdict.valid else None
        return score is not None and score >= LOW_SCORE

    async def _record_hit(self, inp: LLMCallInput, probe: CacheProbe, hit: CacheHit) -> None:
        record = {
            "entry_id": hit.entry_id,
            "run_id": inp.run_id,
            "stage_id": inp.stage.id,
            "attempt_key": f"{self.run.executions}/{inp.attempt}",
            "kind": hit.kind,
            "similarity": hit.similarity,
            "task": probe.task,
        }
        try:
            await workflow.execute_local_activity(
                "cache_hit", record, start_to_close_timeout=_TIMEOUT, retry_policy=_QUICK
            )
        except (ActivityError, ApplicationError) as exc:  # the trace still has the hit
            workflow.logger.warning("cache hit not recorded: %s", exc)

    async def _keep(
        self,
        inp: LLMCallInput,
        config: StageCache,
        semantic: bool,
        probe: CacheProbe,
        llm: LLMCallResult,
    ) -> None:
        keep = CacheKeep(
            probe=probe.model_copy(update={"messages": []}),
            config=config,
            semantic=semantic,
            spec_name=self.run.plan.name,
            spec_hash=self.run.plan.spec_hash,
            stage_id=inp.stage.id,
            tier=inp.tier.name,
            run_id=inp.run_id,
            attempt=inp.attempt,
            output=llm.output,
            text=llm.text,
            model=llm.model,
            simulated_quality=llm.simulated_quality,
            cost_usd=llm.cost_usd,
            latency_ms=llm.latency_ms,
            prompt_tokens=llm.prompt_tokens,
            completion_tokens=llm.completion_tokens,
        )
        try:
            await workflow.execute_local_activity(
                "cache_keep", keep, start_to_close_timeout=_TIMEOUT, retry_policy=_QUICK
            )
            self.kept += 1
        except (ActivityError, ApplicationError) as exc:
            workflow.logger.warning("cache entry not kept: %s", exc)

    def verdict(self) -> CacheSettle:
        """Whether this run's entries may be served, and if not, why (see the module doc)."""
        run = self.run
        reason = None if run.state == "completed" else f"the run ended {run.state}"
        rejected = sorted(gate for gate, d in run.decisions.items() if d.decision == "reject")
        if reason is None and rejected:
            reason = f"rejected at {', '.join(rejected)}"
        withheld: dict[str, str] = {}
        for stage in run.plan.stages:
            result = run.results[stage.id]
            if stage.role is not None and stage.role.type == "judge":
                score = judge_score(result.output) if result.status == "completed" else None
                if score is not None and score < LOW_SCORE:
                    for judged in stage.depends_on:
                        withheld.setdefault(
                            judged, f"judge {stage.id} scored it {score:.2f} (< {LOW_SCORE})"
                        )
            mean = (result.evaluation or {}).get("mean")
            if isinstance(mean, int | float) and mean < LOW_SCORE:
                withheld.setdefault(stage.id, f"evaluate scored it {mean:.2f} (< {LOW_SCORE})")
        return CacheSettle(run_id=run.run_id, reason=reason, withheld=withheld)

    async def settle(self) -> None:
        """At the run's end: settle the entries this run kept (nothing to do if none)."""
        if not self.kept:
            return
        try:
            await workflow.execute_local_activity(
                "cache_settle",
                self.verdict(),
                start_to_close_timeout=_TIMEOUT,
                retry_policy=_QUICK,
                summary="settle this run's cache entries",
            )
        except (ActivityError, ApplicationError) as exc:  # pending entries are never served
            workflow.logger.warning("cache entries not settled: %s", exc)


def _served(inp: LLMCallInput, probe: CacheProbe, hit: CacheHit) -> LLMCallResult:
    """The attempt a hit stands for: the stored answer, no cost, no tokens."""
    return LLMCallResult(
        valid=True,
        output=hit.output,
        text=hit.text,
        model=hit.model,
        tier=inp.tier.name,
        latency_ms=probe.latency_ms,
        simulated_quality=hit.simulated_quality,
        confidence=hit.confidence,
        inputs_hash=probe.inputs_hash,
        messages=probe.messages,
        cache={
            "cache": hit.kind,
            "cache_entry": hit.entry_id,
            "similarity": hit.similarity,
            "source_run": hit.source_run,
            "saved_cost_usd": hit.saved_cost_usd,
        },
    )
