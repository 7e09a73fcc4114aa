"""``BanditRuntime``: the synchronous, backend-agnostic core behind the standalone API.

One runtime serves one named bandit on one backend. It validates input, turns contexts into
keys, owns the randomness (one generator per thread, spawned from one seed) and the clock,
and composes the backend's operations into selection, reward, reports, reconfiguration and
maintenance (evolution, retirement, posterior snapshots). It is thread-safe and blocking, so
a Temporal local activity — or any thread — can call it directly; the async functions in
:mod:`._api` run it off the event loop.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from armature_temporal.bandit._backend import Backend
from armature_temporal.bandit._config import (
    NAME_PATTERN,
    REDIS_PREFIX,
    BanditConfig,
    StorageConfig,
    context_key,
    parse_config,
)
from armature_temporal.bandit._errors import (
    BanditConfigError,
    BanditError,
    InvalidRewardError,
    UnknownBanditError,
    UnknownDecisionError,
)
from armature_temporal.bandit._evolution import breed, child_prior, to_retire
from armature_temporal.bandit._math import beta_interval, p_best, seeded_posterior
from armature_temporal.bandit._memory import MemoryBackend
from armature_temporal.bandit._models import (
    ArmRecord,
    ArmReport,
    ArmStats,
    BanditEvent,
    MaintenanceReport,
    RewardReceipt,
    Selection,
    Snapshot,
)
from armature_temporal.settings import armature_home
from armature_temporal.store.engine import StoreError, database_url

__all__ = ["REDIS_DEFAULT_URL", "BanditRuntime", "open_backend", "storage_key", "storage_url"]

REDIS_DEFAULT_URL = "redis://127.0.0.1:6379/0"
Context = Mapping[str, Any] | str | None
_DECISION_ID = re.compile(r"^[^\x00-\x1f]{1,200}$")


def storage_url(storage: StorageConfig) -> str | None:
    """The database (or Redis) URL a storage config points at (``None`` for memory)."""
    if storage.backend == "memory":
        return None
    if storage.url:
        return storage.url
    if storage.backend == "redis":
        return os.environ.get("ARMATURE_REDIS_URL") or REDIS_DEFAULT_URL
    if storage.path:
        return f"sqlite:///{storage.path}"
    default = database_url()
    if storage.backend is None:
        return default
    if storage.backend == "sqlite":
        return (
            default
            if default.startswith("sqlite")
            else (f"sqlite:///{armature_home() / 'armature.db'}")
        )
    if not default.startswith("postgresql"):
        raise StoreError(
            "storage backend 'postgres' needs a URL: set storage.url (e.g. "
            "'postgresql+psycopg://user:password@host:5432/db') or $ARMATURE_DB_URL"
        )
    return default


def storage_key(storage: StorageConfig) -> str:
    """What identifies the store ``storage`` names: its URL, plus the key prefix for redis."""
    url = storage_url(storage) or "memory"
    if storage.backend == "redis":
        return f"{url}#{storage.prefix or REDIS_PREFIX}"
    return url


def open_backend(storage: StorageConfig) -> Backend:
    """A new backend for ``storage`` (the caller closes it)."""
    url = storage_url(storage)
    if url is None:
        return MemoryBackend()
    if storage.backend == "redis":
        from armature_temporal.bandit._redis import RedisBackend

        return RedisBackend(url, prefix=storage.prefix or REDIS_PREFIX)
    from armature_temporal.bandit._sql import SqlBackend

    return SqlBackend(url)


def _now() -> datetime:
    return datetime.now(UTC)


class BanditRuntime:
    """One named bandit on one backend. Thread-safe; every method blocks.

    Args:
        name: The bandit's name (letters, digits, ``_.:-``).
        config: Its configuration; stored in the backend (arms added, retired, updated).
        backend: Where it lives (:func:`open_backend` makes one from ``config.storage``).
        seed: Seed for the per-thread generators (``None``: fresh entropy).
        clock: Returns the current time (tests inject a fixed one).
    """

    def __init__(
        self,
        name: str,
        config: BanditConfig | Mapping[str, Any],
        backend: Backend,
        *,
        seed: int | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        if not re.match(NAME_PATTERN, name):
            raise BanditConfigError(
                f"bandit name {name!r} is invalid; use 1-100 letters, digits, '_', '.', ':', '-'"
            )
        self.name = name
        self.backend = backend
        self._clock = clock
        self._seeds = np.random.SeedSequence(seed)
        self._local = threading.local()
        self._spawn = threading.Lock()
        self.config = parse_config(name, config)
        self._dyn = self.config.dynamics()
        self._rule = self.config.selection_rule()
        self.apply_config(self.config)

    @classmethod
    def open(
        cls,
        name: str,
        config: BanditConfig | Mapping[str, Any] | None = None,
        *,
        storage: StorageConfig | Mapping[str, Any] | None = None,
        backend: Backend | None = None,
        seed: int | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> BanditRuntime:
        """Open ``name``: configure it, or (``config=None``) load its stored configuration."""
        parsed = None if config is None else parse_config(name, config)
        where = (
            StorageConfig.model_validate(storage)
            if storage is not None
            else (parsed.storage if parsed is not None else StorageConfig())
        )
        backend = backend or open_backend(where)
        if parsed is None:
            stored = backend.load_config(name)
            if stored is None:
                raise UnknownBanditError(
                    f"bandit {name!r} has no stored configuration in the {backend.kind} store; "
                    f"call configure_runtime({name!r}, config={{'arms': [...]}}) once"
                )
            parsed = parse_config(name, stored | {"storage": where.model_dump()})
        return cls(name, parsed, backend, seed=seed, clock=clock)

    # --- infrastructure ----------------------------------------------------------------

    def rng(self) -> np.random.Generator:
        """This thread's generator (spawned from the runtime's seed on first use)."""
        rng: np.random.Generator | None = getattr(self._local, "rng", None)
        if rng is None:
            with self._spawn:
                child = self._seeds.spawn(1)[0]
            rng = self._local.rng = np.random.default_rng(child)
        return rng

    def _at(self) -> str:
        return self._clock().isoformat()

    def context_key(self, context: Context) -> str:
        """The key this bandit files ``context`` under (``''`` when contexts are off)."""
        if not self.config.contexts.enabled:
            return ""
        return context_key(context, self.config.contexts.keys)

    def close(self) -> None:
        self.backend.close()

    # --- configuration -----------------------------------------------------------------

    def apply_config(self, config: BanditConfig | Mapping[str, Any]) -> list[BanditEvent]:
        """Store ``config``: add new arms, update changed ones, retire removed ones.

        Arms that stay keep their history; removed arms are retired (kept, never selected);
        arms bred by evolution stay active. Returns the logged changes.
        """
        config = parse_config(self.name, config)
        at = self._at()
        records = {r.arm_id: r for r in self.backend.arm_records(self.name)}
        changed = self.backend.save_config(
            self.name,
            config.model_dump(mode="json", exclude={"storage"}),
            config.fingerprint(),
            at,
        )
        events: list[BanditEvent] = []
        if changed:
            events.append(
                BanditEvent(
                    at=at,
                    kind="configured",
                    detail={
                        "arms": [a.arm_id for a in config.arms],
                        "fingerprint": config.fingerprint(),
                        "first": not records,
                    },
                )
            )
        for position, arm in enumerate(config.arms):
            old = records.get(arm.arm_id)
            a0, b0 = arm.prior
            if old is None:
                self.backend.add_arm(
                    self.name,
                    ArmRecord(
                        arm_id=arm.arm_id,
                        params=arm.params,
                        prior_alpha=a0,
                        prior_beta=b0,
                        position=position,
                        created_at=at,
                    ),
                )
                events.append(
                    BanditEvent(
                        at=at,
                        kind="arm_added",
                        arm_id=arm.arm_id,
                        detail={"params": arm.params, "prior": [a0, b0]},
                    )
                )
                continue
            if old.status == "retired":
                self.backend.set_arm(
                    self.name, arm.arm_id, status="active", retired_at=None, low_rounds=0
                )
                events.append(BanditEvent(at=at, kind="arm_reactivated", arm_id=arm.arm_id))
            if old.params != arm.params or (old.prior_alpha, old.prior_beta) != (a0, b0):
                self.backend.set_arm(
                    self.name, arm.arm_id, params=arm.params, prior_alpha=a0, prior_beta=b0
                )
                events.append(
                    BanditEvent(
                        at=at,
                        kind="arm_params_changed",
                        arm_id=arm.arm_id,
                        detail={"old": old.params, "new": arm.params, "prior": [a0, b0]},
                    )
                )
        wanted = {a.arm_id for a in config.arms}
        for old in records.values():
            if old.origin == "config" and old.status == "active" and old.arm_id not in wanted:
                self.backend.set_arm(self.name, old.arm_id, status="retired", retired_at=at)
                events.append(
                    BanditEvent(
                        at=at,
                        kind="arm_retired",
                        arm_id=old.arm_id,
                        detail={"reason": "removed from the configuration"},
                    )
                )
        self.backend.log(self.name, events)
        self.config, self._dyn, self._rule = config, config.dynamics(), config.selection_rule()
        return events

    # --- the hot path ------------------------------------------------------------------

    def select(
        self,
        *,
        user_id: str | None = None,
        context: Context = None,
        decision_id: str | None = None,
    ) -> Selection:
        """Choose an arm by Thompson sampling in ``context`` and record the decision.

        Args:
            user_id: Recorded with the decision.
            context: A mapping (e.g. ``{"task": "triage"}``) or a ready key; ``None``: global.
            decision_id: Make the call idempotent: selecting again with the same id returns
                the first answer and counts no new pull (a retried activity). Default: new id.
        """
        if decision_id is not None and not _DECISION_ID.match(decision_id):
            raise BanditError(
                f"bandit {self.name!r}: decision_id {decision_id!r} is invalid; use 1-200 "
                "printable characters, or leave it out to get a fresh id"
            )
        return self.backend.select(
            self.name,
            self.context_key(context),
            user_id,
            decision_id,
            self.rng(),
            self._rule,
            self._at,
        )

    def update(self, decision_id: str, reward: float) -> RewardReceipt:
        """Record ``reward`` in [0, 1] for a decision, once. Refusals change nothing.

        Raises:
            InvalidRewardError: ``reward`` is not a finite number in [0, 1].
            UnknownDecisionError: this bandit recorded no such decision.
            DuplicateRewardError: the decision was already rewarded.
        """
        if not isinstance(decision_id, str) or not decision_id:
            raise UnknownDecisionError(
                f"bandit {self.name!r}: decision_id {decision_id!r} is not a decision id; pass "
                "the decision_id of a Selection"
            )
        if (
            not isinstance(reward, numbers.Real)
            or not math.isfinite(float(reward))
            or not (0.0 <= float(reward) <= 1.0)
        ):
            raise InvalidRewardError(
                f"bandit {self.name!r}: reward {reward!r} for decision {decision_id!r} is not a "
                "number in [0, 1]; nothing was recorded — pass 0 (worst) to 1 (best), scaling "
                "other scores first, e.g. (score - low) / (high - low)"
            )
        return self.backend.reward(self.name, decision_id, float(reward), self._at(), self._dyn)

    # --- reports -----------------------------------------------------------------------

    def _posteriors(
        self, records: Sequence[ArmRecord], key: str
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], dict[str, ArmStats]]:
        glob = self.backend.stats(self.name, "")
        own = glob if key == "" else self.backend.stats(self.name, key)
        a0 = np.array([r.prior_alpha for r in records])
        b0 = np.array([r.prior_beta for r in records])
        gs = np.array([glob[r.arm_id].s if r.arm_id in glob else 0.0 for r in records])
        gf = np.array([glob[r.arm_id].f if r.arm_id in glob else 0.0 for r in records])
        if key == "":
            return a0 + gs, b0 + gf, own
        cs = np.array([own[r.arm_id].s if r.arm_id in own else 0.0 for r in records])
        cf = np.array([own[r.arm_id].f if r.arm_id in own else 0.0 for r in records])
        alpha, beta = seeded_posterior(a0, b0, gs, gf, cs, cf, self.config.contexts.seed_strength)
        return alpha, beta, own

    def arms(self, context: Context = None, *, include_retired: bool = False) -> list[ArmReport]:
        """Each arm's pulls, reward sum, posterior mean with 95% interval, and P(best)."""
        key = self.context_key(context)
        records = [
            r
            for r in self.backend.arm_records(self.name)
            if include_retired or r.status == "active"
        ]
        alpha, beta, stats = self._posteriors(records, key)
        active = np.array([r.status == "active" for r in records], dtype=bool)
        best = np.zeros(len(records))
        if active.any():
            best[active] = p_best(alpha[active], beta[active], self.rng(), self.config.p_best_draws)
        reports = []
        for i, record in enumerate(records):
            st = stats.get(record.arm_id) or ArmStats(arm_id=record.arm_id)
            low, high = beta_interval(float(alpha[i]), float(beta[i]))
            reports.append(
                ArmReport(
                    arm_id=record.arm_id,
                    params=record.params,
                    status=record.status,
                    origin=record.origin,
                    context=key,
                    pulls=st.pulls,
                    rewarded=st.rewarded,
                    reward_sum=st.reward_sum,
                    alpha=float(alpha[i]),
                    beta=float(beta[i]),
                    mean=float(alpha[i] / (alpha[i] + beta[i])),
                    low=low,
                    high=high,
                    p_best=float(best[i]),
                    resets=st.resets,
                )
            )
        return reports

    def events(self) -> list[BanditEvent]:
        """Every logged change, oldest first."""
        return self.backend.events(self.name)

    def history(self) -> list[Snapshot]:
        """The posterior snapshots taken by :meth:`maintenance`, oldest first."""
        return self.backend.snapshots(self.name)

    # --- maintenance -------------------------------------------------------------------

    def maintenance(self, *, contexts: Sequence[Context] = ()) -> MaintenanceReport:
        """One round: retire hopeless arms, breed new ones (if evolution is configured), then
        snapshot the global posterior (and that of each of ``contexts``) for learning curves.
        Every change is logged as an event."""
        at = self._at()
        rng = self.rng()
        events: list[BanditEvent] = []
        retired: list[str] = []
        bred: list[str] = []
        evo = self.config.evolution
        if evo is not None:
            records = [r for r in self.backend.arm_records(self.name) if r.status == "active"]
            alpha, beta, stats = self._posteriors(records, "")
            best = p_best(alpha, beta, rng, self.config.p_best_draws)
            by_id = {r.arm_id: float(p) for r, p in zip(records, best, strict=True)}
            pulls = {r.arm_id: stats[r.arm_id].pulls for r in records}
            counts, due = to_retire(by_id, pulls, {r.arm_id: r.low_rounds for r in records}, evo)
            for record in records:
                if counts[record.arm_id] != record.low_rounds:
                    self.backend.set_arm(self.name, record.arm_id, low_rounds=counts[record.arm_id])
            for arm_id in due:
                self.backend.set_arm(self.name, arm_id, status="retired", retired_at=at)
                retired.append(arm_id)
                events.append(
                    BanditEvent(
                        at=at,
                        kind="arm_retired",
                        arm_id=arm_id,
                        detail={
                            "reason": f"P(best) below {evo.retire_below} for "
                            f"{evo.retire_patience} rounds",
                            "p_best": by_id[arm_id],
                            "pulls": pulls[arm_id],
                        },
                    )
                )
            means = {
                r.arm_id: float(a / (a + b)) for r, a, b in zip(records, alpha, beta, strict=True)
            }
            eligible = [r for r in records if r.arm_id not in retired]
            ranked = sorted(
                (r for r in eligible if pulls[r.arm_id] >= evo.min_pulls),
                key=lambda r: -means[r.arm_id],
            )
            every = self.backend.arm_records(self.name)
            existing = [r.params for r in every]
            generation = {r.arm_id: r.generation for r in every}
            room = evo.max_arms - (len(records) - len(retired))
            for _ in range(min(evo.children_per_round, max(room, 0))):
                child = breed([(r.arm_id, r.params) for r in ranked], evo, rng, existing)
                if child is None:
                    break
                params, parents = child
                a0, b0 = child_prior(
                    [(stats[p].s, stats[p].f) for p in parents],
                    evo.prior_shrink,
                    evo.prior_max,
                    (1.0, 1.0),
                )
                gen = max(generation[p] for p in parents) + 1
                arm_id = f"evo.g{gen}.{int(rng.integers(16**6)):06x}"
                record = ArmRecord(
                    arm_id=arm_id,
                    params=params,
                    origin="evolved",
                    parents=parents,
                    generation=gen,
                    prior_alpha=a0,
                    prior_beta=b0,
                    position=len(every) + len(bred),
                    created_at=at,
                )
                if not self.backend.add_arm(self.name, record):
                    continue
                existing.append(params)
                generation[arm_id] = gen
                bred.append(arm_id)
                events.append(
                    BanditEvent(
                        at=at,
                        kind="arm_bred",
                        arm_id=arm_id,
                        detail={"parents": parents, "params": params, "prior": [a0, b0]},
                    )
                )
        self.backend.log(self.name, events)
        snapshot: list[Snapshot] = []
        for context in [None, *contexts]:
            for report in self.arms(context):
                snapshot.append(
                    Snapshot(
                        taken_at=at,
                        context=report.context,
                        arm_id=report.arm_id,
                        pulls=report.pulls,
                        rewarded=report.rewarded,
                        reward_sum=report.reward_sum,
                        alpha=report.alpha,
                        beta=report.beta,
                        mean=report.mean,
                        low=report.low,
                        high=report.high,
                        p_best=report.p_best,
                    )
                )
        self.backend.add_snapshots(self.name, snapshot)
        return MaintenanceReport(
            name=self.name, at=at, retired=retired, bred=bred, snapshot=snapshot, events=events
        )
