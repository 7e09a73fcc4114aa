"""Experience activities: the critic's verdict on one stage, and a learning round's two
store-side steps — retire promoted heuristics whose stage left the spec, distil and admit
lessons, then choose what to replay-test: quarantined heuristics, then promoted ones last
verified more than ``experience.reverify_after_days`` ago (``learn_prepare``); and score the
replays and decide (``learn_record``).

The LearnWorkflow (workflows/learn.py) runs the replays itself, as child runs of the
interpreter in verification mode; these activities do the store, model and statistics work.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.improve import _score
from activities.traces import store_for
from armature_temporal.errors import SpecError
from armature_temporal.experience.admit import admit, rescreen
from armature_temporal.experience.critic import (
    CRITIC_SCHEMA,
    CritiqueInput,
    CritiqueResult,
    critic_messages,
    output_text,
    read_critique,
)
from armature_temporal.experience.distill import (
    DistilledLesson,
    distill_stage,
    distiller_tier,
    gather,
    learnable,
    split,
)
from armature_temporal.experience.embeddings import get_embedder
from armature_temporal.experience.learning import (
    AdmittedLesson,
    LearnInput,
    LearnPrepared,
    LearnRecordInput,
    LearnResult,
    Rescreened,
    StaleRetirement,
)
from armature_temporal.experience.models import Heuristic, HeuristicError
from armature_temporal.experience.verify import Decision, PairedScores, decide
from armature_temporal.improve.replay import replay_inputs
from armature_temporal.runtime.llm import ProviderError, complete
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.views import load_runs
from armature_temporal.views.report import RunTrace

__all__ = [
    "critique",
    "last_verified",
    "learn_prepare",
    "learn_record",
    "recent_inputs",
    "retire_stale",
]

#: memory CI's ``by`` in heuristic events.
BY = "memory-ci"
#: The learning round's ``by`` when it retires a heuristic whose stage left the spec.
BY_ROUND = "learn"


def _provider_failure(exc: ProviderError, what: str) -> ApplicationError:
    return ApplicationError(
        f"{what}: {exc}", type=f"provider_{exc.kind}", non_retryable=not exc.retryable
    )


@activity.defn(name="critique")
async def critique(inp: CritiqueInput) -> CritiqueResult:
    """Score one stage's output 0–10 with evidence (see experience/critic.py)."""
    if inp.tier.provider == "simulate":
        from armature_temporal.runtime.simulate import simulate_critique

        sim = simulate_critique(
            seed=inp.seed,
            output_text=output_text(inp.output),
            latent_quality=inp.latent_quality,
            pitfalls=inp.pitfalls,
            critic_quality=inp.tier.quality,
        )
        return CritiqueResult(
            score=sim.score,
            evidence=list(sim.evidence),
            critic_tier=inp.tier.name,
            model="simulate",
        )
    from armature_temporal.runtime.parsing import parse_output

    try:
        answer = await complete(
            inp.tier,
            critic_messages(inp.task, inp.output),
            seed=inp.seed,
            role_type="judge",
            output_mode="json",
            output_schema=CRITIC_SCHEMA,
            temperature=0.0,
        )
    except ProviderError as exc:
        raise _provider_failure(exc, f"critic tier {inp.tier.name!r}") from None
    parsed = parse_output(answer.text, "json", CRITIC_SCHEMA)
    read = read_critique(parsed.value, inp.output)
    if read is None:
        raise ApplicationError(
            f"critic tier {inp.tier.name!r} gave no score for stage {inp.stage_id!r}: "
            f"{parsed.error or 'no numeric score'}",
            type="output_invalid",
        )
    return CritiqueResult(
        score=read[0],
        evidence=read[1],
        critic_tier=inp.tier.name,
        model=answer.model,
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
        cost_usd=answer.cost_usd,
        latency_ms=answer.latency_ms,
    )


def _plan(inp: LearnInput) -> Plan:
    try:
        spec = load_spec_text(inp.spec_text, inp.spec_path, base_dir=Path(inp.spec_path).parent)
        return compile_spec(spec)
    except SpecError as exc:
        raise ApplicationError(
            f"the spec given to the learning round is invalid: {exc}",
            type="invalid_spec",
            non_retryable=True,
        ) from None


def recent_inputs(runs: list[RunTrace], wanted: int) -> list[dict[str, Any]]:
    """Distinct inputs of the newest finished real runs (at most ``wanted``), in the order of
    their canonical JSON: which input gets which replicate number (simulator seed) then does
    not depend on the order concurrent runs happened to start in. A run in which a gate was
    rejected is never replayed (:func:`~armature_temporal.improve.replay.rejected`)."""
    found: dict[str, dict[str, Any]] = {}
    for run in sorted(runs, key=lambda r: r.started_at, reverse=True):
        if run.verification or run.finished_at is None or len(found) >= wanted:
            continue
        value = replay_inputs(run)
        if value is not None:
            found.setdefault(json.dumps(value, sort_keys=True, default=str), value)
    return [found[key] for key in sorted(found)]


def _admit_all(
    store: TraceStore, plan: Plan, lessons: list[DistilledLesson], now: str
) -> list[AdmittedLesson]:
    assert plan.experience is not None
    embedder = get_embedder(plan.experience.embedding_model)
    admitted: list[AdmittedLesson] = []
    for lesson in lessons:
        got = admit(
            store,
            spec_name=plan.name,
            stage_id=lesson.stage_id,
            text=lesson.text,
            kind=lesson.kind,
            source="distilled",
            provenance=lesson.provenance,
            by="distiller",
            embedder=embedder,
            now=now,
        )
        admitted.append(
            AdmittedLesson(
                heuristic_id=got.heuristic.id,
                stage_id=lesson.stage_id,
                text=lesson.text,
                kind=lesson.kind,
                outcome=got.outcome,
                merged_into=got.merged_into,
                findings=[f"{f.category} ({f.rule}): {f.text}" for f in got.findings],
                pitfall_id=lesson.pitfall_id,
            )
        )
    return admitted


def _rescreen(store: TraceStore, plan: Plan) -> list[Rescreened]:
    """Today's immune scan over the spec's waiting and promoted heuristics (:func:`rescreen`)."""
    return [
        Rescreened(
            heuristic_id=a.heuristic.id,
            text=a.heuristic.text,
            status="retired" if a.heuristic.status == "retired" else "rejected",
            findings=[f"{f.category} ({f.rule}): {f.text}" for f in a.findings],
        )
        for a in rescreen(store, plan.name)
    ]


def _rescreen_note(rescreened: list[Rescreened]) -> str:
    if not rescreened:
        return ""
    return f"; {len(rescreened)} flagged by today's immune scan (never replayed)"


def retire_stale(store: TraceStore, plan: Plan, learn_run_id: str) -> list[StaleRetirement]:
    """Retire (by ``learn``) each promoted heuristic whose stage is no LLM stage of the plan
    any more (gone, or now another kind); spec-wide ones (stage None) always stay."""
    kinds = {s.id: s.kind for s in plan.stages}
    retired: list[StaleRetirement] = []
    for h in store.heuristics(plan.name, status="promoted"):
        if h.stage_id is None or kinds.get(h.stage_id) == "llm":
            continue
        where = (
            f"spec {plan.name!r} has no stage {h.stage_id!r} any more"
            if h.stage_id not in kinds
            else f"stage {h.stage_id!r} of spec {plan.name!r} is a {kinds[h.stage_id]} stage now, "
            "not an LLM stage"
        )
        reason = f"{where}, so no prompt can carry it"
        try:
            store.set_heuristic_status(
                h.id,
                "retired",
                by=BY_ROUND,
                reason=reason,
                figures={"stage_id": h.stage_id, "learn_run_id": learn_run_id},
            )
        except HeuristicError:  # a person moved it meanwhile
            continue
        retired.append(StaleRetirement(heuristic_id=h.id, stage_id=h.stage_id, reason=reason))
    return retired


def last_verified(store: TraceStore, h: Heuristic) -> str:
    """When ``h`` was last shown to help: its newest memory-CI event or promotion by a
    person (ISO time); its ``updated_at`` if it has neither."""
    times = [
        e.at
        for e in store.heuristic_events(h.id)
        if e.by == BY or (e.by.startswith("person:") and e.to_status == "promoted")
    ]
    return max(times, key=_instant) if times else h.updated_at


def _instant(at: str) -> datetime:
    when = datetime.fromisoformat(at)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _due(store: TraceStore, plan: Plan, now: datetime) -> list[tuple[str, str]]:
    """(id, last verified) of the promoted heuristics due for re-verification, oldest
    verification first (none when ``reverify_after_days`` is 0)."""
    assert plan.experience is not None
    days = plan.experience.reverify_after_days
    if days == 0:
        return []
    cutoff = now - timedelta(days=days)
    found = [
        (h.id, last_verified(store, h)) for h in store.heuristics(plan.name, status="promoted")
    ]
    due = [(hid, at) for hid, at in found if _instant(at) < cutoff]
    return sorted(due, key=lambda d: (_instant(d[1]), d[0]))


def _choose_tests(
    store: TraceStore, plan: Plan, inp: LearnInput, runs: list[RunTrace], now: datetime
) -> tuple[list[str], list[str], list[tuple[str, str]], list[dict[str, Any]]]:
    """(baseline promoted ids, quarantined ids to test oldest first, promoted (id, last
    verified) to re-verify in the slots of ``max_tests`` left, replay inputs)."""
    assert plan.experience is not None
    promoted = [h.id for h in store.heuristics(plan.name, status="promoted")]
    waiting = sorted(
        store.heuristics(plan.name, status="quarantined"), key=lambda h: (h.created_at, h.id)
    )
    tests = [h.id for h in waiting[: inp.max_tests]]
    reverify = _due(store, plan, now)[: inp.max_tests - len(tests)]
    wanted = inp.verify_runs or plan.experience.verify_runs
    pool = recent_inputs(runs, wanted)
    inputs = [pool[i % len(pool)] for i in range(wanted)] if len(pool) >= 2 else []
    return promoted, tests, reverify, inputs


@activity.defn(name="learn_prepare")
async def learn_prepare(inp: LearnInput) -> LearnPrepared:
    """Distil the stages' recent trajectories into lessons, admit them, and choose the
    quarantined heuristics and recent inputs memory CI replays."""
    plan = _plan(inp)
    config = plan.experience
    if config is None:
        stop = LearnResult(
            status="no_experience",
            spec_name=plan.name,
            detail=f"{plan.name}: no experience: section, so nothing is learnt; add one, e.g."
            "\n  experience:\n    enabled: true",
        )
        return LearnPrepared(stop=stop)
    if not config.enabled:
        stop = LearnResult(
            status="disabled",
            spec_name=plan.name,
            detail=f"{plan.name}: experience.enabled is false; set it to true to learn",
        )
        return LearnPrepared(stop=stop)
    store = store_for(database_url())
    round_id = activity.info().workflow_id or activity.info().activity_id
    retired = await asyncio.to_thread(retire_stale, store, plan, round_id)
    runs = await asyncio.to_thread(load_runs, store, spec=plan.name, limit=inp.history)
    trajectories = gather(plan, runs)
    tier = plan.tiers[distiller_tier(plan)]
    lessons: list[DistilledLesson] = []
    scored: dict[str, int] = {}
    for stage in learnable(plan):
        successes, failures = split(trajectories.get(stage.id, []))
        scored[stage.id] = len(successes) + len(failures)
        try:
            lessons += await distill_stage(
                stage, tier, successes, failures, seed=f"{round_id}/{stage.id}/distill"
            )
        except ProviderError as exc:
            raise _provider_failure(exc, f"distiller tier {tier.name!r}") from None
    now = datetime.now(UTC)
    admitted = await asyncio.to_thread(_admit_all, store, plan, lessons, now.isoformat())
    # Before anything is replayed: today's scanner over what waits and what is promoted.
    rescreened = await asyncio.to_thread(_rescreen, store, plan)
    baseline, tests, reverify, inputs = await asyncio.to_thread(
        _choose_tests, store, plan, inp, runs, now
    )
    if not (tests or reverify) or not inputs:
        why = (
            "no quarantined heuristic waits for a replay test and no promoted one is due for "
            f"re-verification (experience.reverify_after_days: {config.reverify_after_days})"
            if not (tests or reverify)
            else "fewer than 2 distinct inputs among the recent runs; a replay test needs 2"
        )
        gone = f"; {len(retired)} retired (stage gone)" if retired else ""
        gone += _rescreen_note(rescreened)
        stop = LearnResult(
            status="nothing_to_test" if not (tests or reverify) else "too_few_traces",
            spec_name=plan.name,
            detail=f"{len(admitted)} lesson(s) distilled{gone}; {why}",
            admitted=admitted,
            retired=retired,
            rescreened=rescreened,
            trajectories=scored,
        )
        return LearnPrepared(stop=stop)
    return LearnPrepared(
        plan=plan,
        admitted=admitted,
        baseline=baseline,
        tests=tests,
        reverify=[hid for hid, _ in reverify],
        last_verified=dict(reverify),
        retired=retired,
        rescreened=rescreened,
        inputs=inputs,
        trajectories=scored,
    )


def _record(inp: LearnRecordInput) -> LearnResult:
    prepared = inp.prepared
    assert prepared.plan is not None
    store = store_for(database_url())
    # Re-verification: the promoted set without the heuristic (baseline) against the promoted
    # set (candidate: the round's baseline runs). None when the workflow ran no such replays.
    checks = len(inp.reverify_runs) == len(prepared.reverify) > 0
    rechecks = inp.reverify_runs if checks else []
    base, *scores = _score(inp.baseline_runs, *inp.candidate_runs, *rechecks)
    tests = [
        PairedScores(
            heuristic_id=hid,
            baseline=base,
            candidate=score,
            baseline_runs=inp.baseline_runs,
            candidate_runs=runs,
        )
        for hid, runs, score in zip(
            prepared.tests, inp.candidate_runs, scores[: len(inp.candidate_runs)], strict=True
        )
    ]
    tests += [
        PairedScores(
            heuristic_id=hid,
            baseline=score,
            candidate=base,
            baseline_runs=runs,
            candidate_runs=inp.baseline_runs,
        )
        for hid, runs, score in zip(
            prepared.reverify if checks else [],
            rechecks,
            scores[len(inp.candidate_runs) :],
            strict=True,
        )
    ]
    decided = decide(tests)  # Holm-adjusted across all of them
    decisions = decided[: len(prepared.tests)]
    for d in decisions:
        current = store.heuristic(d.heuristic_id)
        # A retried activity, or a person who decided meanwhile: nothing to change.
        if current is None or current.status != "quarantined":
            continue
        store.set_heuristic_status(
            d.heuristic_id,
            d.verdict,
            by=BY,
            reason=d.reason,
            figures={**d.figures, "learn_run_id": inp.learn_run_id},
        )
    rechecked = [_reverified(store, inp, d) for d in decided[len(prepared.tests) :]]
    promoted = sum(1 for d in decisions if d.verdict == "promoted")
    detail = (
        f"{promoted} of {len(decisions)} heuristics promoted after "
        f"{len(prepared.inputs)} paired replays each (Holm-adjusted across the "
        f"{len(decided)} tested)"
    )
    if rechecked:
        kept = sum(1 for d in rechecked if d.verdict == "reverified")
        gone = sum(1 for d in rechecked if d.verdict == "retired")
        detail += f"; {kept} of {len(rechecked)} promoted re-verified, {gone} retired"
        if open_ := len(rechecked) - kept - gone:
            detail += f", {open_} inconclusive (too few replays scored; tried again next round)"
    if prepared.retired:
        detail += f"; {len(prepared.retired)} retired (stage gone)"
    detail += _rescreen_note(prepared.rescreened)
    return LearnResult(
        status="learned",
        spec_name=prepared.plan.name,
        detail=f"{detail}; {len(prepared.admitted)} lesson(s) distilled",
        admitted=prepared.admitted,
        decisions=[*decisions, *rechecked],
        retired=prepared.retired,
        rescreened=prepared.rescreened,
        trajectories=prepared.trajectories,
    )


def _reverified(store: TraceStore, inp: LearnRecordInput, d: Decision) -> Decision:
    """A re-verified promoted heuristic: it stays (an event records the figures) or memory
    CI retires it; the decision as the round reports it."""
    kept = d.verdict == "promoted"
    since = inp.prepared.last_verified.get(d.heuristic_id)
    if d.figures.get("n", 0) < 2:
        # Too few replays reached the store (an outage, say): no evidence either way. It
        # stays promoted, nothing is recorded, and the next round is due to re-verify it.
        return d.model_copy(
            update={
                "verdict": "inconclusive",
                "reason": f"re-verification inconclusive, it stays promoted: {d.reason}",
            }
        )
    reason = (
        f"re-verified (last verified {since}): {d.reason}"
        if kept
        else f"re-verification (last verified {since}): "
        + d.reason.replace("not shown to help", "no longer shown to help")
    )
    figures = {
        **d.figures,
        "learn_run_id": inp.learn_run_id,
        "reverify": True,
        "last_verified_at": since,
    }
    current = store.heuristic(d.heuristic_id)
    done = any(
        e.figures.get("learn_run_id") == inp.learn_run_id
        for e in store.heuristic_events(d.heuristic_id)
    )
    # A retried activity, or a person who decided meanwhile: nothing to change.
    if current is not None and current.status == "promoted" and not done:
        if kept:
            store.record_heuristic_event(d.heuristic_id, by=BY, reason=reason, figures=figures)
        else:
            store.set_heuristic_status(
                d.heuristic_id, "retired", by=BY, reason=reason, figures=figures
            )
    return d.model_copy(
        update={
            "verdict": "reverified" if kept else "retired",
            "reason": reason,
            "figures": figures,
        }
    )


@activity.defn(name="learn_record")
async def learn_record(inp: LearnRecordInput) -> LearnResult:
    """Score the replays from the store; promote or reject each quarantined heuristic tested,
    keep or retire each promoted one re-verified."""
    return await asyncio.to_thread(_record, inp)
