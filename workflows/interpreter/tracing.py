"""``Tracer``: the run's hash-chained trace records, buffered in the workflow and flushed to
the trace store by a local activity."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.runtime.loop_state import ChainHead
from armature_temporal.runtime.models import (
    GateDecision,
    LLMCallResult,
    RunInput,
    StageResult,
    ToolCallResult,
)
from armature_temporal.runtime.outputs import judge_score
from armature_temporal.runtime.traces import (
    CHAIN_MEMO,
    LOW_QUALITY_THRESHOLD,
    TraceBatch,
    TraceChain,
    TraceRecord,
)
from armature_temporal.spec.compiler import PlanStage
from workflows.interpreter import spans
from workflows.interpreter.failures import TOOL_ERROR_TYPES
from workflows.interpreter.state import RunContext

__all__ = ["DAG_IN_TRACE", "FLUSH_EVERY", "TIMED_RECORDS", "TRACE_ANCHOR_MEMO", "Tracer"]

#: Buffered records that trigger an intermediate flush.
FLUSH_EVERY = 25
#: workflow.patched id: after each flush the run's chain head goes into its memo.
TRACE_ANCHOR_MEMO = "trace-anchor-memo"
#: workflow.patched id: a stage's record says when it started (``data.started_at``, and its
#: wall time in ``latency_ms``), a gate's since when it waited (``data.waiting_since``, the
#: wait in ``latency_ms``): the worker's duration metrics read them. Runs started before it
#: replay with the records (and hashes) they had.
TIMED_RECORDS = "timed-records"
#: workflow.patched id: the run's start record names its stages and their dependencies (the
#: report draws the DAG from the record, without the spec).
DAG_IN_TRACE = "dag-in-trace"


def _dag(plan: Any) -> list[dict[str, Any]]:
    return [{"id": s.id, "kind": s.kind, "depends_on": list(s.depends_on)} for s in plan.stages]


def _now() -> str:
    return workflow.now().isoformat()


def _ms_since(start: str) -> float:
    """Workflow time from ``start`` (ISO 8601, workflow time too) to now, in milliseconds."""
    return (workflow.now() - datetime.fromisoformat(start)).total_seconds() * 1000


def _confidence(llm: LLMCallResult) -> dict[str, Any]:
    """An attempt's ``confidence`` and ``confidence_source`` (none in runs from before them)."""
    if llm.confidence is None:
        return {}
    hedged = {"simulated_hedged": True} if llm.simulated_hedged else {}
    return {
        "confidence": llm.confidence.value,
        "confidence_source": llm.confidence.source,
        **hedged,
    }


class Tracer:
    """Adds one record per run start and end, stage, model attempt, tool call and gate
    decision, and sends them to the store in idempotent batches."""

    def __init__(self, run: RunContext, inp: RunInput, resume: ChainHead | None = None) -> None:
        """``resume``: continue the run's chain from there (an AgentLoop child's records, which
        the run's memo does not anchor: the run's next flush does) instead of starting it."""
        self.run = run
        plan = inp.plan
        self.chain = TraceChain(run.run_id, plan.name, plan.spec_hash, plan.policy_version)
        self.anchors = resume is None
        if resume is not None:
            self.chain.seq, self.chain.head = resume.seq, resume.head
            return
        self.chain.add(
            "run_start",
            run.started.isoformat(),
            data={
                "spec_version": plan.version,
                "inputs": inp.inputs,
                "parent_run_id": inp.parent_run_id,
                # Only when set, so ordinary runs' records (and their hashes) are unchanged.
                **({"verification": True} if inp.verification else {}),
                **({"hqs_weights": plan.hqs_weights} if plan.hqs_weights else {}),
                **({"dag": _dag(plan)} if workflow.patched(DAG_IN_TRACE) else {}),
            },
        )

    @property
    def buffered(self) -> int:
        """Records not yet sent to the store."""
        return len(self.chain.pending)

    def end(self, reason: str | None) -> None:
        run = self.run
        elapsed = (workflow.now() - run.started).total_seconds() * 1000
        self.chain.add(
            "run_end",
            _now(),
            status=run.state,
            error=reason,
            output=run.outputs,
            latency_ms=elapsed,
            data={"prior_run_id": run.prior_run_id} if run.prior_run_id else {},
        )

    def stage(self, stage: PlanStage) -> TraceRecord:
        """The stage's record (what it came to), added to the chain."""
        result = self.run.results[stage.id]
        judge = None
        error_type = result.error_type
        data: dict[str, Any] = {"kind": stage.kind}
        if stage.role is not None and stage.role.type == "judge":
            judge = judge_score(result.output)
            # The LLM stages it judges: the dashboard's calibration reads their confidence.
            llm_ids = {s.id for s in self.run.plan.stages if s.role is not None}
            data["judges"] = [d for d in stage.depends_on if d in llm_ids]
        if judge is not None and result.status == "completed" and judge < LOW_QUALITY_THRESHOLD:
            error_type = "low_quality"
        if stage.id in self.run.held:  # a verification run's gate, never approved
            data["verification_gate"] = self.run.held[stage.id]
        arm_id, decision_id = self.run.arm_of(stage.id)
        latency_ms = 0.0
        if result.started_at is not None and workflow.patched(TIMED_RECORDS):
            data["started_at"] = result.started_at
            latency_ms = _ms_since(result.started_at)
        return self.chain.add(
            "stage",
            _now(),
            latency_ms=latency_ms,
            stage_id=stage.id,
            status=result.status,
            iteration=result.iterations,
            attempt=result.attempts,
            tier=result.tier,
            role=stage.role.name if stage.role else None,
            role_type=stage.role.type if stage.role else None,
            output=result.output,
            error_type=error_type,
            error=result.error,
            escalated=result.escalated,
            judge_score=judge,
            arm_id=arm_id,
            decision_id=decision_id,
            data=data,
        )

    def attempt(
        self,
        stage: PlanStage,
        llm: LLMCallResult,
        variables: dict[str, Any],
        result: StageResult,
        tier: str,
        lessons: Sequence[str] = (),
        unsure: str | None = None,
        knowledge: Sequence[str] = (),
    ) -> None:
        """``unsure``: why a valid output was refused for low confidence (its error);
        ``knowledge``: the references of the passages its prompt carried."""
        assert stage.role is not None
        run = self.run
        provenance = {k: "user_input" for k in variables.get("inputs", {})}
        provenance.update({k: f"stage:{k}" for k in run.outputs if k in variables})
        if run.plan.continuation is not None:
            provenance[run.plan.continuation.inject_as] = "prior_run"
        if run.plan.memory is not None and run.plan.memory.inject_as in variables:
            provenance[run.plan.memory.inject_as] = "memory"
            if variables.get("_stale_memory_keys"):
                provenance["_stale_memory_keys"] = "stale_memory"
        provenance.update({f"lesson:{i}": "memory" for i in lessons})
        provenance.update({ref: "knowledge" for ref in knowledge})
        arm_id, decision_id = run.arm_of(stage.id)
        self.chain.add(
            "attempt",
            _now(),
            stage_id=stage.id,
            iteration=result.iterations + (1 if stage.loop is not None else 0),
            attempt=result.attempts,
            role=stage.role.name,
            role_type=stage.role.type,
            tier=tier,
            model=llm.model,
            arm_id=arm_id,
            decision_id=decision_id,
            inputs_hash=llm.inputs_hash,
            inputs_provenance=provenance,
            output=llm.output,
            output_valid=llm.valid,
            error_type="low_confidence" if unsure else None if llm.valid else "output_invalid",
            error=unsure or llm.error,
            latency_ms=llm.latency_ms,
            prompt_tokens=llm.prompt_tokens,
            completion_tokens=llm.completion_tokens,
            cost_usd=llm.cost_usd,
            escalated=result.escalated,
            data={
                "messages": llm.messages,
                # The threshold it was held to (calibration reads it): only where one is set.
                **(
                    {} if stage.min_confidence is None else {"min_confidence": stage.min_confidence}
                ),
                "simulated_quality": llm.simulated_quality,
                # A tool loop's last progress (turns, window, compactions, spent), if it ran one.
                **({"loop": result.loop} if result.loop else {}),
                **({"pitfalls_hit": llm.pitfalls_hit} if llm.pitfalls_hit else {}),
                **({"facts_missing": llm.facts_missing} if llm.facts_missing else {}),
                **({"finish_reason": llm.finish_reason} if llm.finish_reason else {}),
                # reason_first: the private reasoning call (text, tier, its own usage).
                **({"reasoning": {"private": True, **llm.reasoning}} if llm.reasoning else {}),
                **(llm.cache or {}),  # a cache hit: cache, cache_entry, similarity, ...
                **_confidence(llm),
                # The raw reply of an invalid attempt (its output may be None): DPO's "rejected".
                **({} if llm.valid else {"text": llm.text[:20000]}),
            },
        )

    def memory_failed(
        self,
        message: str,
        exc: ActivityError | ApplicationError,
        data: dict[str, Any],
        stage_id: str | None = None,
    ) -> None:
        """A cross-run store step (memory, lessons, facts) that failed: logged, and a
        ``memory`` record with the error; the run goes on."""
        cause = exc.cause or exc
        workflow.logger.warning("%s: %s", message, cause)
        self.chain.add(
            "memory",
            _now(),
            stage_id=stage_id,
            status="failed",
            error=f"{message}: {cause}",
            data=data,
        )

    def tool(self, stage_id: str, tool: str, result: ToolCallResult, approved: bool) -> None:
        self.chain.add(
            "tool",
            _now(),
            stage_id=stage_id,
            status="completed" if result.ok else "failed",
            output=result.output,
            error_type=None
            if result.ok
            else TOOL_ERROR_TYPES.get(result.error_type or "", "tool_error"),
            error=result.error,
            data={
                "tool": tool,
                "policy_action": result.policy_action,
                "policy_rule": result.policy_rule,
                "policy_message": result.policy_message,
                "tool_error_type": result.error_type,
                "hooks": result.hooks,
                "approved": approved,
            },
        )

    def context(
        self,
        stage_id: str,
        *,
        tier: str | None,
        llm: LLMCallResult | None,
        error: str | None,
        data: dict[str, Any],
    ) -> None:
        """A tool loop's window compacted; ``llm``: the summary call that did it, if any."""
        self.chain.add(
            "context",
            _now(),
            stage_id=stage_id,
            status="failed" if error else "completed",
            tier=tier,
            model=llm.model if llm is not None else None,
            output=llm.text if llm is not None else None,
            error_type="provider_error" if error else None,
            error=error,
            latency_ms=llm.latency_ms if llm is not None else 0.0,
            prompt_tokens=llm.prompt_tokens if llm is not None else 0,
            completion_tokens=llm.completion_tokens if llm is not None else 0,
            cost_usd=llm.cost_usd if llm is not None else 0.0,
            data=data,
        )

    def gate(self, gate_id: str, decided: GateDecision, since: str | None = None) -> None:
        """Every decided gate — stage gates and tool-call approvals alike — is traced with who
        decided, when, and why (gate_decisions table, armature report); ``since``: when it
        started waiting (None: it decided without waiting)."""
        data = decided.model_dump()
        latency_ms = 0.0
        if since is not None and workflow.patched(TIMED_RECORDS):
            data["waiting_since"] = since
            latency_ms = _ms_since(since)
        self.chain.add(
            "gate",
            _now(),
            stage_id=gate_id,
            status=decided.decision,
            latency_ms=latency_ms,
            data=data,
        )

    async def flush(self, *, final: bool = False, keep_trying: bool = False) -> None:
        """Send buffered trace records to the store (idempotent, so retries are safe).

        If the store is down, an intermediate flush keeps the records for the next one (the
        run goes on); the final flush retries until the store is back, so nothing is lost, and
        so does one that must land before another workflow continues the chain
        (``keep_trying``: a long tool loop's child, workflows/interpreter/tool_loop.py).
        """
        final_or_must = final or keep_trying
        batch = self.chain.take()
        if not batch:
            return
        anchored = self.anchors and workflow.patched(TRACE_ANCHOR_MEMO)
        try:
            ack = await workflow.execute_local_activity(
                "record_traces",
                TraceBatch(records=batch, ack=anchored),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(
                    maximum_attempts=0 if final_or_must else 3,
                    maximum_interval=timedelta(seconds=60 if final_or_must else 10),
                ),
            )
        except (ActivityError, ApplicationError) as exc:  # local activities raise the latter
            workflow.logger.warning(
                "trace store unavailable, keeping %d record(s): %s", len(batch), exc.cause or exc
            )
            self.chain.pending[:0] = batch
            return
        if anchored:
            self._anchor(batch[-1], ack, final)
        if final and isinstance(ack, dict) and isinstance(ack.get("hqs"), dict):
            spans.note({"armature.hqs": ack["hqs"].get(self.run.run_id)})

    @staticmethod
    def _anchor(last: TraceRecord, ack: Any, final: bool) -> None:
        """Record the stored chain's head in the run's memo: one upsert per flush."""
        store = ack.get("store", "") if isinstance(ack, dict) else ""
        workflow.upsert_memo(
            {
                CHAIN_MEMO: {
                    "length": last.seq + 1,
                    "head": last.hash,
                    "store": store,
                    "final": final,
                }
            }
        )
