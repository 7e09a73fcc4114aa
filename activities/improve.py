"""Improvement-loop activities: diagnose a spec and prepare candidate changes, score the
verification runs, and record the verified proposals in the store.

The ImproveWorkflow (workflows/improve.py) runs the verification itself, as child runs of the
interpreter; these activities do the file, store and statistics work it may not.
"""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.traces import store_for
from armature_temporal.errors import ArmatureError, SpecError
from armature_temporal.evals.cases import CasesError
from armature_temporal.improve.cases import CaseCheck, case_check, load_case_set
from armature_temporal.improve.decide import Scored, decide_round, gate_cases
from armature_temporal.improve.diagnose import diagnose
from armature_temporal.improve.edit import EditError, apply_changes, unified_diff
from armature_temporal.improve.effort import Spent, effort_of
from armature_temporal.improve.enrich import drop_trials, enrichment_candidates
from armature_temporal.improve.lanes import classify_at
from armature_temporal.improve.models import (
    Candidate,
    Diagnosis,
    EffortInput,
    ImproveInput,
    ImproveResult,
    ImproveRound,
    Prepared,
    Proposal,
    RecordInput,
    RoundEffort,
    Settled,
    SettleInput,
    Verification,
)
from armature_temporal.improve.pending import settle
from armature_temporal.improve.predict import failures, predictions, verify
from armature_temporal.improve.propose import candidates
from armature_temporal.improve.refine import history_of, parse_reply, refiner_messages, screen
from armature_temporal.improve.replay import left_out
from armature_temporal.runtime.hqs import run_hqs
from armature_temporal.runtime.llm import ProviderError, complete
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.knowledge import KNOWLEDGE_SURFACE
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.models import Spec
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.views import load_runs
from armature_temporal.views.report import RunTrace

__all__ = [
    "improve_effort",
    "improve_prepare",
    "improve_record",
    "improve_settle",
    "written_role_values",
]

#: Runs of the spec read from the store for a diagnosis (newest first).
HISTORY = 500


def written_role_values(spec: Spec) -> dict[str, dict[str, object]]:
    """Each LLM stage's editable role fields as the spec text writes them (absent: unset)."""
    values: dict[str, dict[str, object]] = {}
    for stage in spec.stages:
        if stage.role is None:
            continue
        role = stage.role.model_dump(exclude_unset=True)
        values[stage.id] = {
            k: role[k]
            for k in ("description", "model_tier", "temperature", "max_tokens")
            if k in role and role[k] is not None
        }
    return values


def _verification(store: TraceStore, plan_spec_hash: str, diag: Diagnosis) -> Verification:
    """The last applied change's predictions checked against this version's diagnosis (when
    this version is the one it made), and the drift score."""
    ever = store.ever_fixed(diag.spec_name)
    applied = store.last_applied(diag.spec_name)
    # Only a proposal whose record checks: a forged row's predictions must not steer a round.
    stored = store.stored_proposal(applied.proposal_id) if applied is not None else None
    proposal = stored.proposal if stored is not None and stored.trusted else None
    if proposal is None or applied is None or applied.spec_hash != plan_spec_hash:
        return verify(
            proposal_id=None,
            spec_hash=plan_spec_hash,
            predicted_fixes=[],
            predicted_regressions=[],
            before=failures(diag),
            diagnosis=diag,
            ever_fixed=ever,
        )
    return verify(
        proposal_id=proposal.id,
        spec_hash=plan_spec_hash,
        predicted_fixes=proposal.predicted_fixes,
        predicted_regressions=proposal.predicted_regressions,
        before=proposal.base_failures,
        diagnosis=diag,
        ever_fixed=ever,
    )


def _round_id() -> str:
    try:
        return activity.info().workflow_id or "improve-local"
    except RuntimeError:  # called outside an activity (tests)
        return "improve-local"


def _prepare(inp: ImproveInput) -> Prepared:
    spent = Spent()
    prepared = _prepare_round(inp, spent)
    if spent.plan is not None:  # the effort so far (improve/effort.py); a stop's is final
        status = prepared.stop.status if prepared.stop is not None else "verifying"
        effort = effort_of(spent.plan, spent, status, proposals_tried=len(prepared.candidates))
        stop = prepared.stop.model_copy(update={"effort": effort}) if prepared.stop else None
        prepared = prepared.model_copy(update={"effort": effort, "stop": stop})
    diag = prepared.diagnosis or (prepared.stop.diagnosis if prepared.stop else None)
    if diag is None:
        return prepared
    check = prepared.verification
    store_for(database_url()).save_round(
        ImproveRound(
            id=_round_id(),
            spec_name=diag.spec_name,
            spec_hash=diag.spec_hash,
            created_at=datetime.now(UTC).isoformat(),
            status=prepared.stop.status if prepared.stop is not None else "verifying",
            mean_hqs=diag.mean_hqs,
            runs=diag.runs,
            verification=check,
            drift=check.drift if check is not None else None,
            # A stop's effort is final; a verifying round's is kept when improve_effort has
            # counted its runs (until then the row says "not reported", never 0 runs).
            effort=prepared.effort if prepared.stop is not None else None,
        )
    )
    return prepared


def _prepare_round(inp: ImproveInput, spent: Spent) -> Prepared:
    base_dir = Path(inp.spec_path).parent
    try:
        loaded = load_spec_text(inp.spec_text, inp.spec_path, base_dir=base_dir)
        plan = compile_spec(loaded)
    except SpecError as exc:
        raise ApplicationError(
            f"the spec given to the improvement loop is invalid: {exc}",
            type="invalid_spec",
            non_retryable=True,
        ) from None
    spent.plan = plan
    si = plan.self_improvement
    if si is None or not si.editable_surfaces:
        return Prepared(
            stop=ImproveResult(
                status="no_candidates",
                detail=f"{plan.name}: no self_improvement.editable_surfaces, so there is "
                "nothing the loop may change; list some, e.g. [draft.model_tier]",
            )
        )
    store = store_for(database_url())
    runs = load_runs(store, spec=plan.name, limit=HISTORY)
    diag = diagnose(plan, runs)
    check = _verification(store, plan.spec_hash, diag) if diag.runs >= si.min_traces else None
    drifting = check is not None and check.drift > si.drift_threshold
    if diag.runs < si.min_traces:
        return Prepared(
            stop=ImproveResult(
                status="too_few_traces",
                detail=f"{diag.runs} finished runs of this version of {plan.name!r} (spec_hash "
                f"{plan.spec_hash[:12]}); the loop waits for min_traces = {si.min_traces}",
                diagnosis=diag,
            )
        )
    if diag.mean_hqs is not None and diag.mean_hqs >= si.target_hqs and not drifting:
        return Prepared(
            stop=ImproveResult(
                status="at_target",
                detail=f"mean HQS {diag.mean_hqs:.3f} over {diag.runs} runs is at or above "
                f"target_hqs {si.target_hqs}; nothing to do",
                diagnosis=diag,
                verification=check,
            ),
            verification=check,
        )
    current = written_role_values(loaded.spec)
    changes = (
        []
        if inp.refiner == "only"
        else candidates(plan, diag, si.editable_surfaces, current=current, limit=inp.max_candidates)
    )
    if len(changes) == inp.max_candidates:  # effort: what the limit left out
        every = candidates(plan, diag, si.editable_surfaces, current=current, limit=10_000)
        spent.left_out += len(every) - len(changes)
    found: list[Candidate] = []
    for change in changes:
        try:
            text = apply_changes(inp.spec_text, [change], filename=inp.spec_path, base_dir=base_dir)
            new_plan = compile_spec(load_spec_text(text, inp.spec_path, base_dir=base_dir))
        except (EditError, SpecError) as exc:
            activity.logger.warning("candidate %s dropped: %s", change.surface, exc)
            continue
        found.append(
            Candidate(
                change=change,
                spec_text=text,
                plan=new_plan,
                diff=unified_diff(inp.spec_text, text, inp.spec_path),
            )
        )
    notes: list[str] = []
    if KNOWLEDGE_SURFACE in si.editable_surfaces and inp.refiner != "only":
        try:
            enriched, enrich_notes = enrichment_candidates(
                store,
                loaded.spec,
                plan,
                inp.spec_text,
                inp.spec_path,
                runs,
                limit=inp.max_candidates,
                round_id=_round_id(),
            )
        except (EditError, SpecError, ArmatureError) as exc:
            enriched, enrich_notes = [], [f"enrichment dropped from this round: {exc}"]
        found += enriched
        notes += enrich_notes
    if inp.refiner == "only" or si.refiner_tier is not None:
        refined, refine_notes = _refined(inp, plan, diag, runs, store, current, found, spent)
        found += refined
        notes += refine_notes
    # A frontier search may start from the current spec alone (GEPA starts from its seed).
    searching = (
        si.cases is not None
        and si.search_runs > 0
        and (inp.refiner == "only" or si.refiner_tier is not None)
    )
    if not found and not searching:
        return Prepared(
            stop=ImproveResult(
                status="no_candidates",
                detail=f"mean HQS {diag.mean_hqs if diag.mean_hqs is not None else '—'} over "
                f"{diag.runs} runs, but the {_proposers(inp, si.refiner_tier)} point at no "
                f"change on the editable surfaces {si.editable_surfaces}",
                diagnosis=diag,
                verification=check,
                notes=notes,
            ),
            verification=check,
            notes=notes,
        )
    if len(diag.sample_inputs) < 2:
        drop_trials(store, found)  # nothing will verify them
        return Prepared(
            stop=ImproveResult(
                status="too_few_traces",
                detail=f"{len(diag.sample_inputs)} distinct input(s) among the recent runs of "
                f"{plan.name!r}; verifying a change needs at least 2 different inputs",
                diagnosis=diag,
                verification=check,
            ),
            verification=check,
        )
    pool = diag.sample_inputs
    wanted = inp.verify_runs or si.verify_runs
    inputs = [pool[i % len(pool)] for i in range(wanted)]
    try:
        cases = load_case_set(plan, inp.spec_path)
    except CasesError as exc:
        raise ApplicationError(
            f"self_improvement.cases of {plan.name!r} cannot be run: {exc}",
            type="invalid_cases",
            non_retryable=True,
        ) from None
    return Prepared(
        plan=plan,
        diagnosis=diag,
        candidates=found,
        inputs=inputs,
        verification=check,
        notes=notes,
        cases=cases,
    )


def _proposers(inp: ImproveInput, refiner_tier: str | None) -> str:
    if inp.refiner == "only":
        return "refiner's proposals"
    return "traces and the refiner" if refiner_tier is not None else "traces"


def _refined(
    inp: ImproveInput,
    plan: Plan,
    diag: Diagnosis,
    runs: list[RunTrace],
    store: TraceStore,
    current: dict[str, dict[str, object]],
    taken: list[Candidate],
    spent: Spent | None = None,
) -> tuple[list[Candidate], list[str]]:
    """The LLM refiner's candidates (improve/refine.py) and notes on what it dropped. A
    provider failure drops the refiner's part of the round, not the round. ``spent`` gets
    the refiner's tier, its call's tokens and the proposals its K left out."""
    si = plan.self_improvement
    assert si is not None
    spent = spent if spent is not None else Spent()
    name = si.refiner_tier or plan.tier_ladder[-1]
    spent.refiner_tier = name
    k = inp.refiner_proposals or si.refiner_proposals
    rounds = store.rounds(plan.name)
    history = history_of(  # rows whose MAC checks: a forged row's text never reaches a prompt
        store.trusted_proposals(spec=plan.name, limit=1000),
        [c for r in rounds if r.verification for c in r.verification.verified_fixes],
        [c for r in rounds if r.verification for c in r.verification.missed_predictions],
    )
    rules = [c.change for c in taken]
    messages = refiner_messages(plan, diag, si.editable_surfaces, runs, history, rules, k)
    try:
        answer = asyncio.run(
            complete(
                plan.tiers[name],
                messages,
                seed=f"refiner/{plan.spec_hash}",
                role_type="worker",
                output_mode="json",
                output_schema=None,
                temperature=0.2,
                # The simulator's world (real providers ignore it): the simulated refiner
                # states a pitfall's lesson only where the transcripts show its symptom.
                pitfalls=[p for s in plan.stages if s.simulate for p in s.simulate.pitfalls],
            )
        )
    except ProviderError as exc:
        return [], [f"the refiner (tier {name!r}) failed, so only the rules proposed: {exc}"]
    spent.refiner_tokens += answer.prompt_tokens + answer.completion_tokens
    parsed, notes = parse_reply(answer.text)
    kept, dropped = screen(
        parsed,
        spec_text=inp.spec_text,
        spec_path=inp.spec_path,
        plan=plan,
        surfaces=si.editable_surfaces,
        current=current,
        history=history,
        taken=rules,
        k=k,
    )
    for note in notes + dropped:
        activity.logger.info("%s", note)
    spent.left_out += sum("left out: K =" in note for note in dropped)  # improve/refine.py
    return kept, notes + dropped


@activity.defn(name="improve_prepare")
async def improve_prepare(inp: ImproveInput) -> Prepared:
    """Diagnose the spec from the store; stop, or return candidate changes to verify."""
    return await asyncio.to_thread(_prepare, inp)


def _score(*versions: list[str]) -> list[list[float | None]]:
    """Each version's runs' HQS, scored as :func:`_scored` does (memory CI and fine-tune use
    it)."""
    return [scored.hqs for scored in _scored(*versions)]


def _scored(*versions: list[str], ladder: dict[str, int] | None = None) -> list[Scored]:
    """Each version's verification runs (lists aligned by pair index), scored: each run's HQS
    from its records (None: it did not finish), and its cost in USD and in tier units (each
    model attempt counts its tier's 1-based position on ``ladder``).

    HQS is taken without its latency component: that one compares a run with its own
    version's median, and the two sides' medians come from different populations (production
    history vs. the candidate's own concurrent runs). Pair *i* of every version is scored over
    the same stages: what any of them did not execute (held behind a gate a verification run
    never approves) is left out of all (:func:`~armature_temporal.improve.replay.left_out`).
    """
    store = store_for(database_url())
    records = [[store.records(run_id) for run_id in run_ids] for run_ids in versions]
    skip = left_out(records)
    return [_score_runs(runs, skip, ladder or {}) for runs in records]


def _score_runs(
    runs: list[list[TraceRecord]], skip: list[frozenset[str]], ladder: dict[str, int]
) -> Scored:
    scores: list[float | None] = []
    usd: list[float] = []
    units: list[float] = []
    for records, leave in zip(runs, skip, strict=False):
        attempts = [r for r in records if r.kind == "attempt"]
        usd.append(sum(r.cost_usd for r in attempts))
        units.append(float(sum(ladder.get(r.tier or "", 1) for r in attempts)))
        if not any(r.kind == "run_end" for r in records):
            scores.append(None)
            continue
        scores.append(run_hqs(records, None, left_out=leave).hqs)
    return Scored(hqs=scores, usd=usd, units=units)


def _record(inp: RecordInput) -> list[Proposal]:
    """Score the runs, decide the round (:func:`~armature_temporal.improve.decide.decide_round`)
    and keep a proposal per candidate, with its predictions and its review lane."""
    prepared = inp.prepared
    plan = prepared.plan
    assert plan is not None
    assert prepared.diagnosis is not None
    ladder = {t: i + 1 for i, t in enumerate(plan.tier_ladder)}
    base, *scored = _scored(inp.baseline_runs, *inp.candidate_runs, ladder=ladder)
    judged = decide_round(plan, [c.change for c in prepared.candidates], base, scored)
    judged = gate_cases(judged, _case_checks(prepared, inp.case_verdicts))
    before = sorted(failures(prepared.diagnosis))
    proposals: list[Proposal] = []
    for k, (candidate, j) in enumerate(zip(prepared.candidates, judged, strict=True)):
        fixes, risks = predictions(candidate.change, prepared.diagnosis)
        if candidate.predicted_fixes is not None:  # the refiner's own, falsifiable as well
            fixes = candidate.predicted_fixes
            risks = candidate.predicted_regressions or []
        lane, reasons = classify_at(inp.spec_path, inp.spec_text, candidate.spec_text)
        digest = hashlib.sha256(f"{inp.improve_run_id}/{k}".encode()).hexdigest()[:10]
        proposals.append(
            Proposal(
                id=f"{plan.name}-p{digest}",
                spec_name=plan.name,
                improve_run_id=inp.improve_run_id,
                created_at=inp.created_at,
                base_spec_hash=plan.spec_hash,
                candidate_spec_hash=candidate.plan.spec_hash,
                changes=[*candidate.ancestry, candidate.change],
                baseline_hqs=j.baseline_hqs,
                candidate_hqs=j.candidate_hqs,
                delta=j.delta,
                ci_low=j.ci_low,
                ci_high=j.ci_high,
                verdict=j.verdict,
                detail=j.detail,
                diff=candidate.diff,
                spec_text=candidate.spec_text,
                base_spec_text=inp.spec_text,
                test=j.test,
                predicted_fixes=fixes,
                predicted_regressions=risks,
                base_failures=before,
                lane=lane,
                lane_reasons=reasons,
            )
        )
    store = store_for(database_url())
    store.save_proposals(proposals)
    drop_trials(store, prepared.candidates)  # enrichment's trial collections are spent
    verified = any(p.verdict == "verified" for p in proposals)
    store.set_round_status(inp.improve_run_id, "proposed" if verified else "nothing_better")
    return proposals


def _case_checks(
    prepared: Prepared, verdicts: list[list[list[bool | None]]]
) -> list[CaseCheck | None]:
    """Each candidate's cases against the current spec's (None each: no cases were run)."""
    cases = prepared.cases
    if cases is None or len(verdicts) != len(prepared.candidates) + 1:
        return [None] * len(prepared.candidates)
    base, *rest = verdicts
    return [case_check(cases.path, cases.descriptions, base, mine) for mine in rest]


@activity.defn(name="improve_record")
async def improve_record(inp: RecordInput) -> list[Proposal]:
    """Score the verification runs from the store, decide each candidate, keep proposals."""
    return await asyncio.to_thread(_record, inp)


def _settle(inp: SettleInput) -> Settled:
    store = store_for(database_url())
    return settle(Path(inp.spec_path), inp.spec_text, inp.proposals, store)


@activity.defn(name="improve_settle")
async def improve_settle(inp: SettleInput) -> Settled:
    """Apply the best verified auto-lane change (under auto_apply) or write the best verified
    review-lane one to ``<spec>.pending.yaml``; never the live spec for the review lane."""
    return await asyncio.to_thread(_settle, inp)


def _effort(inp: EffortInput) -> RoundEffort:
    """The round's effort with its spend counted from the store, kept on its round row."""
    store = store_for(database_url())
    runs, tokens = store.round_spend(inp.round_id)
    effort = inp.effort.model_copy(
        update={
            "proposals_tried": inp.proposals_tried,
            "runs": runs,
            "tokens": tokens + inp.effort.refiner_tokens,
        }
    )
    store.set_round_effort(inp.round_id, effort)
    return effort


@activity.defn(name="improve_effort")
async def improve_effort(inp: EffortInput) -> RoundEffort:
    """Count the runs and tokens a round's verification spent; keep its effort report."""
    return await asyncio.to_thread(_effort, inp)
