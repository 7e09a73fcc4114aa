"""The ``chat {model}`` span around one model call, from the ``llm_call`` activity.

It sits under Temporal's ``RunActivity:llm_call`` span (whose context the workflow's stage span
sent along), so a trace reads run → stage → activity → chat. Activities do not replay: a
retried call is a second attempt and rightly a second span. Prompt and reply text is added only
with the GenAI conventions' opt-in (:func:`~armature_temporal.telemetry.tracing.capture_content`),
as ``gen_ai.input.messages`` / ``gen_ai.output.messages`` with secrets redacted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from armature_temporal.telemetry import genai, tracing

if TYPE_CHECKING:
    from armature_temporal.runtime.llm import Completion
    from armature_temporal.runtime.models import LLMCallInput

__all__ = ["chat_span", "completed", "failed"]

#: Characters of prompt or reply text a span carries at most (with the opt-in).
MAX_CONTENT = 16_000


@contextmanager
def chat_span(inp: LLMCallInput, temperature: Any, max_tokens: Any) -> Iterator[Span]:
    """``chat {model}`` around a model call; an exception marks it failed and goes on."""
    tier = inp.tier
    model = tier.model or tier.name
    attributes = genai.chat_attributes(
        provider=tier.provider,
        request_model=model,
        run_id=inp.run_id,
        stage=inp.stage.id,
        tier=tier.name,
        attempt=inp.attempt,
        turn=inp.turn or None,
        temperature=temperature if isinstance(temperature, (int, float)) else None,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
    )
    tracer = trace.get_tracer(genai.TRACER_NAME)
    with tracer.start_as_current_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=True,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            failed(span, getattr(exc, "kind", None), exc)
            raise


def failed(span: Span, kind: str | None, exc: BaseException) -> None:
    """A call that failed: ``error.type`` is ``provider_error.<kind>`` or the exception's type."""
    genai.failed(span, f"provider_error.{kind}" if kind else type(exc).__name__, str(exc))


def completed(span: Span, completion: Completion, messages: list[dict[str, Any]]) -> None:
    """What the call came to: the model that answered, tokens, cost, finish reason; the text
    only with the opt-in."""
    if not span.is_recording():
        return
    span.set_attributes(
        genai.clean(
            {
                "gen_ai.response.model": completion.model or None,
                "gen_ai.response.finish_reasons": genai.finish_reasons([completion.finish_reason]),
                **genai.usage_attributes(completion.prompt_tokens, completion.completion_tokens),
                "armature.cost_usd": completion.cost_usd,
                "armature.latency_ms": completion.latency_ms,
                "armature.tool_calls": len(completion.tool_calls) or None,
            }
        )
    )
    if tracing.capture_content():
        span.set_attribute("gen_ai.input.messages", _redacted(json.dumps(messages, default=str)))
        output = [{"role": "assistant", "parts": [{"type": "text", "content": completion.text}]}]
        span.set_attribute("gen_ai.output.messages", _redacted(json.dumps(output)))


def _redacted(text: str) -> str:
    """``text`` (cut to :data:`MAX_CONTENT`) with the secrets the scanner finds replaced."""
    from armature_temporal.scanner import redact, scan

    text = text[:MAX_CONTENT]
    return redact(text, scan(text), categories=["secret"])
