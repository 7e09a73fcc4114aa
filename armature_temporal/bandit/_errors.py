"""The bandit runtime's errors. Each names the bandit, the offending value and the fix.

- :class:`BanditError` — root of the runtime's errors (an
  :class:`~armature_temporal.errors.ArmatureError`).
- :class:`BanditConfigError` — a configuration is invalid.
- :class:`UnknownBanditError` — no bandit of that name is configured in this process or store.
- :class:`RewardError` — a reward was refused and changed nothing. Subclasses:
  :class:`InvalidRewardError` (not a number in [0, 1]), :class:`UnknownDecisionError`
  (no such decision id), :class:`DuplicateRewardError` (the decision was already rewarded).
"""

from __future__ import annotations

from armature_temporal.errors import ArmatureError

__all__ = [
    "BanditConfigError",
    "BanditError",
    "DuplicateRewardError",
    "InvalidRewardError",
    "RewardError",
    "UnknownBanditError",
    "UnknownDecisionError",
]


class BanditError(ArmatureError):
    """Root of the bandit runtime's errors."""


class BanditConfigError(BanditError):
    """A bandit configuration is invalid; the message lists every problem and its fix."""


class UnknownBanditError(BanditError):
    """No bandit of that name has been configured."""


class RewardError(BanditError):
    """A reward was refused. Nothing was changed."""


class InvalidRewardError(RewardError):
    """The reward is not a finite number in [0, 1]."""


class UnknownDecisionError(RewardError):
    """No decision with that id was recorded by this bandit."""


class DuplicateRewardError(RewardError):
    """The decision was already rewarded; each decision takes exactly one reward."""
