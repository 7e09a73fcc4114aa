"""How a stage's bandit learns beyond plain Thompson sampling: ``bandit: {context, evolve}``.

- ``context`` — contextual Thompson sampling across the spec's runs: each decision is filed
  under a key made of run-input fields and/or a bucket of an embedding of one input (the task),
  and a context's posterior borrows the global one until its own evidence outweighs it.
- ``evolve`` — new arms bred from the best ones by bandit maintenance (crossover of tier,
  prompt and declared params; optionally a prompt rewritten by the refiner tier), each admitted
  only through the prompt-input scanner and the spec validator, within a budget; arms that lose
  are retired.

Both sit on the progressive-unlocking ladder (:mod:`armature_temporal.bandit.ladder`): a
context uses its own evidence once it has enough decisions, evolution starts once the bandit
has enough decisions overall. Importable from :mod:`armature_temporal.spec.models`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from armature_temporal.spec.fields import IDENTIFIER, _Model

__all__ = ["BANDIT_DESCRIPTION", "ArmContext", "ArmEmbedding", "ArmEvolution", "ArmPolicy"]

_VALUE_MAX = 64

BANDIT_DESCRIPTION = (
    "How this stage's arms learn beyond plain Thompson sampling: context (per-context "
    "posteriors from run-input fields or an embedding bucket of the task) and evolve (arms bred "
    "from the best, retired when they lose). Needs arms."
)


class ArmEmbedding(_Model):
    """A bucket of an embedding of one run input, as a context feature."""

    input: str = Field(
        ...,
        pattern=IDENTIFIER.pattern,
        description="The run input whose text is embedded (e.g. the task or question).",
    )
    buckets: int = Field(
        4,
        description="How many buckets (2, 4, 8 or 16): the signs of fixed random projections "
        "of the embedding (the local model's, else the lexical one), so similar tasks share a "
        "bucket.",
    )

    @model_validator(mode="after")
    def _power_of_two(self) -> ArmEmbedding:
        if self.buckets not in (2, 4, 8, 16):
            raise ValueError(f"buckets must be 2, 4, 8 or 16, got {self.buckets!r}")
        return self


class ArmContext(_Model):
    """Context features: the run's decisions are filed under a key made of them."""

    inputs: list[str] = Field(
        default_factory=list,
        description="Run-input fields whose values form the context key (e.g. [region]); "
        "long values are hashed.",
    )
    embedding: ArmEmbedding | None = Field(
        None, description="A bucket of an embedding of one run input, added to the key."
    )
    unlock_after: int = Field(
        10,
        ge=1,
        description="Rewarded decisions a context needs before the ladder shows it unlocked "
        "(its own evidence then outweighs the borrowed global posterior 10 to 1).",
    )

    def features(self, inputs: Mapping[str, Any]) -> dict[str, str]:
        """The run-input part of a decision's context: each named input's value (``''`` when
        absent; long values hashed). Pure, so the workflow computes it."""
        out = {}
        for name in self.inputs:
            value = inputs.get(name, "")
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            if len(text) > _VALUE_MAX:
                text = "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
            out[name] = text
        return out

    @model_validator(mode="after")
    def _something(self) -> ArmContext:
        if not self.inputs and self.embedding is None:
            raise ValueError(
                "context needs inputs (run-input fields) or embedding (a bucket of one input)"
            )
        for name in self.inputs:
            if not IDENTIFIER.match(name):
                raise ValueError(f"context input {name!r} is not an input name")
        return self


class ArmEvolution(_Model):
    """Breeding arms from the best (in bandit maintenance) and retiring the ones that lose."""

    after: int = Field(
        30,
        ge=1,
        description="Rewarded decisions the bandit needs (all contexts) before it breeds: the "
        "evolution rung of the ladder.",
    )
    min_pulls: int = Field(10, ge=1, description="Pulls an arm needs before it may parent a child.")
    budget: int = Field(
        4, ge=0, description="Arms bred over the bandit's life at most (refused ones count)."
    )
    max_arms: int = Field(6, ge=2, description="Active arms at most; breeding stops there.")
    params: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Declared space for crossover: name -> {low, high} (a child takes a random "
        "point between its parents' values) or "
        "{choices: [...]} (e.g. temperature: {low: 0, high: 1}). Undeclared params are "
        "inherited from one parent unchanged.",
    )
    mutate_prompt: bool = Field(
        False,
        description="Also breed a child whose prompt the refiner tier rewrote from the best "
        "arm's low-scored transcripts (scanned and validated like any bred arm).",
    )
    refiner_tier: str | None = Field(
        None,
        description="Tier that rewrites prompts (default: self_improvement.refiner_tier, else "
        "the spec's highest tier).",
    )
    retire_below: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="A bred arm whose P(best) stays below this for two maintenance rounds "
        "(with 3 pulls at least) retires; at least two arms stay active (the spec's own arms "
        "leave only when the spec drops them).",
    )

    @model_validator(mode="after")
    def _space(self) -> ArmEvolution:
        for name, space in self.params.items():
            keys = set(space)
            if keys == {"choices"}:
                if not isinstance(space["choices"], list) or not space["choices"]:
                    raise ValueError(f"params.{name}.choices must be a non-empty list")
            elif keys == {"low", "high"}:
                low, high = space["low"], space["high"]
                if not all(isinstance(v, int | float) for v in (low, high)) or not low < high:
                    raise ValueError(
                        f"params.{name}: need numbers low < high, got low={low!r} high={high!r}"
                    )
            else:
                raise ValueError(
                    f"params.{name} must be {{low, high}} or {{choices: [...]}}, got {sorted(keys)}"
                )
        return self


class ArmPolicy(_Model):
    """A stage's ``bandit:`` block."""

    context: ArmContext | None = Field(None, description="Contextual Thompson sampling.")
    evolve: ArmEvolution | None = Field(None, description="Evolution of the stage's arms.")
