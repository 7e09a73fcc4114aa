"""Fine-tune loop activities: distil a spec's traces into training examples (or, with
``finetune.method: dpo``, preference pairs), train one LoRA adapter per stage (heartbeating: it
can take a while; ``finetune_train_dpo`` with the DPO loss), and keep the adapters in the store,
each decided against the base model and in paired runs of the spec
(:mod:`armature_temporal.finetune.verify`; the FinetuneWorkflow runs the paired runs).

Adapters are written under ``$ARMATURE_HOME/adapters/<spec>/<stage>/<round>`` on the worker
that trains; on a cluster make that directory shared storage (as for large payloads), so the
workers that serve ``provider: local`` tiers can load them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.improve import _score
from activities.traces import store_for
from armature_temporal.errors import SpecError
from armature_temporal.finetune.export import dpo_rows, sft_rows
from armature_temporal.finetune.models import (
    Adapter,
    Example,
    FinetuneInput,
    FinetunePrepared,
    FinetuneRecordInput,
    FinetuneResult,
    PairedRuns,
    PreferenceReport,
    PreferenceRequest,
    StageJob,
    TrainReport,
    TrainRequest,
)
from armature_temporal.finetune.preference import pairs_from_rows, split_pairs
from armature_temporal.finetune.reference import choose_reference
from armature_temporal.finetune.verify import (
    DEFAULT_MARGIN,
    Evidence,
    base_loss,
    decide_adapters,
    heldout_inputs,
    judged_stages,
    preference_heldout_inputs,
)
from armature_temporal.improve.propose import paired_verdict
from armature_temporal.improve.replay import replay_inputs
from armature_temporal.settings import armature_home
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.models import FinetuneConfig
from armature_temporal.store.engine import database_url
from armature_temporal.views import RunTrace, load_runs

__all__ = ["finetune_prepare", "finetune_record", "finetune_train", "finetune_train_dpo"]

#: Runs of the spec read from the store for training data (newest first).
HISTORY = 5000


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "x"


def _examples(rows: list[dict[str, Any]], stage: str) -> list[Example]:
    out = []
    for row in rows:
        messages = [
            {"role": str(m.get("role", "user")), "content": str(m.get("content") or "")}
            for m in row["messages"]
        ]
        out.append(
            Example(
                messages=messages,
                reply=row["output"],
                run_id=str(row.get("run_id") or ""),
                stage=stage,
            )
        )
    return out


def _continual_from(earlier: Adapter | None, base_model: str, stage: str) -> str | None:
    """The adapter a continual round trains its delta on: the stage's newest verified one,
    when it was trained on this base model and its directory is on this worker. When there
    is none, the round trains a fresh adapter and the worker's log says why."""
    why = None
    if earlier is None:
        why = "the stage has no verified adapter yet"
    elif earlier.base_model != base_model:
        why = f"its newest verified adapter was trained on {earlier.base_model}, not {base_model}"
    elif not (Path(earlier.path) / "adapter_config.json").is_file():
        why = f"its newest verified adapter's directory {earlier.path} is not on this worker"
    if why is not None:
        activity.logger.warning(
            "finetune.continual: stage %s trains a fresh adapter: %s", stage, why
        )
        return None
    assert earlier is not None
    return earlier.path


def _settings(ft: FinetuneConfig, out_dir: Path) -> dict[str, Any]:
    """The training settings a job takes from the spec's finetune block."""
    return {
        "out_dir": str(out_dir),
        "rank": ft.lora_rank,
        "max_steps": ft.max_steps,
        "eval_share": ft.eval_share,
        "use_dora": ft.use_dora,
    }


def _preference_job(
    plan: Plan,
    runs: list[RunTrace],
    stage: str,
    base: str,
    out_dir: Path,
    inputs_of: Callable[[str], dict[str, Any] | None],
    adapters: list[Adapter],
) -> tuple[StageJob | None, str]:
    """``finetune.method: dpo``: the stage's preference pairs (``dpo_rows``, as the bandit
    ladder's ``sao`` rung counts them) as a DPO job, or None and why it is not trained. Its
    reference policy: an SFT adapter when there is one or the round can train one first
    (:func:`~armature_temporal.finetune.reference.choose_reference`), else the base model."""
    ft = plan.finetune
    assert ft is not None  # _prepare stops on a spec without the block
    rows, stats = dpo_rows(runs, spec=plan.name, stage=stage, with_run_id=True)
    pairs = pairs_from_rows(rows)
    prompts = len({json.dumps(p.prompt, sort_keys=True) for p in pairs})
    more = (
        "a pair is two attempts of the stage sent exactly the same messages where one did "
        "better; to get more, run the spec again on inputs it has already run where the stage "
        "sometimes fails — after a change that leaves the stage's messages as they are (its "
        "model tier, temperature or provider), or simply again — so a failed and a valid reply "
        "meet on the same messages (a retry within a run does not: it is also sent the previous "
        "error), have a judge stage read it (two valid replies scored differently make a pair), "
        "or lower finetune.min_examples (at least 2)"
    )
    if len(pairs) < ft.min_examples:
        return None, (
            f"{len(pairs)} preference pair{'s' * (len(pairs) != 1)} (from {stats.groups} "
            f"prompt(s) sent more than once in {stats.runs} run(s)), fewer than min_examples = "
            f"{ft.min_examples} for method dpo; {more}"
        )
    if prompts < 2:
        return None, (
            f"{len(pairs)} preference pairs, all on one prompt: DPO holds out whole prompts to "
            "measure the adapter, so it needs pairs on at least 2 distinct prompts; run the "
            "spec on other inputs"
        )
    sft, _ = sft_rows(runs, spec=plan.name, stage=stage, with_run_id=True)
    reference = choose_reference(
        adapters,
        _examples(sft, stage),
        split_pairs(pairs, ft.eval_share)[1],
        stage=stage,
        base_model=base,
        min_examples=ft.min_examples,
        sft_request=TrainRequest(
            base_model=base, examples=[], **_settings(ft, out_dir.with_name(f"{out_dir.name}-sft"))
        ),
    )
    request = PreferenceRequest(
        base_model=base,
        pairs=pairs,
        **_settings(ft, out_dir),
        reference_adapter=reference.adapter,
        reference=reference.words,
    )
    held = preference_heldout_inputs(pairs, ft.eval_share, inputs_of)
    return StageJob(
        stage=stage, request=request, heldout_inputs=held, sft_first=reference.train
    ), ""


def _prepare(inp: FinetuneInput, round_id: str) -> FinetunePrepared:
    spec_dir = Path(inp.spec_path).parent
    try:
        plan = compile_spec(load_spec_text(inp.spec_text, inp.spec_path, base_dir=spec_dir))
    except SpecError as exc:
        raise ApplicationError(
            f"the spec given to the fine-tune loop is invalid: {exc}",
            type="invalid_spec",
            non_retryable=True,
        ) from None
    ft = plan.finetune
    if ft is None:
        return FinetunePrepared(
            stop=FinetuneResult(
                status="not_configured",
                detail=f"{plan.name}: no finetune block; add one with base_model",
            )
        )
    base = Path(ft.base_model)
    base = base if base.is_absolute() else (spec_dir / base).resolve()
    if not base.is_dir():
        raise ApplicationError(
            f"finetune.base_model {ft.base_model!r} is not a directory on this worker "
            f"(looked at {base}); put a transformers model there with save_pretrained — "
            "nothing is downloaded",
            type="finetune_base_model",
            non_retryable=True,
        )
    stages = list(ft.target_stages) or [s.id for s in plan.stages if s.role is not None]
    store = store_for(database_url())
    runs = load_runs(store, spec=plan.name, limit=HISTORY)
    # The paired runs' inputs: never those of a run in which a person rejected a gate.
    inputs = {run.run_id: replay_inputs(run) for run in runs}
    jobs: list[StageJob] = []
    skipped: dict[str, str] = {}
    for stage in stages:
        out_dir = armature_home() / "adapters" / _safe(plan.name) / _safe(stage) / _safe(round_id)
        if ft.method == "dpo":
            adapters = store.adapters(spec=plan.name, stage=stage, status="active", limit=20)
            job, why = _preference_job(plan, runs, stage, str(base), out_dir, inputs.get, adapters)
            if job is None:
                skipped[stage] = why
            else:
                jobs.append(job)
            continue
        rows, _ = sft_rows(runs, spec=plan.name, stage=stage, with_run_id=True)
        examples = _examples(rows, stage)
        if len(examples) < ft.min_examples:
            skipped[stage] = (
                f"{len(examples)} distinct successful replies, fewer than min_examples = "
                f"{ft.min_examples}"
            )
            continue
        earlier = store.latest_adapter(plan.name, stage) if ft.continual else None
        jobs.append(
            StageJob(
                stage=stage,
                request=TrainRequest(
                    base_model=str(base),
                    examples=examples,
                    **_settings(ft, out_dir),
                    continual_from=_continual_from(earlier, str(base), stage)
                    if ft.continual
                    else None,
                    orthogonality_weight=ft.orthogonality_weight,
                ),
                heldout_inputs=heldout_inputs(
                    examples, ft.eval_share, lambda run_id: inputs.get(run_id)
                ),
            )
        )
    if not jobs:
        detail = "; ".join(f"{s}: {why}" for s, why in skipped.items()) or "no LLM stages"
        return FinetunePrepared(
            stop=FinetuneResult(status="too_few_examples", detail=detail), skipped=skipped
        )
    return FinetunePrepared(
        spec_name=plan.name, base_model=str(base), jobs=jobs, skipped=skipped, plan=plan
    )


@activity.defn(name="finetune_prepare")
async def finetune_prepare(inp: FinetuneInput) -> FinetunePrepared:
    """Training examples per target stage from the store; stop when none has enough."""
    round_id = activity.info().workflow_id or "finetune"
    return await asyncio.to_thread(_prepare, inp, round_id)


async def _train(train: Callable[[Any], Any], request: Any) -> Any:
    """Run ``train(request)`` in a thread, heartbeating; a retry after a crash starts over in
    a fresh directory next to the unfinished one. Missing extras and unusable settings are
    non-retryable errors that say what is wrong."""
    from armature_temporal.errors import ArmatureError
    from armature_temporal.finetune.train import FinetuneUnavailable

    attempt = activity.info().attempt
    if attempt > 1:
        request = request.model_copy(update={"out_dir": f"{request.out_dir}~{attempt}"})
    try:
        async with heartbeating(5.0):
            return await asyncio.to_thread(train, request)
    except FinetuneUnavailable as exc:
        raise ApplicationError(str(exc), type="finetune_unavailable", non_retryable=True) from exc
    except ArmatureError as exc:
        raise ApplicationError(str(exc), type="finetune_error", non_retryable=True) from exc


@activity.defn(name="finetune_train")
async def finetune_train(request: TrainRequest) -> TrainReport:
    """Train one LoRA adapter (in a thread, heartbeating)."""
    from armature_temporal.finetune.train import train_lora

    report: TrainReport = await _train(train_lora, request)
    return report


@activity.defn(name="finetune_train_dpo")
async def finetune_train_dpo(request: PreferenceRequest) -> PreferenceReport:
    """Train one preference-tuned (DPO) adapter (in a thread, heartbeating)."""
    from armature_temporal.finetune.preference import train_dpo

    report: PreferenceReport = await _train(train_dpo, request)
    return report


def _scores(
    paired: PairedRuns | None,
) -> tuple[list[float | None] | None, list[float | None] | None]:
    """HQS of the runs without and with the adapter (as the improvement loop scores its)."""
    if paired is None:
        return None, None
    without, with_adapter = _score(paired.without, paired.with_adapter)
    return without, with_adapter


def _vs_reference(report: PreferenceReport, runs: PairedRuns) -> PreferenceReport:
    """``report`` with its paired figures against its SFT reference alone: HQS of the runs
    with SFT + the DPO delta minus the runs with the SFT adapter alone, pair by pair."""
    with_adapter, reference = _score(runs.with_adapter, runs.reference)
    kept = [
        (r, c)
        for r, c in zip(reference, with_adapter, strict=True)
        if r is not None and c is not None
    ]
    if not kept:
        return report.model_copy(update={"vs_reference_n": 0})
    diff, low, high = paired_verdict([r for r, _ in kept], [c for _, c in kept])
    return report.model_copy(
        update={
            "vs_reference_diff": diff,
            "vs_reference_ci_low": low,
            "vs_reference_ci_high": high,
            "vs_reference_n": len(kept),
        }
    )


def _vs_reference_said(report: PreferenceReport) -> str:
    if report.vs_reference_n is None:
        return ""
    if not report.vs_reference_n:
        return "; vs the SFT adapter alone: no paired run finished on both sides"
    return (
        f"; vs the SFT adapter alone: paired HQS difference {report.vs_reference_diff:+.3f}, "
        f"95% interval [{report.vs_reference_ci_low:+.3f}, {report.vs_reference_ci_high:+.3f}], "
        f"n={report.vs_reference_n} (reported, not part of the verdict)"
    )


def _record(inp: FinetuneRecordInput) -> list[Adapter]:
    """Decide each trained adapter (:func:`~armature_temporal.finetune.verify.decide_adapters`)
    from its losses and its paired runs' HQS, and keep it in the store with the figures."""
    prepared = inp.prepared
    ft = prepared.plan.finetune if prepared.plan is not None else None
    margin = ft.noninferiority_margin if ft is not None else DEFAULT_MARGIN
    paired = inp.paired or [None] * len(prepared.jobs)
    trained = [
        (job, report, runs)
        for job, report, runs in zip(prepared.jobs, inp.reports, paired, strict=True)
        if report is not None  # training failed; the workflow reports why
    ]
    judged = judged_stages(prepared.plan) if prepared.plan is not None else set()
    evidence = []
    reports = []
    for job, report, runs in trained:
        without, with_adapter = _scores(runs)
        if isinstance(report, PreferenceReport) and runs is not None and runs.reference:
            report = _vs_reference(report, runs)
        reports.append(report)
        figures: dict[str, Any] = (
            {"preference": report}
            if isinstance(report, PreferenceReport)
            else {
                "base_loss": base_loss(report),
                "heldout_loss": report.eval_loss_after,
                "eval_examples": report.eval_examples,
            }
        )
        evidence.append(
            Evidence(
                **figures,
                without=without,
                with_adapter=with_adapter,
                judged=job.stage in judged,
                stage=job.stage,
            )
        )
    checks = decide_adapters(evidence, margin=margin)
    adapters = []
    for (job, _, _), report, check in zip(trained, reports, checks, strict=True):
        trained_on = (
            f"; trained on {report.train_examples} examples, {report.steps} steps, "
            f"{report.seconds:.0f} s on {report.device}"
            if isinstance(report, TrainReport)
            else f"; preference-tuned (DPO, beta {report.beta:g}) on {report.train_pairs} pairs "
            f"from {len(report.source_runs)} runs, {report.steps} steps, "
            f"{report.seconds:.0f} s on {report.device}; reference policy: {report.reference}"
            f"{_vs_reference_said(report)}"
        )
        digest = hashlib.sha256(f"{inp.finetune_run_id}/{job.stage}".encode()).hexdigest()[:10]
        adapters.append(
            Adapter(
                id=f"{prepared.spec_name}-{job.stage}-a{digest}",
                spec_name=prepared.spec_name,
                stage=job.stage,
                base_model=prepared.base_model,
                path=report.adapter_dir,
                created_at=inp.created_at,
                finetune_run_id=inp.finetune_run_id,
                examples=len(
                    job.request.examples
                    if isinstance(job.request, TrainRequest)
                    else job.request.pairs
                ),
                report=report,
                verdict=check.verdict,
                detail=check.detail + trained_on,
                base_loss=check.base_loss,
                heldout_loss=check.heldout_loss,
                paired_diff=check.paired_diff,
                paired_ci_low=check.paired_ci_low,
                paired_ci_high=check.paired_ci_high,
                paired_n=check.paired_n,
            )
        )
    store_for(database_url()).save_adapters(adapters)
    for adapter in adapters:
        meta = Path(adapter.path) / "armature.json"
        if meta.is_file():
            data = json.loads(meta.read_text(encoding="utf-8"))
            data["adapter_id"] = adapter.id
            data["verdict"] = adapter.verdict
            meta.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return adapters


@activity.defn(name="finetune_record")
async def finetune_record(inp: FinetuneRecordInput) -> list[Adapter]:
    """Decide each adapter (verified: held-out loss below the base model's and paired runs no
    worse than without it) and keep it in the store with both figures."""
    return await asyncio.to_thread(_record, inp)
