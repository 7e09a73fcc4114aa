"""The run's OpenTelemetry spans, from workflow code: ``invoke_workflow`` for the run, one
span per stage (``invoke_agent {role}`` for an agent's), ``execute_tool {tool}`` per tool call.

They are opened through the global tracer provider. Where this process exports traces
(:mod:`armature_temporal.telemetry.tracing`) that is temporalio's replay-safe provider: span
and trace ids come from the workflow's seeded randomness, so a run replayed on another worker
rebuilds the same spans, and a span is only ended, so exported, when its end is live rather
than replayed from history. A worker that loses the run (evicted, killed) never ends the spans
still open: the worker that carries the run on ends them, once. Elsewhere the provider is the
API's no-op and these cost a context switch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from temporalio import workflow

from armature_temporal.runtime.models import StageResult
from armature_temporal.spec.compiler import Plan, PlanStage
from armature_temporal.telemetry import genai

__all__ = ["finish_stage", "note", "run_span", "stage_span", "tool_span"]


def _tracer() -> trace.Tracer:
    return trace.get_tracer(genai.TRACER_NAME)


@contextmanager
def _span(name: str, attributes: dict[str, Any], kind: SpanKind) -> Iterator[Span]:
    with _tracer().start_as_current_span(
        name,
        attributes=attributes,
        kind=kind,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) or workflow.is_failure_exception(exc):
                genai.failed(span, type(exc).__name__, str(exc) or type(exc).__name__)
            else:
                # Evicted (GeneratorExit) or a workflow task that failed and will be retried:
                # the run goes on from its history elsewhere, and ends the span there. A
                # recorded exception tells the replay-safe span not to end here.
                span.record_exception(exc)
            raise


def note(attributes: dict[str, Any]) -> None:
    """Add attributes to the current span (a cache hit, a trace record's hash)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(genai.clean(attributes))


@contextmanager
def run_span(plan: Plan, run_id: str, verification: bool) -> Iterator[Span]:
    """``invoke_workflow {spec}``: the whole run, under Temporal's ``RunWorkflow``."""
    attributes = genai.workflow_attributes(
        spec=plan.name,
        spec_hash=plan.spec_hash,
        spec_version=plan.version,
        run_id=run_id,
        verification=verification,
    )
    with _span(f"invoke_workflow {plan.name}", attributes, SpanKind.INTERNAL) as span:
        yield span


@contextmanager
def stage_span(stage: PlanStage, run_id: str) -> Iterator[Span]:
    """``invoke_agent {role}`` for an LLM stage, ``{kind} {stage}`` for another kind."""
    role = stage.role.name if stage.role is not None else None
    attributes = genai.agent_attributes(
        stage=stage.id,
        kind=stage.kind,
        role=role,
        role_type=stage.role.type if stage.role is not None else None,
        run_id=run_id,
    )
    name = f"invoke_agent {role or stage.id}" if stage.kind == "llm" else f"{stage.kind} {stage.id}"
    with _span(name, attributes, SpanKind.INTERNAL) as span:
        yield span


def finish_stage(span: Span, result: StageResult, arm: tuple[str | None, str | None]) -> None:
    """What the stage came to: status, tier, attempts, arm, gate decision and who."""
    if not span.is_recording():
        return
    gate = result.gate
    span.set_attributes(
        genai.clean(
            {
                "armature.status": result.status,
                "armature.tier": result.tier,
                "armature.attempts": result.attempts,
                "armature.iterations": result.iterations,
                "armature.escalated": result.escalated or None,
                "armature.arm": arm[0],
                "armature.bandit.decision_id": arm[1],
                "armature.gate.decision": gate.decision if gate is not None else None,
                "armature.gate.by": gate.by if gate is not None else None,
            }
        )
    )
    if result.status in ("failed", "rejected"):
        genai.failed(span, result.error_type or result.status, result.error or result.status)


@contextmanager
def tool_span(
    tool: str, call_id: str | None, stage_id: str, run_id: str, *, engine: bool = False
) -> Iterator[Span]:
    """``execute_tool {tool}``: one tool call of a stage, refused calls included; ``engine``:
    a tool Armature answers itself (retrieve, recall, facts)."""
    attributes = genai.tool_attributes(
        tool=tool, call_id=call_id, run_id=run_id, stage=stage_id, engine=engine
    )
    with _span(f"execute_tool {tool}", attributes, SpanKind.INTERNAL) as span:
        yield span


def tool_outcome(span: Span, ok: bool, error_type: str | None, error: str | None) -> None:
    """The call's outcome: ``armature.tool.outcome`` and, failed, its error."""
    if not span.is_recording():
        return
    span.set_attribute("armature.tool.outcome", "ok" if ok else (error_type or "error"))
    if not ok:
        genai.failed(span, error_type or "tool_error", error or "tool call failed")
