"""The messages of the bandit activities (arm choice, reward, maintenance); re-exported by
:mod:`armature_temporal.runtime.models`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.spec.arm_policy import ArmPolicy

__all__ = [
    "BanditMaintenanceInput",
    "BanditRewardInput",
    "BanditSelectInput",
    "BanditSelectResult",
    "SpecArms",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BanditSelectInput(_Model):
    name: str
    arms: list[dict[str, Any]]
    decision_id: str
    #: Context features already known in the workflow (run-input fields).
    context: dict[str, Any] | None = None
    #: Text whose embedding bucket joins the context (``bandit.context.embedding``).
    embed_text: str | None = None
    #: The input the text came from (names the feature in the key).
    context_embed: str | None = None
    buckets: int = 0


class BanditSelectResult(_Model):
    arm_id: str
    decision_id: str
    #: An arm bred by evolution (not in the plan): its tier, prompt and params.
    arm: dict[str, Any] | None = None
    #: The context key the decision was filed under ('' for none).
    context: str = ""


class BanditRewardInput(_Model):
    name: str
    decision_id: str
    reward: float
    #: The stage's ``bandit:`` (its ladder rungs are logged as they unlock).
    policy: ArmPolicy | None = None


class SpecArms(_Model):
    """What maintenance needs to evolve one stage's arms: the spec's arms as compiled, the
    policy, and where the spec lives (to validate a bred arm as part of it)."""

    spec_path: str | None = None
    stage: str
    arms: list[dict[str, Any]] = Field(default_factory=list)
    policy: ArmPolicy
    #: The refiner tier, resolved (``bandit.evolve.mutate_prompt``).
    refiner: dict[str, Any] | None = None


class BanditMaintenanceInput(_Model):
    names: list[str]
    #: bandit name → its stage's arms and policy, for stages that evolve.
    spec_arms: dict[str, SpecArms] = Field(default_factory=dict)
