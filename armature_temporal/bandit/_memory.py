"""The in-memory bandit store, for one process (tests, notebooks, benchmarks).

Selections take no lock: they read the current arrays (published copy-on-write), draw from a
per-thread generator and record the decision with atomic dict operations; pull counters are
per-thread shards summed on read. Rewards take a short per-bandit lock, under which the
evidence is read, updated by :func:`~._math.observe_one` and written back.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from armature_temporal.bandit._backend import duplicate_error, no_arms_error, unknown_error
from armature_temporal.bandit._errors import UnknownBanditError
from armature_temporal.bandit._math import (
    Dynamics,
    FloatArray,
    SelectionRule,
    observe_one,
    seeded_posterior,
    thompson,
)
from armature_temporal.bandit._models import (
    ArmRecord,
    ArmStats,
    BanditEvent,
    RewardReceipt,
    Selection,
    Snapshot,
)

__all__ = ["MemoryBackend"]


class _View(NamedTuple):
    """The active arms, published as one immutable object (copy-on-write)."""

    cols: np.ndarray[Any, np.dtype[np.intp]]
    ids: list[str]
    params: list[dict[str, Any]]
    a0: FloatArray
    b0: FloatArray


class _Context:
    """One context's per-arm arrays (columns as in the bandit's ``col`` map)."""

    FIELDS = ("s", "f", "up", "down", "n", "rewarded", "reward_sum", "resets")
    s: FloatArray
    f: FloatArray
    up: FloatArray
    down: FloatArray
    n: FloatArray
    rewarded: FloatArray
    reward_sum: FloatArray
    resets: FloatArray

    def __init__(self, capacity: int) -> None:
        for field in self.FIELDS:
            setattr(self, field, np.zeros(capacity))
        self.version = 0  # bumped (under the bandit's lock) after every change

    def grow(self, capacity: int) -> None:
        for field in self.FIELDS:
            old = getattr(self, field)
            new = np.zeros(capacity)
            new[: old.shape[0]] = old
            setattr(self, field, new)


class _Decision:
    __slots__ = ("a0", "arm_id", "b0", "context", "reward", "rewarded_at", "user_id")

    def __init__(
        self, context: str, arm_id: str, user_id: str | None, a0: float, b0: float
    ) -> None:
        self.context, self.arm_id, self.user_id = context, arm_id, user_id
        self.a0, self.b0 = a0, b0
        self.reward: float | None = None
        self.rewarded_at: str | None = None


class _MemBandit:
    def __init__(self) -> None:
        self.config: dict[str, Any] | None = None
        self.fingerprint = ""
        self.arms: dict[str, ArmRecord] = {}
        self.col: dict[str, int] = {}
        self.a0 = np.zeros(0)
        self.b0 = np.zeros(0)
        self.contexts: dict[str, _Context] = {}
        self.view = _View(np.zeros(0, dtype=np.intp), [], [], np.zeros(0), np.zeros(0))
        self.decisions: dict[str, _Decision] = {}
        self.lock = threading.Lock()
        self.local = threading.local()
        self.shards: list[dict[tuple[str, str], int]] = []
        self.events: list[BanditEvent] = []
        self.snapshots: list[Snapshot] = []
        self.ids = itertools.count()
        self.prefix = uuid.uuid4().hex[:12]
        # context -> (view, global version, own version, alpha, beta, mean); a stale entry
        # is recomputed, never patched, so readers need no lock.
        self.posteriors: dict[str, tuple[_View, int, int, FloatArray, FloatArray, FloatArray]] = {}

    def publish(self) -> None:
        """Rebuild the active-arm view after a structural change (caller holds the lock)."""
        active = sorted(
            (r for r in self.arms.values() if r.status == "active"), key=lambda r: r.position
        )
        cols = np.array([self.col[r.arm_id] for r in active], dtype=np.intp)
        self.view = _View(
            cols,
            [r.arm_id for r in active],
            [r.params for r in active],
            self.a0[cols].copy(),
            self.b0[cols].copy(),
        )

    def context(self, key: str) -> _Context:
        ctx = self.contexts.get(key)
        if ctx is None:
            ctx = self.contexts[key] = _Context(self.a0.shape[0])
        return ctx

    def pulls(self) -> dict[tuple[str, str], int]:
        total: dict[tuple[str, str], int] = {}
        for shard in list(self.shards):
            for key, count in shard.copy().items():
                total[key] = total.get(key, 0) + count
        return total


class MemoryBackend:
    """Bandits held in this process's memory (lost when it exits)."""

    kind: Literal["memory"] = "memory"

    def __init__(self) -> None:
        self._bandits: dict[str, _MemBandit] = {}
        self._lock = threading.Lock()

    def _bandit(self, name: str, create: bool = False) -> _MemBandit:
        bandit = self._bandits.get(name)
        if bandit is None:
            if not create:
                raise UnknownBanditError(
                    f"bandit {name!r} is not configured in this process's memory store; call "
                    f"configure_runtime({name!r}, config=...) first"
                )
            with self._lock:
                bandit = self._bandits.setdefault(name, _MemBandit())
        return bandit

    # --- configuration -----------------------------------------------------------------

    def load_config(self, name: str) -> dict[str, Any] | None:
        bandit = self._bandits.get(name)
        return None if bandit is None else bandit.config

    def save_config(self, name: str, config: dict[str, Any], fingerprint: str, at: str) -> bool:
        bandit = self._bandit(name, create=True)
        with bandit.lock:
            changed = bandit.fingerprint != fingerprint
            bandit.config, bandit.fingerprint = config, fingerprint
        return changed

    def arm_records(self, name: str) -> list[ArmRecord]:
        bandit = self._bandits.get(name)
        if bandit is None:
            return []
        return sorted(bandit.arms.values(), key=lambda r: r.position)

    def add_arm(self, name: str, record: ArmRecord) -> bool:
        bandit = self._bandit(name, create=True)
        with bandit.lock:
            if record.arm_id in bandit.arms:
                return False
            col = len(bandit.col)
            capacity = col + 1
            for ctx in bandit.contexts.values():
                ctx.grow(capacity)
            a0, b0 = np.zeros(capacity), np.zeros(capacity)
            a0[:col], b0[:col] = bandit.a0, bandit.b0
            a0[col], b0[col] = record.prior_alpha, record.prior_beta
            bandit.a0, bandit.b0 = a0, b0
            bandit.col[record.arm_id] = col
            position = max((r.position for r in bandit.arms.values()), default=-1) + 1
            bandit.arms[record.arm_id] = record.model_copy(
                update={"position": max(record.position, position)}
            )
            bandit.publish()
        return True

    def set_arm(self, name: str, arm_id: str, **fields: Any) -> None:
        bandit = self._bandit(name)
        with bandit.lock:
            record = bandit.arms[arm_id].model_copy(update=fields)
            bandit.arms[arm_id] = record
            col = bandit.col[arm_id]
            a0, b0 = bandit.a0.copy(), bandit.b0.copy()
            a0[col], b0[col] = record.prior_alpha, record.prior_beta
            bandit.a0, bandit.b0 = a0, b0
            bandit.publish()

    # --- the hot path ------------------------------------------------------------------

    def select(
        self,
        name: str,
        context: str,
        user_id: str | None,
        decision_id: str | None,
        rng: np.random.Generator,
        rule: SelectionRule,
        now: Callable[[], str],
    ) -> Selection:
        bandit = self._bandit(name)
        view = bandit.view
        if not view.ids:
            raise no_arms_error(name)
        i = 0
        if len(view.ids) > 1:
            alpha, beta, mean = self._posterior(bandit, view, context, rule.seed_strength)
            i = int(thompson(alpha, beta, rng, rule.optimistic, mean))
        arm_id = view.ids[i]
        record = _Decision(context, arm_id, user_id, float(view.a0[i]), float(view.b0[i]))
        if decision_id is None:
            decision_id = f"{bandit.prefix}-{next(bandit.ids):x}"
            bandit.decisions[decision_id] = record
        else:
            existing = bandit.decisions.setdefault(decision_id, record)
            if existing is not record:  # a retried selection: the same answer, no new pull
                arm = bandit.arms[existing.arm_id]
                return Selection.model_construct(
                    name=name,
                    decision_id=decision_id,
                    arm_id=existing.arm_id,
                    params=arm.params,
                    context=existing.context,
                    user_id=existing.user_id,
                )
        shard: dict[tuple[str, str], int] | None = getattr(bandit.local, "pulls", None)
        if shard is None:
            shard = bandit.local.pulls = {}
            bandit.shards.append(shard)
        key = (context, arm_id)
        shard[key] = shard.get(key, 0) + 1
        return Selection.model_construct(
            name=name,
            decision_id=decision_id,
            arm_id=arm_id,
            params=view.params[i],
            context=context,
            user_id=user_id,
        )

    @staticmethod
    def _posterior(
        bandit: _MemBandit, view: _View, context: str, strength: float
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        glob = bandit.contexts.get("")
        own = bandit.contexts.get(context) if context else None
        g_version = -1 if glob is None else glob.version
        c_version = -1 if own is None else own.version
        cached = bandit.posteriors.get(context)
        if cached is not None and cached[0] is view and cached[1:3] == (g_version, c_version):
            return cached[3], cached[4], cached[5]
        alpha: FloatArray
        beta: FloatArray
        if glob is None:
            alpha, beta = view.a0, view.b0
        elif context == "":
            alpha, beta = view.a0 + glob.s[view.cols], view.b0 + glob.f[view.cols]
        else:
            zeros = np.zeros(len(view.ids))
            alpha, beta = seeded_posterior(
                view.a0,
                view.b0,
                glob.s[view.cols],
                glob.f[view.cols],
                zeros if own is None else own.s[view.cols],
                zeros if own is None else own.f[view.cols],
                strength,
            )
        mean = alpha / (alpha + beta)
        bandit.posteriors[context] = (view, g_version, c_version, alpha, beta, mean)
        return alpha, beta, mean

    def reward(
        self, name: str, decision_id: str, reward: float, at: str, dyn: Dynamics
    ) -> RewardReceipt:
        bandit = self._bandit(name)
        with bandit.lock:
            decision = bandit.decisions.get(decision_id)
            if decision is None:
                raise unknown_error(name, decision_id)
            if decision.reward is not None:
                raise duplicate_error(name, decision_id, decision.reward, decision.rewarded_at)
            decision.reward, decision.rewarded_at = reward, at
            col = bandit.col[decision.arm_id]
            changed = False
            for key in ("",) if decision.context == "" else ("", decision.context):
                ctx = bandit.context(key)
                state = (
                    float(ctx.s[col]),
                    float(ctx.f[col]),
                    float(ctx.up[col]),
                    float(ctx.down[col]),
                    float(ctx.n[col]),
                )
                (s, f, up, down, n), alarm = observe_one(
                    state, reward, decision.a0, decision.b0, dyn
                )
                ctx.s[col], ctx.f[col], ctx.up[col], ctx.down[col], ctx.n[col] = s, f, up, down, n
                ctx.rewarded[col] += 1
                ctx.reward_sum[col] += reward
                ctx.version += 1
                if alarm:
                    changed = True
                    ctx.resets[col] += 1
                    if dyn.reset == "context":
                        for field in (ctx.s, ctx.f, ctx.up, ctx.down, ctx.n):
                            field[:] = 0.0
                    bandit.events.append(_change_event(at, decision.arm_id, key, state))
        return RewardReceipt(
            name=name,
            decision_id=decision_id,
            arm_id=decision.arm_id,
            context=decision.context,
            reward=reward,
            change_detected=changed,
        )

    # --- reading and logging -------------------------------------------------------------

    def contexts(self, name: str) -> list[str]:
        """The context keys this bandit has decided in ('' left out), sorted."""
        return sorted({c for (c, _) in self._bandit(name).pulls() if c})

    def stats(self, name: str, context: str) -> dict[str, ArmStats]:
        bandit = self._bandit(name)
        pulls = bandit.pulls()
        ctx = bandit.contexts.get(context)
        out: dict[str, ArmStats] = {}
        for arm_id, col in bandit.col.items():
            count = (
                sum(c for (_, a), c in pulls.items() if a == arm_id)
                if context == ""
                else pulls.get((context, arm_id), 0)
            )
            if ctx is None:
                out[arm_id] = ArmStats(arm_id=arm_id, pulls=count)
                continue
            out[arm_id] = ArmStats(
                arm_id=arm_id,
                s=float(ctx.s[col]),
                f=float(ctx.f[col]),
                pulls=count,
                rewarded=int(ctx.rewarded[col]),
                reward_sum=float(ctx.reward_sum[col]),
                resets=int(ctx.resets[col]),
            )
        return out

    def log(self, name: str, events: Sequence[BanditEvent]) -> None:
        self._bandit(name, create=True).events.extend(events)

    def events(self, name: str) -> list[BanditEvent]:
        return list(self._bandit(name).events)

    def add_snapshots(self, name: str, rows: Sequence[Snapshot]) -> None:
        self._bandit(name).snapshots.extend(rows)

    def snapshots(self, name: str) -> list[Snapshot]:
        return list(self._bandit(name).snapshots)

    def close(self) -> None:
        """Nothing to release; the data lives as long as this object."""


def _change_event(at: str, arm_id: str, context: str, state: tuple[float, ...]) -> BanditEvent:
    s, f, up, down, n = state
    return BanditEvent(
        at=at,
        kind="change_detected",
        arm_id=arm_id,
        context=context,
        detail={
            "direction": "up" if up >= down else "down",
            "evidence_dropped": s + f,
            "rewards_since_reset": int(n),
        },
    )
