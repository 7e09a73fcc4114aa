"""Model tiers: the named model configurations stages pick from, and role-type defaults."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from armature_temporal.spec.fields import _Model


class ModelTier(_Model):
    """A named model configuration. Stages pick a tier, never a model directly."""

    provider: str = Field(
        "simulate",
        description="litellm provider prefix (openai, anthropic, ollama, hosted_vllm, openrouter, "
        "...), or Armature's own 'simulate' (offline, deterministic) or 'local' (a transformers "
        "model from a local path).",
    )
    model: str | None = Field(
        None,
        description="Model name for the provider (e.g. gpt-4o-mini); for 'local', the model "
        "directory. 'simulate' ignores it, so a real spec goes offline by changing provider only.",
    )
    api_base: str | None = Field(None, description="Base URL of the provider's API.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable holding the API key (never the key)."
    )
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Upper bound on output tokens.")
    context_window: int | None = Field(
        None,
        gt=0,
        description="Tokens the model accepts in a request; default: litellm's model info for "
        "the model (none for simulate). Bounds a tool loop's window (see context).",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments passed to the provider."
    )
    adapter: str | None = Field(
        None,
        description="'local' only: a LoRA adapter directory; 'latest' for the newest "
        "verified adapter the fine-tune loop trained for the calling stage; 'latest:<stage>' "
        "for that stage's.",
    )
    valid_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="simulate only: probability that an output satisfies the schema (default 1.0).",
    )
    quality: float | None = Field(
        None,
        ge=0,
        le=1,
        description="simulate only: mean latent quality of its outputs (default 0.8); as a "
        "judge's tier, also how little noise its scores carry.",
    )
    latency_ms: float | None = Field(
        None, ge=0, description="simulate only: how long each call takes (default 0)."
    )
    hedge_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="simulate only: probability that an output hedges (default 0): it carries "
        "hedging language, loses HEDGE_PENALTY (0.25) of latent quality, and its stated "
        "confidence and simulated logprobs are lower with it.",
    )
    logprobs: bool | None = Field(
        None,
        description="Ask the provider for the output tokens' logprobs, from which each attempt's "
        "confidence is taken: true always, false never; unset, when litellm lists logprobs "
        "among the provider's parameters (openai, hosted_vllm, openrouter, ...), but not for "
        "openai with another api_base (a compatible server that may reject them). simulate "
        "returns declared logprobs only when true.",
    )
    tool_calling: bool | None = Field(
        None,
        description="Whether the model calls tools natively (default: assume it does). "
        "false on a tier that a stage with role tools uses is reported by validate.",
    )
    adapter_support: Literal["dynamic", "static", "none"] | None = Field(
        None,
        description="armature-agents 0.7.0 field, accepted with a warning: LoRA adapters are "
        "served by provider: local with adapter: here.",
    )
    adapter_path_template: str | None = Field(
        None,
        description="armature-agents 0.7.0 field, accepted with a warning (see adapter_support).",
    )

    @model_validator(mode="after")
    def _check_provider_fields(self) -> ModelTier:
        simulate_only = {"valid_rate", "quality", "latency_ms", "hedge_rate"}
        simulate_only &= self.model_fields_set
        if self.provider != "simulate" and simulate_only:
            names = ", ".join(sorted(simulate_only))
            raise ValueError(
                f"{names} only apply to provider 'simulate', not {self.provider!r}; "
                "remove them or set provider: simulate"
            )
        if self.provider == "local" and not self.model:
            raise ValueError(
                "provider 'local' needs model: the directory of a transformers model (relative "
                "to this spec's directory, or absolute)"
            )
        if self.provider not in ("simulate",) and not self.model:
            raise ValueError(
                f"provider {self.provider!r} needs a model, e.g. model: gpt-4o-mini "
                "(or use provider: simulate to run offline)"
            )
        return self


class RoleTypeDefault(_Model):
    """Defaults applied to every stage whose role has this type."""

    model_tier: str | None = Field(None, description="Tier used when the role names none.")
    temperature: float | None = Field(None, ge=0, le=2, description="Default temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Default output-token bound.")


def _tier_shorthand(value: Any) -> Any:
    return {"model_tier": value} if isinstance(value, str) else value
