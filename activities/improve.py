"""Improvement-loop activities: diagnose a spec and prepare candidate changes, score the
verification runs, and record the verified proposals in the store.

The ImproveWorkflow (workflows/improve.py) runs the verification itself, as child runs of the
interpreter; these activities do the file, store and statistics work it may not.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.traces import store_for
from armature_temporal.errors import SpecError
from armature_temporal.improve.decide import Scored, decide_round
from armature_temporal.improve.diagnose import diagnose
from armature_temporal.improve.edit import EditError, apply_changes, unified_diff
from armature_temporal.improve.models import (
    Candidate,
    ImproveInput,
    ImproveResult,
    Prepared,
    Proposal,
    RecordInput,
)
from armature_temporal.improve.propose import candidates
from armature_temporal.runtime.hqs import run_hqs
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.models import Spec
from armature_temporal.store.engine import database_url
from armature_temporal.views import load_runs

__all__ = ["improve_prepare", "improve_record", "written_role_values"]

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


def _prepare(inp: ImproveInput) -> Prepared:
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
    si = plan.self_improvement
    if si is None or not si.editable_surfaces:
        return Prepared(
            stop=ImproveResult(
                status="no_candidates",
                detail=f"{plan.name}: no self_improvement.editable_surfaces, so there is "
                "nothing the loop may change; list some, e.g. [draft.model_tier]",
            )
        )
    runs = load_runs(store_for(database_url()), spec=plan.name, limit=HISTORY)
    diag = diagnose(plan, runs)
    if diag.runs < si.min_traces:
        return Prepared(
            stop=ImproveResult(
                status="too_few_traces",
                detail=f"{diag.runs} finished runs of this version of {plan.name!r} (spec_hash "
                f"{plan.spec_hash[:12]}); the loop waits for min_traces = {si.min_traces}",
                diagnosis=diag,
            )
        )
    if diag.mean_hqs is not None and diag.mean_hqs >= si.target_hqs:
        return Prepared(
            stop=ImproveResult(
                status="at_target",
                detail=f"mean HQS {diag.mean_hqs:.3f} over {diag.runs} runs is at or above "
                f"target_hqs {si.target_hqs}; nothing to do",
                diagnosis=diag,
            )
        )
    changes = candidates(
        plan,
        diag,
        si.editable_surfaces,
        current=written_role_values(loaded.spec),
        limit=inp.max_candidates,
    )
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
    if not found:
        return Prepared(
            stop=ImproveResult(
                status="no_candidates",
                detail=f"mean HQS {diag.mean_hqs if diag.mean_hqs is not None else '—'} over "
                f"{diag.runs} runs, but the traces point at no change on the editable surfaces "
                f"{si.editable_surfaces}",
                diagnosis=diag,
            )
        )
    if len(diag.sample_inputs) < 2:
        return Prepared(
            stop=ImproveResult(
                status="too_few_traces",
                detail=f"{len(diag.sample_inputs)} distinct input(s) among the recent runs of "
                f"{plan.name!r}; verifying a change needs at least 2 different inputs",
                diagnosis=diag,
            )
        )
    pool = diag.sample_inputs
    wanted = inp.verify_runs or si.verify_runs
    inputs = [pool[i % len(pool)] for i in range(wanted)]
    return Prepared(plan=plan, diagnosis=diag, candidates=found, inputs=inputs)


@activity.defn(name="improve_prepare")
async def improve_prepare(inp: ImproveInput) -> Prepared:
    """Diagnose the spec from the store; stop, or return candidate changes to verify."""
    return await asyncio.to_thread(_prepare, inp)


def _score(run_ids: list[str]) -> list[float | None]:
    """Each run's HQS without its latency part (see :func:`_scored`); memory CI uses it."""
    return _scored(run_ids, {}).hqs


def _scored(run_ids: list[str], ladder: dict[str, int]) -> Scored:
    """Each verification run's HQS from its records (None: it did not finish), without the
    latency component: that one compares a run with its own version's median, and the two
    sides' medians come from different populations (production history vs. the candidate's
    own concurrent runs). Also each run's cost in USD and in tier units (each model attempt
    counts its tier's 1-based position on ``ladder``).
    """
    store = store_for(database_url())
    scores: list[float | None] = []
    usd: list[float] = []
    units: list[float] = []
    for run_id in run_ids:
        records = store.records(run_id)
        attempts = [r for r in records if r.kind == "attempt"]
        usd.append(sum(r.cost_usd for r in attempts))
        units.append(float(sum(ladder.get(r.tier or "", 1) for r in attempts)))
        if not any(r.kind == "run_end" for r in records):
            scores.append(None)
            continue
        scores.append(run_hqs(records, None).hqs)
    return Scored(hqs=scores, usd=usd, units=units)


def _record(inp: RecordInput) -> list[Proposal]:
    """Score the runs, decide the round (:func:`~armature_temporal.improve.decide.decide_round`)
    and keep a proposal per candidate."""
    prepared = inp.prepared
    plan = prepared.plan
    assert plan is not None
    ladder = {t: i + 1 for i, t in enumerate(plan.tier_ladder)}
    base = _scored(inp.baseline_runs, ladder)
    judged = decide_round(
        plan,
        [c.change for c in prepared.candidates],
        base,
        [_scored(runs, ladder) for runs in inp.candidate_runs],
    )
    proposals: list[Proposal] = []
    for k, (candidate, j) in enumerate(zip(prepared.candidates, judged, strict=True)):
        digest = hashlib.sha256(f"{inp.improve_run_id}/{k}".encode()).hexdigest()[:10]
        proposals.append(
            Proposal(
                id=f"{plan.name}-p{digest}",
                spec_name=plan.name,
                improve_run_id=inp.improve_run_id,
                created_at=inp.created_at,
                base_spec_hash=plan.spec_hash,
                candidate_spec_hash=candidate.plan.spec_hash,
                changes=[candidate.change],
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
            )
        )
    store_for(database_url()).save_proposals(proposals)
    return proposals


@activity.defn(name="improve_record")
async def improve_record(inp: RecordInput) -> list[Proposal]:
    """Score the verification runs from the store, decide each candidate, keep proposals."""
    return await asyncio.to_thread(_record, inp)
