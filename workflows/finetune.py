"""The fine-tune loop, one round: distil each target stage's successful replies from the trace
store into examples, train a LoRA adapter per stage on the spec's local base model, compare
each adapter whose held-out loss beats the base model's in paired runs of the spec (child runs
of the interpreter, in verification mode, on the held-out examples' inputs: the spec as it is
and the spec with the stage served by the base model plus the adapter), and keep each adapter
with both figures (verified: loss below the base model's and paired runs no worse, see
:mod:`armature_temporal.finetune.verify`).

With ``finetune.method: dpo`` (SAO) a stage's preference pairs are its data, its adapter is
trained with the DPO loss (``finetune_train_dpo``), the held-out check is its preference
accuracy against its reference's 50%, and its paired runs (on the held-out pairs' runs'
inputs) must show the spec better with it. DPO starts from a supervised policy: when the stage
has an SFT adapter (its newest verified one, or one this round trains first,
``StageJob.sft_first``) the DPO adapter is a delta on it, frozen as the reference policy
(:mod:`armature_temporal.finetune.reference`), and the paired runs add the stage on the SFT
adapter alone; else the reference is the base model.

Run on demand (``armature finetune SPEC``) or by the Schedule ``armature schedule SPEC``
creates from ``finetune.schedule``. A ``provider: local`` tier with ``adapter: latest`` uses
the newest verified adapter of the calling stage from then on.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from armature_temporal.finetune.models import (
        Adapter,
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
    from armature_temporal.finetune.verify import heldout_beats_base, with_adapter
    from armature_temporal.spec.compiler import Plan

from workflows.paired import paired_run

__all__ = ["FINETUNE_WORKFLOW", "FinetuneWorkflow"]

FINETUNE_WORKFLOW = "Finetune"
#: workflow.patched id: a round runs paired runs with and without each adapter before it
#: records them (rounds from before it recorded straight after training).
VS_BASE_PATCH = "finetune-vs-base"
#: workflow.patched id: a ``finetune.method: dpo`` job trains in ``finetune_train_dpo`` (rounds
#: from before it had no such jobs).
DPO_PATCH = "finetune-dpo"
#: workflow.patched id: a DPO job with an SFT reference trains that SFT adapter first when the
#: round is to (``StageJob.sft_first``), trains the DPO delta on it, and its paired runs add the
#: stage on the SFT adapter alone (rounds from before it trained DPO from the base model only).
DPO_SFT_PATCH = "finetune-dpo-on-sft"
STORE_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=2))
TRAIN_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=10))


@workflow.defn(name=FINETUNE_WORKFLOW)
class FinetuneWorkflow:
    """One fine-tune round. Its ``progress`` query names the stage being trained."""

    def __init__(self) -> None:
        self.phase = "preparing"
        self.done: list[str] = []

    @workflow.query(name="progress")
    def progress(self) -> dict[str, object]:
        return {"phase": self.phase, "trained": list(self.done)}

    async def _verify(self, label: str, plan: Plan, index: int, inputs: dict[str, object]) -> str:
        """One paired verification run; its id."""
        return await paired_run(
            label, plan, index, inputs, summary=f"paired run {index + 1} of {label}: {plan.name}"
        )

    async def _pair(
        self, plan: Plan, base_model: str, job: StageJob, report: TrainReport | PreferenceReport
    ) -> PairedRuns:
        """The spec as it is and with ``job.stage`` on the base model plus the adapter, run
        on each held-out input (concurrently)."""
        served = with_adapter(plan, job.stage, base_model, report.adapter_dir)
        inputs = job.heldout_inputs
        versions = [(f"{job.stage}/without", plan), (f"{job.stage}/with", served)]
        reference = report.reference_adapter if isinstance(report, PreferenceReport) else None
        if reference is not None and workflow.patched(DPO_SFT_PATCH):
            # The SFT adapter alone: does the DPO delta do better than its reference?
            sft = with_adapter(plan, job.stage, base_model, reference)
            versions.append((f"{job.stage}/reference", sft))
        ids = await asyncio.gather(
            *(self._verify(label, p, i, x) for label, p in versions for i, x in enumerate(inputs))
        )
        n = len(inputs)
        return PairedRuns(
            without=list(ids[:n]), with_adapter=list(ids[n : 2 * n]), reference=list(ids[2 * n :])
        )

    async def _on_sft(self, job: StageJob) -> tuple[PreferenceRequest, TrainReport | None]:
        """The DPO request of ``job`` with its reference settled: the SFT adapter the round
        trains first (``job.sft_first``) when it is to; the base model when that fails."""
        request = job.request
        assert isinstance(request, PreferenceRequest)
        if job.sft_first is None and request.reference_adapter is None:
            return request, None
        if not workflow.patched(DPO_SFT_PATCH):
            # Replaying a round from before DPO on SFT, which trained from the base model.
            return request.model_copy(
                update={"reference_adapter": None, "reference": "the base model"}
            ), None
        if job.sft_first is None:
            return request, None
        self.phase = f"training {job.stage}'s SFT reference"
        try:
            sft = await self._train(job.stage, job.sft_first)
        except ActivityError as exc:
            cause = exc.cause
            why = cause.message if isinstance(cause, ApplicationError) else str(exc)
            return request.model_copy(
                update={
                    "reference_adapter": None,
                    "reference": f"the base model (the SFT adapter to train first failed: {why})",
                }
            ), None
        assert isinstance(sft, TrainReport)
        return request.model_copy(update={"reference_adapter": sft.adapter_dir}), sft

    async def _train(
        self, stage: str, request: TrainRequest | PreferenceRequest
    ) -> TrainReport | PreferenceReport:
        """Train ``stage``'s adapter in its activity: supervised, or preference-tuned (DPO)."""
        kind: type[TrainReport | PreferenceReport]
        if isinstance(request, PreferenceRequest):
            name, kind, what = "finetune_train_dpo", PreferenceReport, "preference-tune (DPO)"
            size = f"{len(request.pairs)} pairs"
        else:
            name, kind, what = "finetune_train", TrainReport, "train"
            size = f"{len(request.examples)} examples"
        report: TrainReport | PreferenceReport = await workflow.execute_activity(
            name,
            request,
            result_type=kind,
            start_to_close_timeout=timedelta(hours=6),
            heartbeat_timeout=timedelta(minutes=2),
            retry_policy=TRAIN_RETRY,
            summary=f"{what} a LoRA adapter for {stage} on {size}",
        )
        return report

    @workflow.run
    async def run(self, inp: FinetuneInput) -> FinetuneResult:
        prepared: FinetunePrepared = await workflow.execute_activity(
            "finetune_prepare",
            inp,
            result_type=FinetunePrepared,
            start_to_close_timeout=timedelta(minutes=10),
            retry_policy=STORE_RETRY,
            summary="collect training examples from the trace store",
        )
        if prepared.stop is not None:
            return prepared.stop
        reports: list[TrainReport | PreferenceReport | None] = []
        failed: dict[str, str] = {}
        for job in prepared.jobs:  # one at a time: training saturates the worker
            self.phase = f"training {job.stage}"
            if isinstance(job.request, PreferenceRequest) and not workflow.patched(DPO_PATCH):
                # Replaying a round from before DPO training, which could not have planned one.
                failed[job.stage] = "a DPO job in a round from before DPO training"
                reports.append(None)
                continue
            request = job.request
            sft: TrainReport | None = None
            if isinstance(request, PreferenceRequest):
                request, sft = await self._on_sft(job)
                self.phase = f"training {job.stage}"
            try:
                report = await self._train(job.stage, request)
                if sft is not None:
                    report = report.model_copy(update={"sft_report": sft})
            except ActivityError as exc:
                # One stage's failure does not lose the others' adapters.
                cause = exc.cause
                failed[job.stage] = (
                    cause.message if isinstance(cause, ApplicationError) else str(exc)
                )
                reports.append(None)
                continue
            reports.append(report)
            self.done.append(job.stage)
        paired: list[PairedRuns | None] = []
        if workflow.patched(VS_BASE_PATCH) and prepared.plan is not None:
            # Only an adapter that beats the base model on held-out loss can be verified, so
            # only those are run.
            for job, trained in zip(prepared.jobs, reports, strict=True):
                if trained is None or not heldout_beats_base(trained) or not job.heldout_inputs:
                    paired.append(None)
                    continue
                self.phase = f"paired runs with and without the {job.stage} adapter"
                paired.append(await self._pair(prepared.plan, prepared.base_model, job, trained))
        self.phase = "recording"
        adapters: list[Adapter] = await workflow.execute_activity(
            "finetune_record",
            FinetuneRecordInput(
                finetune_run_id=workflow.info().workflow_id,
                created_at=workflow.now().isoformat(),
                prepared=prepared,
                reports=reports,
                paired=paired,
            ),
            result_type=list[Adapter],
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=STORE_RETRY,
            summary="decide the adapters (loss vs the base model, paired runs); keep them",
        )
        self.phase = "done"
        verified = sum(a.verdict == "verified" for a in adapters)
        bar = (
            "held-out preference accuracy above its reference's and paired runs better"
            if any(isinstance(job.request, PreferenceRequest) for job in prepared.jobs)
            else "held-out loss below the base model's and paired runs no worse"
        )
        skipped = "".join(f"; {s} skipped: {why}" for s, why in prepared.skipped.items())
        failures = "".join(f"; {s} failed: {why}" for s, why in failed.items())
        return FinetuneResult(
            status="trained" if adapters else "failed",
            detail=f"{len(adapters)} adapter(s) trained, {verified} verified ({bar}){failures}"
            f"{skipped}",
            adapters=adapters,
        )
