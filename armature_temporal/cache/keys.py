"""The cache's keys: the exact key of a model call, the semantic partition of a stage, and the
task text a semantic entry is embedded from.

The exact key is the sha256 of canonical JSON over everything that decides a model's answer:
provider, model, api base, adapter, the rendered messages, the output mode and schema, and the
sampling parameters (temperature, max_tokens, provider params: the tier's with the call's
overrides); for a ``simulate`` tier also its declared knobs (valid_rate, quality, latency),
which are its model. Two calls with the same key are the same request. A spec is only served
its own entries (the lookup filters by spec name as well).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from armature_temporal.runtime.models import LLMCallInput
from armature_temporal.runtime.prompts import build_messages
from armature_temporal.runtime.reasoning import with_reasoning

__all__ = ["effective_temperature", "exact_key", "partition_key", "render_messages", "task_of"]


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def call_messages(inp: LLMCallInput) -> list[dict[str, Any]]:
    """The system and user messages ``llm_call`` sends for ``inp``, before any transcript
    (raises jinja2 errors on template problems); a reason_first call's reasoning request, or
    the private reasoning its answer carries, follows the task."""
    stage = inp.stage
    assert stage.role is not None
    messages = build_messages(
        role_type=stage.role.type,
        role_name=stage.role.name,
        prompt_template=inp.prompt_template,
        variables=inp.variables,
        mission=inp.mission,
        output_mode=stage.output_mode,
        output_schema=stage.output_schema,
        guidance=stage.role.guidance,
        context=inp.context,
        lessons=inp.lessons,
        # a retrieve: stage's passages (found or not), or the passages a judge checks by
        knowledge=inp.knowledge if stage.retrieve is not None or inp.knowledge else None,
        cite=stage.retrieve is not None and stage.retrieve.cite,
        facts=inp.facts,
    )
    return with_reasoning(messages, reasoning=inp.reasoning, request=inp.reasoning_request)


def render_messages(inp: LLMCallInput) -> list[dict[str, Any]]:
    """The messages ``llm_call`` sends for ``inp`` (the same rendering; raises jinja2 errors)."""
    return [*call_messages(inp), *inp.transcript]


def effective_temperature(inp: LLMCallInput) -> float | None:
    """The temperature the call runs at: the arm's, else the role's, else the tier's."""
    assert inp.stage.role is not None
    value = inp.params.get("temperature", inp.stage.role.temperature)
    return inp.tier.temperature if value is None else float(value)


def exact_key(inp: LLMCallInput, messages: list[dict[str, Any]], adapter: str | None = None) -> str:
    """The call's exact key (see the module docstring); ``adapter``: the adapter a local
    tier's ``adapter: latest`` resolves to now (it changes as the fine-tune loop trains)."""
    stage, tier = inp.stage, inp.tier
    assert stage.role is not None
    params = {**tier.params, **{k: v for k, v in inp.params.items() if k != "temperature"}}
    params.pop("max_tokens", None)
    return _digest(
        {
            "provider": tier.provider,
            "model": tier.model,
            "api_base": tier.api_base,
            "adapter": adapter or tier.adapter,
            "messages": messages,
            "output_mode": stage.output_mode,
            "output_schema": stage.output_schema,
            "temperature": effective_temperature(inp),
            "max_tokens": inp.params.get("max_tokens", stage.role.max_tokens) or tier.max_tokens,
            "params": params,
            "tools": sorted(inp.tools),
            # A simulate tier's model is its declared knobs.
            "simulate": [tier.valid_rate, tier.quality, tier.latency_ms]
            if tier.provider == "simulate"
            else None,
        }
    )


def partition_key(inp: LLMCallInput, spec_hash: str, scope: str) -> str:
    """The semantic partition: spec name, spec version (scope ``spec_version``), stage, tier
    and output schema. Entries are only ever compared within one partition."""
    return _digest(
        {
            "spec": inp.spec_name,
            "spec_hash": spec_hash if scope == "spec_version" else None,
            "stage": inp.stage.id,
            "tier": inp.tier.name,
            "output_mode": inp.stage.output_mode,
            "schema": _digest(inp.stage.output_schema),
        }
    )[:32]


def task_of(messages: list[dict[str, Any]]) -> str:
    """The task a semantic entry is embedded from: the user messages' text."""
    return "\n\n".join(
        str(m.get("content") or "") for m in messages if m.get("role") == "user"
    ).strip()
