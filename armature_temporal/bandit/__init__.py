"""Thompson-sampling bandits: choose among arms (models, prompts, params), learn from rewards.

Standalone::

    from armature_temporal.bandit import configure_runtime, runtime_select, runtime_update

    await configure_runtime("my_agent", config={
        "arms": [{"arm_id": "concise", "params": {"temperature": 0.2}},
                 {"arm_id": "detailed", "params": {"temperature": 0.7}}],
        "storage": {"backend": "sqlite", "path": "armature.db"},
    })
    selection = await runtime_select("my_agent", user_id="user_123", context={"task": "triage"})
    await runtime_update("my_agent", decision_id=selection.decision_id, reward=1.0)

Beta posteriors with fractional rewards, per-context posteriors seeded from the global one,
change detection for drifting rewards, evolution of arms within declared bounds — see
:mod:`._math` for the model. Storage: ``memory``, ``sqlite``, ``postgres`` or ``redis``
(``{"backend": "redis", "url": "redis://host:6379/0", "prefix": "armature:bandit:"}``; Lua
scripts on the server); rewards are applied atomically in the store, once per decision.
:class:`BanditRuntime` is the synchronous core (for a Temporal local activity); the coroutines
wrap it.
"""

from armature_temporal.bandit._api import (
    RuntimeRegistry,
    close_runtimes,
    configure_runtime,
    get_runtime,
    history,
    maintenance,
    runtime_arms,
    runtime_events,
    runtime_select,
    runtime_update,
)
from armature_temporal.bandit._config import BanditConfig, StorageConfig
from armature_temporal.bandit._errors import (
    BanditConfigError,
    BanditError,
    DuplicateRewardError,
    InvalidRewardError,
    RewardError,
    UnknownBanditError,
    UnknownDecisionError,
)
from armature_temporal.bandit._models import (
    ArmReport,
    BanditEvent,
    MaintenanceReport,
    RewardReceipt,
    Selection,
    Snapshot,
)
from armature_temporal.bandit._runtime import BanditRuntime

__all__ = [
    "ArmReport",
    "BanditConfig",
    "BanditConfigError",
    "BanditError",
    "BanditEvent",
    "BanditRuntime",
    "DuplicateRewardError",
    "InvalidRewardError",
    "MaintenanceReport",
    "RewardError",
    "RewardReceipt",
    "RuntimeRegistry",
    "Selection",
    "Snapshot",
    "StorageConfig",
    "UnknownBanditError",
    "UnknownDecisionError",
    "close_runtimes",
    "configure_runtime",
    "get_runtime",
    "history",
    "maintenance",
    "runtime_arms",
    "runtime_events",
    "runtime_select",
    "runtime_update",
]
