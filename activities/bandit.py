"""Bandit activities: choose a stage's arm, reward it, and run maintenance.

The runtimes live in the Armature database (``$ARMATURE_DB_URL`` or SQLite under
``$ARMATURE_HOME``), or where ``$ARMATURE_BANDIT_URL`` says (Redis with a ``redis://`` URL),
one per ``<spec>:<stage>``, so every worker shares posteriors.
"""

from __future__ import annotations

import asyncio
import os
import threading
from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from armature_temporal.bandit import (
    BanditRuntime,
    DuplicateRewardError,
    RewardError,
    UnknownBanditError,
)
from armature_temporal.bandit.ladder import record_unlocks
from armature_temporal.bandit.spec_arms import ARM_KEY, bucket_of
from armature_temporal.runtime.models import (
    BanditMaintenanceInput,
    BanditRewardInput,
    BanditSelectInput,
    BanditSelectResult,
)
from armature_temporal.store.engine import database_url

__all__ = ["bandit_maintenance", "bandit_reward", "bandit_select", "runtime_for"]

_lock = threading.Lock()
_runtimes: dict[tuple[str, str], tuple[str, BanditRuntime]] = {}


def bandit_storage() -> dict[str, str]:
    """Where spec arms' bandits live: ``$ARMATURE_BANDIT_URL`` when set (a ``redis://`` URL
    puts them on Redis, a SQLAlchemy URL in that database), else the Armature database."""
    url = os.environ.get("ARMATURE_BANDIT_URL", "").strip()
    if url.startswith(("redis://", "rediss://", "unix://")):
        return {"backend": "redis", "url": url}
    return {"url": url or database_url()}


def runtime_for(name: str, arms: list[dict[str, object]] | None = None) -> BanditRuntime:
    """This process's runtime for ``name`` in the bandit store (:func:`bandit_storage`),
    (re)configured when the spec's arms changed; with ``arms=None`` the stored configuration
    is used."""
    storage = bandit_storage()
    url = storage["url"]
    signature = repr(arms)
    with _lock:
        cached = _runtimes.get((name, url))
        if cached is not None and (arms is None or cached[0] == signature):
            return cached[1]
        if cached is not None and arms is not None:
            cached[1].apply_config({"arms": arms, "storage": storage})
            _runtimes[(name, url)] = (signature, cached[1])
            return cached[1]
        config = None if arms is None else {"arms": arms, "storage": storage}
        runtime = BanditRuntime.open(name, config, storage=storage)
        _runtimes[(name, url)] = (signature, runtime)
        return runtime


def embed_text(text: str) -> tuple[str, list[float]]:
    """The embedder's name and the unit vector of ``text`` (the local model when installed,
    else the lexical one): what an embedding context feature is bucketed from."""
    from armature_temporal.experience.embeddings import get_embedder

    embedder = get_embedder(None)
    name = "local" if embedder.name != "lexical" else "lexical"
    return name, embedder.embed([text])[0]


def _context(inp: BanditSelectInput) -> dict[str, object] | None:
    if inp.embed_text is None or not inp.buckets:
        return inp.context
    model, vector = embed_text(inp.embed_text)
    key = f"{inp.context_embed or 'task'}~{model}"
    return {**(inp.context or {}), key: f"{bucket_of(vector, inp.buckets)}/{inp.buckets}"}


@activity.defn(name="bandit_select")
async def bandit_select(inp: BanditSelectInput) -> BanditSelectResult:
    """Thompson-sample an arm in the run's context; the same decision id always gets the same
    answer. A bred arm comes back with its tier, prompt and params."""
    runtime = await asyncio.to_thread(runtime_for, inp.name, inp.arms)
    context = await asyncio.to_thread(_context, inp)
    selection = await asyncio.to_thread(
        runtime.select, decision_id=inp.decision_id, context=context
    )
    bred = selection.params.get(ARM_KEY)
    return BanditSelectResult(
        arm_id=selection.arm_id,
        decision_id=selection.decision_id,
        arm=dict(bred) if isinstance(bred, dict) else None,
        context=selection.context,
    )


@activity.defn(name="bandit_reward")
async def bandit_reward(inp: BanditRewardInput) -> str:
    """Record a reward once. A retry of an already-applied reward is not an error."""
    try:
        runtime = await asyncio.to_thread(runtime_for, inp.name)
        receipt = await asyncio.to_thread(runtime.update, inp.decision_id, inp.reward)
    except DuplicateRewardError:
        return "already rewarded"
    except (RewardError, UnknownBanditError) as exc:
        raise ApplicationError(str(exc), type="bandit_reward", non_retryable=True) from exc
    try:
        await asyncio.to_thread(
            record_unlocks, runtime, inp.policy, receipt.context, datetime.now(UTC).isoformat()
        )
    except Exception as exc:  # the ladder's record never costs a reward
        activity.logger.warning("bandit %s: unlock events not recorded: %s", inp.name, exc)
    return "change detected" if receipt.change_detected else "rewarded"


@activity.defn(name="bandit_maintenance")
async def bandit_maintenance(inp: BanditMaintenanceInput) -> list[str]:
    """Evolution, retirement and a posterior snapshot for each named bandit."""
    from activities.bandit_evolve import evolve_stage

    done = []
    for name in inp.names:
        try:
            runtime = await asyncio.to_thread(runtime_for, name)
        except UnknownBanditError:
            continue  # no run has selected an arm yet
        spec_arms = inp.spec_arms.get(name)
        if spec_arms is not None and spec_arms.policy.evolve is not None:
            evo = await asyncio.to_thread(evolve_stage, runtime, spec_arms)
            refused = "; ".join(f"{a} refused: {why}" for a, why in evo.refused)
            done.append(
                f"{name}: evolution {'on' if evo.unlocked else 'locked'} ({evo.decisions} "
                f"rewarded decisions), retired {evo.retired or 'none'}, bred "
                f"{evo.bred or 'none'}"
                + (f"; {refused}" if refused else "")
                + (f" ({evo.note})" if evo.note else "")
            )
        report = await asyncio.to_thread(runtime.maintenance)
        done.append(f"{name}: retired {len(report.retired)}, bred {len(report.bred)}")
    return done
