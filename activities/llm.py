"""The ``llm_call`` activity: render the prompt, call the tier's model, parse and check output.

Invalid output is a normal result (``valid=False`` with the error), so the workflow's on_fail
loop can feed the error back deterministically. Provider failures raise ``ApplicationError``
``provider_error.<kind>``: non-retryable for Temporal, with ``{"retryable": ...}`` details
(408/409/429/5xx and connection errors: true) and the provider's retry-after as
``next_retry_delay``, for the workflow to count against the call's provider budget
(workflows/interpreter/retries.py); runs from before that let Temporal retry the retryable ones.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import timedelta
from typing import Any

from jinja2 import TemplateError, UndefinedError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from armature_temporal.cache.keys import call_messages
from armature_temporal.runtime.confidence import confidence_of
from armature_temporal.runtime.hooks import HookContext, run_hooks
from armature_temporal.runtime.llm import ProviderError, complete
from armature_temporal.runtime.message_store import MessageMissing, resolve_messages
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult
from armature_temporal.runtime.parsing import parse_output
from armature_temporal.runtime.payloads import MAX_STAGE_OUTPUT
from armature_temporal.runtime.token_count import context_window_of, count_tokens
from armature_temporal.telemetry.chat import chat_span, completed
from armature_temporal.tools import ToolError, get_tool_spec, load_tool_modules

__all__ = ["llm_call"]


async def _adapter_for(inp: LLMCallInput) -> str | None:
    """The adapter directory a local tier loads: its own, or with ``adapter: latest`` the
    newest verified active adapter the fine-tune loop trained for this spec and stage
    (``latest:<stage>``: for that stage instead) on this tier's base model; none yet: the base
    model alone."""
    adapter = inp.tier.adapter
    if adapter is None or not (adapter == "latest" or adapter.startswith("latest:")):
        return adapter
    stage = adapter.partition(":")[2] or inp.stage.id
    from activities.traces import store_for
    from armature_temporal.store.engine import database_url

    store = await asyncio.to_thread(store_for, database_url())  # opening it may block
    found = await asyncio.to_thread(
        store.adapters, spec=inp.spec_name, stage=stage, status="active", limit=200
    )
    # Newest first; only adapters trained on this tier's base model fit it.
    for candidate in found:
        if candidate.verdict == "verified" and candidate.base_model == inp.tier.model:
            return candidate.path
    return None


def _counts(
    inp: LLMCallInput, prompt: list[dict[str, Any]], transcript: list[dict[str, Any]]
) -> dict[str, Any]:
    """For a context policy: the model's context window, the prompt's tokens, and each
    transcript message's (litellm's counter; the estimate for simulate)."""
    return {
        "context_window": context_window_of(inp.tier),
        "base_tokens": sum(count_tokens(inp.tier, prompt)),
        "message_tokens": count_tokens(inp.tier, transcript),
    }


@activity.defn(name="llm_call")
async def llm_call(inp: LLMCallInput) -> LLMCallResult:
    """One model call for one attempt (or one turn of a tool loop) of an LLM stage.

    With ``provider_retries="workflow"`` every failure that is not the infrastructure's is a
    non-retryable ``ApplicationError`` (Temporal's retries, uncapped, are for lost workers and
    timeouts); a ``provider_error.<kind>`` says in its details whether another try can help,
    and an unexpected exception becomes ``provider_error.unexpected`` so that the workflow's
    budget, not the deadline, bounds it.
    """
    if inp.provider_retries != "workflow":
        return await _llm_call(inp)
    try:
        return await _llm_call(inp)
    except ApplicationError:
        raise
    except Exception as exc:  # anything else: counted against the provider budget
        raise ApplicationError(
            f"stage {inp.stage.id!r}: llm_call failed: {type(exc).__name__}: {exc}",
            {"retryable": True, "status": None},
            type="provider_error.unexpected",
            non_retryable=True,
        ) from exc


async def _llm_call(inp: LLMCallInput) -> LLMCallResult:
    stage = inp.stage
    assert stage.role is not None, "llm_call runs LLM stages only"
    try:
        messages = call_messages(inp)
    except TemplateError as exc:
        hint = ""
        if isinstance(exc, UndefinedError) and str(exc).endswith("is undefined"):
            hint = (
                "; if it is a run input, pass --input NAME=VALUE (or declare it under "
                "inputs: with a default)"
            )
        raise ApplicationError(
            f"stage {stage.id!r}: its prompt template failed to render: {exc}{hint}",
            type="template_error",
            non_retryable=True,
        ) from exc
    transcript = inp.transcript
    if any("content_ref" in m for m in transcript):
        try:  # a context policy's loop sends stored tool results by reference
            transcript = await asyncio.to_thread(resolve_messages, transcript)
        except MessageMissing as exc:
            raise ApplicationError(
                f"stage {stage.id!r}: {exc}", type="message_missing", non_retryable=True
            ) from exc
    counts = await asyncio.to_thread(_counts, inp, messages, transcript) if inp.count_tokens else {}
    messages.extend(transcript)
    hook_ctx = HookContext(
        point="pre_stage",
        run_id=inp.run_id,
        spec_name=inp.spec_name,
        stage_id=stage.id,
        messages=messages,
    )
    pre = await run_hooks(hook_ctx)
    hooks = {"pre_stage": pre.model_dump(include={"action", "hook", "reason", "modified_by"})}
    if pre.action == "block":
        raise ApplicationError(
            f"stage {stage.id!r}: blocked by hook {pre.hook}: {pre.reason}",
            type="policy_blocked",
            non_retryable=True,
        )
    if pre.action == "require_approval" and not inp.approved:
        return LLMCallResult(
            valid=False,
            model="",
            tier=inp.tier.name,
            hooks=hooks,
            needs_approval=pre.reason,
            messages=messages,
        )
    if pre.messages is not None:
        messages = pre.messages
    try:
        if inp.tool_modules and inp.tools:
            await asyncio.to_thread(load_tool_modules, inp.tool_modules)
        tools = [get_tool_spec(name).model_dump(mode="json") for name in inp.tools]
        tools += inp.extra_tools
    except ToolError as exc:
        raise ApplicationError(
            f"stage {stage.id!r}: {exc}", type="unknown_tool", non_retryable=True
        ) from exc
    seed = f"{inp.sim_seed or inp.run_id}/{stage.id}/{inp.attempt}/{inp.tier.name}"
    adapter = await _adapter_for(inp) if inp.tier.provider == "local" else None
    temperature = inp.params.get("temperature", stage.role.temperature)
    max_tokens = inp.params.get("max_tokens", stage.role.max_tokens)
    try:
        async with heartbeating():
            with chat_span(inp, temperature, max_tokens) as span:
                completion = await complete(
                    inp.tier,
                    messages,
                    seed=seed,
                    role_type=stage.role.type,
                    output_mode=stage.output_mode,
                    output_schema=stage.output_schema,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    params={
                        k: v
                        for k, v in inp.params.items()
                        if k not in ("temperature", "max_tokens")
                    },
                    tools=tools or None,
                    turn=inp.turn,
                    max_turns=stage.role.max_turns,
                    adapter=adapter,
                    judged_quality=inp.judged_quality,
                    pitfalls=stage.simulate.pitfalls if stage.simulate is not None else (),
                    facts=stage.simulate.facts if stage.simulate is not None else (),
                    reasoning_gain=stage.simulate.reasoning_gain
                    if stage.simulate is not None and inp.reasoning
                    else 0.0,
                )
                completed(span, completion, messages)
    except ProviderError as exc:
        delay = timedelta(seconds=exc.retry_after) if exc.retry_after else None
        counted = inp.provider_retries == "workflow"
        raise ApplicationError(
            f"stage {stage.id!r}: {exc}",
            *([{"retryable": exc.retryable, "status": exc.status}] if counted else []),
            type=f"provider_error.{exc.kind}",
            non_retryable=counted or not exc.retryable,
            next_retry_delay=delay,
        ) from exc
    rendered = json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)
    result = LLMCallResult(
        valid=True,
        inputs_hash=hashlib.sha256(rendered.encode("utf-8")).hexdigest(),
        messages=messages,
        text=completion.text,
        model=completion.model,
        tier=inp.tier.name,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        cost_usd=completion.cost_usd,
        latency_ms=completion.latency_ms,
        simulated_quality=completion.simulated_quality,
        pitfalls_hit=completion.pitfalls_hit,
        facts_missing=completion.facts_missing,
        finish_reason=completion.finish_reason,
        simulated_hedged=completion.simulated_hedged,
        **counts,
    )
    if completion.tool_calls:
        # Intermediate turns of a tool loop: the transcript is already in the workflow; echoing
        # the messages back would double a long loop's history. The final turn carries them.
        return result.model_copy(update={"tool_calls": completion.tool_calls, "messages": []})
    if len(completion.text) > MAX_STAGE_OUTPUT:
        raise ApplicationError(
            f"stage {stage.id!r}: the model returned {len(completion.text):,} characters, more "
            f"than the {MAX_STAGE_OUTPUT:,} Armature carries; lower max_tokens for this stage",
            type="payload_too_large",
            non_retryable=True,
        )
    parsed = parse_output(completion.text, stage.output_mode, stage.output_schema)
    output = {"content": parsed.value} if stage.output_mode == "text" else parsed.value
    if parsed.valid:
        post = await run_hooks(
            hook_ctx.model_copy(update={"point": "post_stage", "output": output})
        )
        hooks["post_stage"] = post.model_dump(include={"action", "hook", "reason", "modified_by"})
        if post.action == "block":
            raise ApplicationError(
                f"stage {stage.id!r}: output blocked by hook {post.hook}: {post.reason}",
                type="policy_blocked",
                non_retryable=True,
            )
        if post.output is not None:
            output = post.output
    confidence = confidence_of(
        text=completion.text,
        output=output,
        schema=stage.output_schema,
        logprobs=completion.logprobs,
    )
    return result.model_copy(
        update={
            "output": output,
            "valid": parsed.valid,
            "error": parsed.error,
            "hooks": hooks,
            "confidence": confidence,
        }
    )
