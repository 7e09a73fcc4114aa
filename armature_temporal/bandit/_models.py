"""What the bandit runtime hands back: selections, receipts, arm reports, events, snapshots.

Plain pydantic models, so a Temporal activity can return them through the pydantic converter.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ArmRecord",
    "ArmReport",
    "ArmStats",
    "BanditEvent",
    "EventKind",
    "MaintenanceReport",
    "RewardReceipt",
    "Selection",
    "Snapshot",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Selection(_Model):
    """One decision: the arm chosen and the id to reward it with."""

    name: str
    decision_id: str
    arm_id: str
    params: dict[str, Any] = Field(default_factory=dict)
    context: str = Field("", description="The context key the decision was made in.")
    user_id: str | None = None


class RewardReceipt(_Model):
    """A reward that was recorded."""

    name: str
    decision_id: str
    arm_id: str
    context: str
    reward: float
    change_detected: bool = Field(
        False, description="The reward revealed a change; the context's evidence was reset."
    )


ArmStatus = Literal["active", "retired"]
ArmOrigin = Literal["config", "evolved"]


class ArmRecord(_Model):
    """An arm as stored: active or retired, declared in the config or bred by evolution."""

    arm_id: str
    params: dict[str, Any] = Field(default_factory=dict)
    status: ArmStatus = "active"
    origin: ArmOrigin = "config"
    parents: list[str] = Field(default_factory=list)
    generation: int = 0
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    low_rounds: int = 0
    position: int = 0
    created_at: str = ""
    retired_at: str | None = None


class ArmStats(_Model):
    """Raw counters of one arm in one context."""

    arm_id: str
    s: float = 0.0
    f: float = 0.0
    pulls: int = 0
    rewarded: int = 0
    reward_sum: float = 0.0
    resets: int = 0


class ArmReport(_Model):
    """One arm's standing in a context: what ``runtime_arms`` returns."""

    arm_id: str
    params: dict[str, Any]
    status: ArmStatus
    origin: ArmOrigin
    context: str
    pulls: int = Field(..., description="Selections of the arm (in this context).")
    rewarded: int = Field(..., description="Rewards received (lifetime).")
    reward_sum: float = Field(..., description="Sum of rewards (lifetime).")
    alpha: float
    beta: float
    mean: float = Field(..., description="Posterior mean of the reward.")
    low: float = Field(..., description="2.5% posterior quantile.")
    high: float = Field(..., description="97.5% posterior quantile.")
    p_best: float = Field(..., description="Posterior probability that this arm is the best.")
    resets: int = Field(0, description="Changes detected on this arm.")


EventKind = Literal[
    "configured",
    "arm_added",
    "arm_reactivated",
    "arm_params_changed",
    "arm_retired",
    "arm_bred",
    "arm_refused",
    "change_detected",
    "unlocked",
]


class BanditEvent(_Model):
    """One logged change to a bandit."""

    at: str
    kind: EventKind
    arm_id: str | None = None
    context: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class Snapshot(_Model):
    """One arm's posterior at one maintenance round (a point of a learning curve)."""

    taken_at: str
    context: str
    arm_id: str
    pulls: int
    rewarded: int
    reward_sum: float
    alpha: float
    beta: float
    mean: float
    low: float
    high: float
    p_best: float


class MaintenanceReport(_Model):
    """What one ``maintenance`` round did."""

    name: str
    at: str
    retired: list[str] = Field(default_factory=list)
    bred: list[str] = Field(default_factory=list)
    snapshot: list[Snapshot] = Field(default_factory=list)
    events: list[BanditEvent] = Field(default_factory=list)
