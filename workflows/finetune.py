"""The fine-tune loop, one round: distil each target stage's successful replies from the trace
store into examples, train a LoRA adapter per stage on the spec's local base model, and keep
each adapter with its held-out loss before and after (verified when it went down).

Run on demand (``armature finetune SPEC``) or by the Schedule ``armature schedule SPEC``
creates from ``finetune.schedule``. A ``provider: local`` tier with ``adapter: latest`` uses
the newest verified adapter of the calling stage from then on.
"""

from __future__ import annotations

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
        TrainReport,
    )

__all__ = ["FINETUNE_WORKFLOW", "FinetuneWorkflow"]

FINETUNE_WORKFLOW = "Finetune"
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
        reports: list[TrainReport | None] = []
        failed: dict[str, str] = {}
        for job in prepared.jobs:  # one at a time: training saturates the worker
            self.phase = f"training {job.stage}"
            try:
                report: TrainReport = await workflow.execute_activity(
                    "finetune_train",
                    job.request,
                    result_type=TrainReport,
                    start_to_close_timeout=timedelta(hours=6),
                    heartbeat_timeout=timedelta(minutes=2),
                    retry_policy=TRAIN_RETRY,
                    summary=f"train a LoRA adapter for {job.stage} on "
                    f"{len(job.request.examples)} examples",
                )
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
        self.phase = "recording"
        adapters: list[Adapter] = await workflow.execute_activity(
            "finetune_record",
            FinetuneRecordInput(
                finetune_run_id=workflow.info().workflow_id,
                created_at=workflow.now().isoformat(),
                prepared=prepared,
                reports=reports,
            ),
            result_type=list[Adapter],
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=STORE_RETRY,
            summary="keep the adapters and their held-out losses",
        )
        self.phase = "done"
        verified = sum(a.verdict == "verified" for a in adapters)
        skipped = "".join(f"; {s} skipped: {why}" for s, why in prepared.skipped.items())
        failures = "".join(f"; {s} failed: {why}" for s, why in failed.items())
        return FinetuneResult(
            status="trained" if adapters else "failed",
            detail=f"{len(adapters)} adapter(s) trained, {verified} verified (held-out loss "
            f"down){failures}{skipped}",
            adapters=adapters,
        )
