"""The standalone API: bandits by name, as coroutines.

    await configure_runtime("my_agent", config={"arms": [...], "storage": {...}})
    selection = await runtime_select("my_agent", user_id="u1", context={"task": "triage"})
    await runtime_update("my_agent", decision_id=selection.decision_id, reward=1.0)
    await runtime_arms("my_agent")

Names map to :class:`~._runtime.BanditRuntime` objects held by a :class:`RuntimeRegistry`.
The process has one default registry — the one piece of module-level state, which the
name-based API needs; tests and embedders can make their own. Database work runs in a worker
thread (``asyncio.to_thread``) so the event loop never blocks; the memory backend is called
inline (it never blocks). Runtimes that share a database URL share one engine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from armature_temporal.bandit._backend import Backend
from armature_temporal.bandit._config import BanditConfig, StorageConfig, parse_config
from armature_temporal.bandit._errors import UnknownBanditError
from armature_temporal.bandit._memory import MemoryBackend
from armature_temporal.bandit._models import (
    ArmReport,
    BanditEvent,
    MaintenanceReport,
    RewardReceipt,
    Selection,
    Snapshot,
)
from armature_temporal.bandit._runtime import BanditRuntime, Context, open_backend, storage_key

__all__ = [
    "RuntimeRegistry",
    "close_runtimes",
    "configure_runtime",
    "default_registry",
    "get_runtime",
    "history",
    "maintenance",
    "runtime_arms",
    "runtime_events",
    "runtime_select",
    "runtime_update",
]

T = TypeVar("T")


class RuntimeRegistry:
    """Named bandit runtimes and the backends they share (one per storage URL)."""

    def __init__(self) -> None:
        self._runtimes: dict[str, BanditRuntime] = {}
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()

    def backend(self, storage: StorageConfig) -> Backend:
        key = storage_key(storage)
        with self._lock:
            backend = self._backends.get(key)
        if backend is None:
            fresh = MemoryBackend() if key == "memory" else open_backend(storage)
            with self._lock:
                backend = self._backends.setdefault(key, fresh)
            if backend is not fresh:
                fresh.close()
        return backend

    def configure(
        self,
        name: str,
        config: BanditConfig | Mapping[str, Any] | None = None,
        *,
        storage: StorageConfig | Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> BanditRuntime:
        """Configure (or reconfigure, or load) ``name`` and register its runtime."""
        parsed = None if config is None else parse_config(name, config)
        where = (
            StorageConfig.model_validate(storage)
            if storage is not None
            else parsed.storage
            if parsed is not None
            else StorageConfig()
        )
        runtime = BanditRuntime.open(
            name, parsed, storage=where, backend=self.backend(where), seed=seed
        )
        with self._lock:
            self._runtimes[name] = runtime
        return runtime

    def get(self, name: str) -> BanditRuntime:
        runtime = self._runtimes.get(name)
        if runtime is None:
            raise UnknownBanditError(
                f"bandit {name!r} is not configured in this process; call "
                f"configure_runtime({name!r}, config={{'arms': [...]}}) first (or "
                f"configure_runtime({name!r}) to load a configuration stored by another process)"
            )
        return runtime

    def names(self) -> list[str]:
        return sorted(self._runtimes)

    def close(self) -> None:
        """Forget every runtime and release every backend."""
        with self._lock:
            backends = list(self._backends.values())
            self._runtimes.clear()
            self._backends.clear()
        for backend in backends:
            backend.close()


default_registry = RuntimeRegistry()


async def _run(runtime: BanditRuntime, call: Callable[[], T]) -> T:
    if isinstance(runtime.backend, MemoryBackend):
        return call()
    return await asyncio.to_thread(call)


async def configure_runtime(
    name: str,
    config: BanditConfig | Mapping[str, Any] | None = None,
    *,
    storage: StorageConfig | Mapping[str, Any] | None = None,
    seed: int | None = None,
    registry: RuntimeRegistry = default_registry,
) -> BanditRuntime:
    """Configure bandit ``name``; reconfiguring adds and retires arms, keeping history.

    Args:
        name: The bandit's name.
        config: Arms, storage, dynamics, contexts, evolution (dict or :class:`BanditConfig`).
            ``None`` loads the configuration another process stored under ``name``.
        storage: Where to look when ``config`` is ``None`` (default: the Armature database).
        seed: Seed for this process's sampling (reproducible tests).
        registry: Where the runtime is registered (default: the process's registry).

    Returns:
        The runtime, for synchronous use (e.g. from a Temporal local activity).
    """
    parsed = None if config is None else parse_config(name, config)
    backend = (
        parsed.storage.backend
        if parsed is not None
        else StorageConfig.model_validate(storage or {}).backend
    )
    if backend == "memory":
        return registry.configure(name, parsed, storage=storage, seed=seed)
    return await asyncio.to_thread(registry.configure, name, parsed, storage=storage, seed=seed)


def get_runtime(name: str, *, registry: RuntimeRegistry = default_registry) -> BanditRuntime:
    """The runtime configured under ``name`` in this process."""
    return registry.get(name)


async def runtime_select(
    name: str,
    *,
    user_id: str | None = None,
    context: Context = None,
    decision_id: str | None = None,
    registry: RuntimeRegistry = default_registry,
) -> Selection:
    """Choose an arm for one decision (Thompson sampling, per context). See
    :meth:`BanditRuntime.select`."""
    runtime = registry.get(name)
    return await _run(
        runtime, lambda: runtime.select(user_id=user_id, context=context, decision_id=decision_id)
    )


async def runtime_update(
    name: str, *, decision_id: str, reward: float, registry: RuntimeRegistry = default_registry
) -> RewardReceipt:
    """Reward a decision once, with a number in [0, 1]. See :meth:`BanditRuntime.update`."""
    runtime = registry.get(name)
    return await _run(runtime, lambda: runtime.update(decision_id, reward))


async def runtime_arms(
    name: str,
    context: Context = None,
    *,
    include_retired: bool = False,
    registry: RuntimeRegistry = default_registry,
) -> list[ArmReport]:
    """Each arm's pulls, reward sum, posterior mean, 95% interval and P(best) in ``context``."""
    runtime = registry.get(name)
    return await _run(runtime, lambda: runtime.arms(context, include_retired=include_retired))


async def runtime_events(
    name: str, *, registry: RuntimeRegistry = default_registry
) -> list[BanditEvent]:
    """Every logged change to bandit ``name``, oldest first."""
    runtime = registry.get(name)
    return await _run(runtime, runtime.events)


async def maintenance(
    name: str,
    *,
    contexts: Sequence[Context] = (),
    registry: RuntimeRegistry = default_registry,
) -> MaintenanceReport:
    """Evolution, retirement and a posterior snapshot. See :meth:`BanditRuntime.maintenance`."""
    runtime = registry.get(name)
    return await _run(runtime, lambda: runtime.maintenance(contexts=contexts))


async def history(name: str, *, registry: RuntimeRegistry = default_registry) -> list[Snapshot]:
    """The snapshots ``maintenance`` took of bandit ``name`` (learning curves), oldest first."""
    runtime = registry.get(name)
    return await _run(runtime, runtime.history)


async def close_runtimes(*, registry: RuntimeRegistry = default_registry) -> None:
    """Forget every configured bandit and close their stores (tests, shutdown)."""
    await asyncio.to_thread(registry.close)
