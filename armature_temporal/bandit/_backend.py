"""What a bandit store does (the ``Backend`` protocol) and the errors every store raises.

A backend keeps arms, per-context evidence, decisions, events and snapshots, and implements
the two hot operations itself — ``select`` (read posteriors, sample, record the decision) and
``reward`` (refuse or apply one reward atomically) — so each store can make them as cheap as
it allows. Everything else is plain reads and writes that :class:`~._runtime.BanditRuntime`
composes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np

from armature_temporal.bandit._errors import (
    BanditError,
    DuplicateRewardError,
    UnknownDecisionError,
)
from armature_temporal.bandit._math import Dynamics, SelectionRule
from armature_temporal.bandit._models import (
    ArmRecord,
    ArmStats,
    BanditEvent,
    RewardReceipt,
    Selection,
    Snapshot,
)

__all__ = ["Backend", "duplicate_error", "no_arms_error", "unknown_error"]


class Backend(Protocol):
    """A bandit store. Implementations: :class:`MemoryBackend`, :class:`~._sql.SqlBackend`,
    :class:`~._redis.RedisBackend`."""

    @property
    def kind(self) -> Literal["memory", "sqlite", "postgres", "redis"]: ...

    def load_config(self, name: str) -> dict[str, Any] | None: ...

    def save_config(self, name: str, config: dict[str, Any], fingerprint: str, at: str) -> bool:
        """Store the config; True when it differs from the stored one."""
        ...

    def arm_records(self, name: str) -> list[ArmRecord]: ...

    def add_arm(self, name: str, record: ArmRecord) -> bool:
        """Insert an arm; False (and no change) when the id exists."""
        ...

    def set_arm(self, name: str, arm_id: str, **fields: Any) -> None:
        """Update some of ``status``, ``retired_at``, ``params``, ``prior_alpha``,
        ``prior_beta``, ``low_rounds``."""
        ...

    def select(
        self,
        name: str,
        context: str,
        user_id: str | None,
        decision_id: str | None,
        rng: np.random.Generator,
        rule: SelectionRule,
        now: Callable[[], str],
    ) -> Selection: ...

    def reward(
        self, name: str, decision_id: str, reward: float, at: str, dyn: Dynamics
    ) -> RewardReceipt: ...

    def stats(self, name: str, context: str) -> dict[str, ArmStats]: ...

    def log(self, name: str, events: Sequence[BanditEvent]) -> None: ...

    def events(self, name: str) -> list[BanditEvent]: ...

    def add_snapshots(self, name: str, rows: Sequence[Snapshot]) -> None: ...

    def snapshots(self, name: str) -> list[Snapshot]: ...

    def close(self) -> None: ...


def unknown_error(name: str, decision_id: str) -> UnknownDecisionError:
    return UnknownDecisionError(
        f"bandit {name!r}: no decision {decision_id!r} was recorded; reward the decision_id "
        f"that runtime_select({name!r}, ...) returned (decision ids are per bandit)"
    )


def duplicate_error(
    name: str, decision_id: str, previous: float, at: str | None
) -> DuplicateRewardError:
    return DuplicateRewardError(
        f"bandit {name!r}: decision {decision_id!r} was already rewarded ({previous!r} at "
        f"{at}); each decision takes one reward, nothing was changed — make a new selection "
        "for a new reward"
    )


def no_arms_error(name: str) -> BanditError:
    return BanditError(
        f"bandit {name!r} has no active arms; reconfigure it with configure_runtime({name!r}, "
        "config={'arms': [...]}) to add some"
    )
