"""The LLM gateway: one ``complete`` call over litellm, the ``simulate`` provider, or ``local``.

litellm runs with ``num_retries=0`` because Temporal owns retries. Provider failures become a
:class:`ProviderError` that says whether a retry can help (408/409/429/5xx) and how long the
provider asked us to wait.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.errors import ArmatureError
from armature_temporal.spec.compiler import ResolvedTier
from armature_temporal.spec.simulation import NeededFact, Pitfall

__all__ = ["Completion", "ProviderError", "complete", "import_litellm"]

RETRYABLE_STATUS = {408, 409, 429}


class ProviderError(ArmatureError):
    """A model provider call failed.

    Attributes:
        retryable: True for 408/409/429/5xx and connection problems.
        retry_after: Seconds the provider asked us to wait, if it said.
        status: HTTP status, when there was one.
        kind: A short machine-readable class (``rate_limited``, ``auth``, ``bad_request``, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        kind: str,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.kind = kind
        self.status = status
        self.retry_after = retry_after


class Completion(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    simulated_quality: float | None = None
    pitfalls_hit: list[str] = Field(default_factory=list)  # simulate: pitfalls fallen into
    facts_missing: list[str] = Field(default_factory=list)  # simulate: needed facts missed
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    finish_reason: str | None = None  # the provider's ("length": cut off by max_tokens)
    logprobs: list[float] | None = None  # the output tokens', where the provider returned them
    simulated_hedged: bool = False  # simulate: the output hedged (the tier's hedge_rate)


def import_litellm() -> Any:
    """Import litellm lazily, offline: its cost map comes from the package, not the network."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    return litellm


async def complete(
    tier: ResolvedTier,
    messages: list[dict[str, Any]],
    *,
    seed: str,
    role_type: str,
    output_mode: str,
    output_schema: dict[str, Any] | None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    params: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    turn: int = 0,
    max_turns: int = 1,
    adapter: str | None = None,
    judged_quality: float | None = None,
    pitfalls: Sequence[Pitfall] = (),
    facts: Sequence[NeededFact] = (),
    reasoning_gain: float = 0.0,
) -> Completion:
    """Call the tier's model once. Raises ProviderError on provider failure.

    ``adapter`` (``local`` tiers) is a LoRA adapter directory, already resolved by the caller
    (a tier's ``adapter: latest`` names the newest verified one for the calling stage).

    ``seed`` names the conversation (run/stage/attempt/tier) for the simulate provider; each
    turn of a tool loop is seeded from it and ``turn``. ``judged_quality`` (judges),
    ``pitfalls`` and ``facts`` (the stage's ``simulate:``) are the simulator's;
    ``params.quality`` overrides a simulate tier's quality (an arm's params);
    ``reasoning_gain`` (the stage's ``simulate.reasoning_gain``, for an answer whose prompt
    carries a reason_first call's reasoning) raises its latent quality.
    """
    if tier.provider == "simulate":
        return await _simulate(
            tier,
            messages,
            seed,
            role_type,
            output_mode,
            output_schema,
            tools,
            turn,
            max_turns,
            quality=_quality_param(tier, params or {}),
            judged_quality=judged_quality,
            pitfalls=pitfalls,
            facts=facts,
            reasoning_gain=reasoning_gain,
        )
    if tier.provider == "local":
        if tools:
            raise ProviderError(
                f"tier {tier.name!r}: provider 'local' does not call tools, and this stage "
                f"offers {len(tools)}; give the stage a tier with a litellm provider, or drop "
                "its tools",
                retryable=False,
                kind="unsupported_provider",
            )
        return await _local(tier, messages, seed, temperature, max_tokens, adapter)
    return await _litellm(
        tier, messages, output_mode, output_schema, temperature, max_tokens, params or {}, tools
    )


async def _simulate(
    tier: ResolvedTier,
    messages: list[dict[str, Any]],
    seed: str,
    role_type: str,
    output_mode: str,
    output_schema: dict[str, Any] | None,
    tools: list[dict[str, Any]] | None,
    turn: int,
    max_turns: int,
    *,
    quality: float,
    judged_quality: float | None,
    pitfalls: Sequence[Pitfall],
    facts: Sequence[NeededFact] = (),
    reasoning_gain: float = 0.0,
) -> Completion:
    from armature_temporal.runtime.reasoning import without_reasoning
    from armature_temporal.runtime.simulate import simulate_completion, simulate_tool_turn

    if tier.latency_ms:
        await asyncio.sleep(tier.latency_ms / 1000)
    tokens = max(1, len("\n".join(str(m.get("content", "")) for m in messages)) // 4)
    # Private reasoning acts through reasoning_gain only: it carries no lesson and no fact.
    messages = [{**m, "content": without_reasoning(str(m.get("content", "")))} for m in messages]
    prompt = "\n".join(str(m.get("content", "")) for m in messages)
    from armature_temporal.knowledge.citing import without_knowledge

    # What was asked, for the facts a good answer needs: the task and its context, not the
    # system message (role contract, mission), the passages found or any tool result.
    asked = without_knowledge(
        "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    ).split("\n\nYour previous answer", 1)[0]  # nor a retry's note
    from armature_temporal.runtime.simulate import REFINER_MARKER, simulate_refiner

    if REFINER_MARKER in prompt:  # the improvement loop's refiner (improve/refine.py)
        text = simulate_refiner(seed=seed, prompt=prompt, quality=quality, pitfalls=pitfalls)
        return Completion(
            text=text,
            model="simulate",
            prompt_tokens=max(1, len(prompt) // 4),
            completion_tokens=max(1, len(text) // 4),
            latency_ms=tier.latency_ms,
        )
    if tools:
        calls = simulate_tool_turn(seed=seed, turn=turn, max_turns=max_turns, tools=tools)
        if calls:
            return Completion(
                text="",
                model="simulate",
                tool_calls=calls,
                prompt_tokens=max(1, len(prompt) // 4),
                completion_tokens=8,
                latency_ms=tier.latency_ms,
            )
    sim = simulate_completion(
        seed=f"{seed}/{turn}",
        prompt=prompt,
        output_mode=output_mode,  # type: ignore[arg-type]
        output_schema=output_schema,
        role_type=role_type,  # type: ignore[arg-type]
        valid_rate=tier.valid_rate,
        quality=quality,
        judged_quality=judged_quality,
        pitfalls=pitfalls,
        facts=facts,
        asked=asked,
        hedge_rate=tier.hedge_rate,
        logprobs=tier.logprobs is True,
        reasoning_gain=reasoning_gain,
    )
    return Completion(
        text=sim.text,
        model="simulate",
        prompt_tokens=tokens,
        completion_tokens=sim.completion_tokens,
        latency_ms=tier.latency_ms,
        simulated_quality=sim.quality,
        pitfalls_hit=sim.pitfalls_hit,
        facts_missing=sim.facts_missing,
        logprobs=sim.logprobs,
        simulated_hedged=sim.hedged,
    )


def _quality_param(tier: ResolvedTier, params: dict[str, Any]) -> float:
    """A simulate tier's quality, or the ``quality`` an arm's params set instead."""
    value = params.get("quality", tier.quality)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ProviderError(
            f"tier {tier.name!r} (simulate): params.quality must be a number between 0 and 1, "
            f"got {value!r}; fix the arm's params.quality",
            retryable=False,
            kind="bad_request",
        )
    return float(value)


async def _litellm(
    tier: ResolvedTier,
    messages: list[dict[str, Any]],
    output_mode: str,
    output_schema: dict[str, Any] | None,
    temperature: float | None,
    max_tokens: int | None,
    params: dict[str, Any],
    tools: list[dict[str, Any]] | None,
) -> Completion:
    litellm = import_litellm()
    model = f"{tier.provider}/{tier.model}"
    kwargs: dict[str, Any] = {**tier.params, **params}
    kwargs["num_retries"] = 0
    if tier.api_base:
        kwargs["api_base"] = tier.api_base
    if tier.api_key_env:
        key = os.environ.get(tier.api_key_env)
        if not key:
            raise ProviderError(
                f"tier {tier.name!r} reads its API key from ${tier.api_key_env}, which is not "
                f"set; export {tier.api_key_env}=... in the worker's environment",
                retryable=False,
                kind="auth",
            )
        kwargs["api_key"] = key
    temp = temperature if temperature is not None else tier.temperature
    if temp is not None:
        kwargs["temperature"] = temp
    limit = max_tokens if max_tokens is not None else tier.max_tokens
    if limit is not None:
        kwargs["max_tokens"] = limit
    if output_mode == "guided_json" and output_schema is not None:
        kwargs["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": output_schema},
        }
    elif output_mode in ("json", "guided_json"):
        kwargs["response_format"] = {"type": "json_object"}
    if _wants_logprobs(litellm, tier):
        kwargs["logprobs"] = True
    if tools:
        kwargs["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description", ""),
                    "parameters": t.get("parameters", {"type": "object"}),
                },
            }
            for t in tools
        ]
    started = time.monotonic()
    try:
        response = await litellm.acompletion(model=model, messages=messages, **kwargs)
    except Exception as exc:  # litellm raises many types; classify by status, re-raise typed
        missing = [] if "api_key" in kwargs else _missing_credentials(litellm, model, tier)
        raise _classify(exc, tier, missing) from exc
    latency = (time.monotonic() - started) * 1000
    choice = response.choices[0].message
    finish_reason = getattr(response.choices[0], "finish_reason", None)
    calls = []
    for call in getattr(choice, "tool_calls", None) or []:
        import json

        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            arguments = {"_unparsed": call.function.arguments}
        calls.append({"id": call.id, "name": call.function.name, "arguments": arguments})
    usage = getattr(response, "usage", None)
    try:
        cost = float(litellm.completion_cost(completion_response=response))
    except Exception:  # no price known for this model: cost unknown, recorded as 0
        cost = 0.0
    return Completion(
        text=choice.content or "",
        model=model,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=cost,
        latency_ms=latency,
        tool_calls=calls,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        logprobs=token_logprobs(getattr(response.choices[0], "logprobs", None)),
    )


def _wants_logprobs(litellm: Any, tier: ResolvedTier) -> bool:
    """Whether to ask for logprobs: the tier says so, or (unset) litellm lists ``logprobs``
    among the provider's supported parameters for this model — except for ``openai`` pointed
    at another ``api_base``, a compatible server of unknown make that may reject them."""
    if tier.logprobs is not None:
        return tier.logprobs
    if tier.provider == "openai" and tier.api_base:
        return False
    try:
        supported = litellm.get_supported_openai_params(
            model=tier.model or "", custom_llm_provider=tier.provider
        )
    except Exception:  # litellm raises for providers it does not know: do not ask
        return False
    return bool(supported) and "logprobs" in supported


def token_logprobs(logprobs: Any) -> list[float] | None:
    """The output tokens' logprobs from a litellm choice's ``logprobs`` (OpenAI's shape,
    ``{"content": [{"token": ..., "logprob": ...}, ...]}``, as an object or a dict)."""
    if logprobs is None:
        return None
    content = (
        logprobs.get("content")
        if isinstance(logprobs, dict)
        else getattr(logprobs, "content", None)
    )
    values = []
    for item in content or []:
        value = item.get("logprob") if isinstance(item, dict) else getattr(item, "logprob", None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            values.append(float(value))
    return values or None


async def _local(
    tier: ResolvedTier,
    messages: list[dict[str, Any]],
    seed: str,
    temperature: float | None,
    max_tokens: int | None,
    adapter: str | None,
) -> Completion:
    """A transformers model from a local directory, with a LoRA adapter if given; run in a
    thread (generation blocks). Tool calls are not supported by this provider."""
    import asyncio
    import hashlib

    from armature_temporal.errors import ArmatureError
    from armature_temporal.finetune.local import generate  # torch is imported on first use

    started = time.monotonic()
    try:
        out = await asyncio.to_thread(
            generate,
            tier.model or "",
            [
                {"role": m.get("role", "user"), "content": str(m.get("content") or "")}
                for m in messages
            ],
            adapter=adapter,
            max_tokens=max_tokens or tier.max_tokens or 256,
            temperature=temperature if temperature is not None else tier.temperature,
            seed=int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16),
        )
    except ArmatureError as exc:
        raise ProviderError(
            f"tier {tier.name!r} (local): {exc}", retryable=False, kind="local_model"
        ) from exc
    return Completion(
        text=out.text,
        model=f"local:{tier.model}" + (f"+{adapter}" if adapter else ""),
        prompt_tokens=out.prompt_tokens,
        completion_tokens=out.completion_tokens,
        latency_ms=(time.monotonic() - started) * 1000,
        finish_reason=out.finish_reason,
    )


def _missing_credentials(litellm: Any, model: str, tier: ResolvedTier) -> list[str]:
    """The credential variables litellm expects for ``model`` that the worker lacks (a tier
    with its own ``api_base`` is taken to need none). Consulted only after a call failed: a
    provider that authenticates otherwise (an IAM role, a local server) is never refused."""
    if tier.api_base:
        return []
    try:
        found = litellm.validate_environment(model=model)
    except Exception:  # an unknown provider: litellm cannot say, so neither can we
        return []
    if not isinstance(found, dict) or found.get("keys_in_environment", True):
        return []
    names = found.get("missing_keys") or []
    return [n for n in names if isinstance(n, str) and n.endswith(("_KEY", "_TOKEN"))]


def _classify(
    exc: Exception, tier: ResolvedTier, missing: list[str] | None = None
) -> ProviderError:
    if missing:
        # No key: whatever the call said (a DNS failure offline, a 401 online), no retry can
        # help, and the fix is the key.
        return ProviderError(
            f"tier {tier.name!r} ({tier.provider}/{tier.model}) has no API key on the worker: "
            f"{' or '.join(missing)} is not set (the call failed: {type(exc).__name__}: "
            f"{str(exc)[:200]}); export it in the worker's environment (or name the variable "
            "with the tier's api_key_env), or use provider: simulate to try the spec offline",
            retryable=False,
            kind="auth",
        )
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    retry_after = None
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is not None:
        value = headers.get("retry-after")
        try:
            retry_after = float(value) if value is not None else None
        except ValueError:
            retry_after = None
    name = type(exc).__name__
    connection = name in ("APIConnectionError", "Timeout", "ServiceUnavailableError")
    retryable = connection or status in RETRYABLE_STATUS or (status is not None and status >= 500)
    kind = {401: "auth", 403: "auth", 404: "not_found", 429: "rate_limited"}.get(
        status or 0, "server_error" if retryable else "bad_request"
    )
    return ProviderError(
        f"tier {tier.name!r} ({tier.provider}/{tier.model}): {name}"
        f"{f' (HTTP {status})' if status else ''}: {str(exc)[:500]}",
        retryable=retryable,
        kind=kind,
        status=status,
        retry_after=retry_after,
    )
