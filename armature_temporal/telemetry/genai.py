"""Span names and attributes after the OpenTelemetry GenAI semantic conventions (pure: safe in
workflow code, no I/O).

A run is ``invoke_workflow {spec}``, a stage of an agent ``invoke_agent {role}``, a model call
``chat {model}``, a tool call ``execute_tool {tool}``. Each also carries
``openinference.span.kind`` (``CHAIN``, ``AGENT``, ``LLM``, ``TOOL``), which Phoenix and
Langfuse read to draw them as workflows, agents, LLM calls and tools, and Armature's own facts
under ``armature.*``. Attribute values are str, bool, int, float or lists of one of them; a
``None`` is left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "SPAN_KIND",
    "TRACER_NAME",
    "agent_attributes",
    "chat_attributes",
    "clean",
    "failed",
    "finish_reasons",
    "provider_name",
    "tool_attributes",
    "usage_attributes",
    "workflow_attributes",
]

#: The instrumentation scope of Armature's spans.
TRACER_NAME = "armature"
#: ``openinference.span.kind`` per GenAI operation.
SPAN_KIND = {
    "invoke_workflow": "CHAIN",
    "invoke_agent": "AGENT",
    "chat": "LLM",
    "execute_tool": "TOOL",
}
#: litellm's provider prefixes → the conventions' ``gen_ai.provider.name`` values.
_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "groq": "groq",
    "deepseek": "deepseek",
    "perplexity": "perplexity",
    "xai": "x_ai",
    "cohere": "cohere",
    "watsonx": "ibm.watsonx.ai",
}


def clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes an OpenTelemetry span accepts: ``None`` left out, lists of scalars kept,
    anything else as JSON text."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(
            isinstance(v, (str, bool, int, float)) for v in value
        ):
            out[key] = list(value)
        else:
            out[key] = json.dumps(value, sort_keys=True, default=str)
    return out


def provider_name(provider: str, model: str | None) -> str:
    """``gen_ai.provider.name`` for a tier: litellm's model prefix mapped to the conventions'
    names (``openai/gpt-4o`` → ``openai``), else the tier's provider (``simulate``, ``local``)."""
    if provider == "litellm" and model and "/" in model:
        prefix = model.split("/", 1)[0]
        return _PROVIDERS.get(prefix, prefix)
    if provider == "litellm" and model:
        lowered = model.lower()
        if lowered.startswith(("gpt", "o1", "o3", "o4")):
            return "openai"
        if lowered.startswith("claude"):
            return "anthropic"
        return "litellm"
    return provider


def workflow_attributes(
    *, spec: str, spec_hash: str, spec_version: Any, run_id: str, verification: bool
) -> dict[str, Any]:
    """``invoke_workflow``: the run."""
    return clean(
        {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.agent.name": spec,
            "openinference.span.kind": SPAN_KIND["invoke_workflow"],
            "armature.spec": spec,
            "armature.spec_hash": spec_hash,
            "armature.spec_version": None if spec_version is None else str(spec_version),
            "armature.run_id": run_id,
            "armature.verification": verification or None,
        }
    )


def agent_attributes(
    *, stage: str, kind: str, role: str | None, role_type: str | None, run_id: str
) -> dict[str, Any]:
    """``invoke_agent`` (an LLM stage) or the span of another kind of stage, at its start."""
    agent = kind == "llm"
    return clean(
        {
            "gen_ai.operation.name": "invoke_agent" if agent else None,
            "gen_ai.agent.name": role if agent else None,
            "gen_ai.agent.id": stage if agent else None,
            "openinference.span.kind": SPAN_KIND["invoke_agent"] if agent else "CHAIN",
            "armature.run_id": run_id,
            "armature.stage": stage,
            "armature.stage_kind": kind,
            "armature.role_type": role_type,
        }
    )


def usage_attributes(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """Token usage, in the conventions' and OpenInference's names."""
    return {
        "gen_ai.usage.input_tokens": prompt_tokens,
        "gen_ai.usage.output_tokens": completion_tokens,
        "llm.token_count.prompt": prompt_tokens,
        "llm.token_count.completion": completion_tokens,
        "llm.token_count.total": prompt_tokens + completion_tokens,
    }


def chat_attributes(
    *,
    provider: str,
    request_model: str | None,
    run_id: str,
    stage: str,
    tier: str,
    attempt: int,
    turn: int | None,
    temperature: float | None,
    max_tokens: int | None,
) -> dict[str, Any]:
    """``chat {model}``: one model call, at its start."""
    return clean(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(provider, request_model),
            "gen_ai.request.model": request_model,
            "gen_ai.request.temperature": temperature,
            "gen_ai.request.max_tokens": max_tokens,
            "openinference.span.kind": SPAN_KIND["chat"],
            "llm.model_name": request_model,
            "armature.run_id": run_id,
            "armature.stage": stage,
            "armature.tier": tier,
            "armature.attempt": attempt,
            "armature.turn": turn,
        }
    )


def tool_attributes(
    *, tool: str, call_id: str | None, run_id: str, stage: str, engine: bool
) -> dict[str, Any]:
    """``execute_tool {tool}``: one tool call, at its start."""
    return clean(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "extension" if engine else "function",
            "openinference.span.kind": SPAN_KIND["execute_tool"],
            "tool.name": tool,
            "armature.run_id": run_id,
            "armature.stage": stage,
        }
    )


def finish_reasons(reasons: Iterable[str | None]) -> list[str]:
    """``gen_ai.response.finish_reasons``: the known ones."""
    return [r for r in reasons if r]


def failed(span: Span, error_type: str, message: str) -> None:
    """Mark ``span`` failed: status ERROR (the message, cut to 500 characters) and
    ``error.type``."""
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, message[:500]))
    span.set_attribute("error.type", error_type)
