"""What only the Redis bandit store needs shown: nothing lost under 8 processes, one reward per
decision under racing processes, numbers stored exactly, key prefixes that isolate, and the
errors for an unreachable server or a URL of the wrong kind.

The backend-independent behaviour runs on Redis in ``test_bandit_backends.py``. Every test here
uses its own key prefix (``redis_prefix`` in conftest) and skips when the server does not answer.
"""

from __future__ import annotations

import multiprocessing as mp
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from armature_temporal.bandit import (
    BanditConfigError,
    BanditError,
    BanditRuntime,
    DuplicateRewardError,
    RuntimeRegistry,
    StorageConfig,
)
from armature_temporal.bandit._math import observe_one
from armature_temporal.bandit._redis import safe_url
from tests.store.conftest import REDIS_URL

ARMS = [{"arm_id": "good"}, {"arm_id": "fair"}, {"arm_id": "poor"}]
REWARD = {"good": 1.0, "fair": 0.5, "poor": 0.25}  # exact in binary: sums compare with ==


def storage(prefix: str) -> dict[str, Any]:
    return {"backend": "redis", "url": REDIS_URL, "prefix": prefix}


def open_bandit(prefix: str, name: str = "agent", **config: Any) -> BanditRuntime:
    body = {"arms": ARMS, "storage": storage(prefix)} | config
    return BanditRuntime.open(name, body, seed=1, clock=lambda: datetime(2025, 1, 1, tzinfo=UTC))


def _select_and_reward(prefix: str, worker: int, n: int, barrier: Any, queue: Any) -> None:
    runtime = BanditRuntime.open("agent", storage=storage(prefix), seed=worker)
    sent: dict[str, float] = {}
    barrier.wait()
    for _ in range(n):
        s = runtime.select(context={"worker": worker % 2})
        runtime.update(s.decision_id, REWARD[s.arm_id])
        sent[s.decision_id] = REWARD[s.arm_id]
    runtime.close()
    queue.put(sent)


def test_eight_processes_lose_none_of_4000_updates(redis_prefix: str) -> None:
    """8 processes × 500 selections and rewards: the evidence is exactly the rewards sent."""
    bandit = open_bandit(redis_prefix, change_detection={"method": "none"})
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(8), ctx.Queue()
    procs = [
        ctx.Process(target=_select_and_reward, args=(redis_prefix, i, 500, barrier, queue))
        for i in range(8)
    ]
    for p in procs:
        p.start()
    sent: dict[str, float] = {}
    for _ in procs:
        sent |= queue.get(timeout=300)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert len(sent) == 4000  # distinct decision ids
    arms = bandit.arms()
    assert sum(a.pulls for a in arms) == 4000
    assert sum(a.rewarded for a in arms) == 4000
    assert sum(a.reward_sum for a in arms) == sum(sent.values())
    assert sum(a.alpha - 1.0 for a in arms) == sum(sent.values())  # evidence, not just counters
    assert sum(a.alpha + a.beta - 2.0 for a in arms) == 4000.0
    own = [bandit.backend.stats("agent", f"worker={w}") for w in (0, 1)]  # unseeded evidence
    assert sum(a.s + a.f for stats in own for a in stats.values()) == 4000.0
    assert sum(a.s for stats in own for a in stats.values()) == sum(sent.values())
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        stored = {
            key.rsplit(":d:", 1)[1]: client.hget(key, "reward")
            for key in client.scan_iter(match=f"{redis_prefix}{{agent}}:d:*", count=1000)
        }
    finally:
        client.close()
    assert stored == {d: repr(r) for d, r in sent.items()}  # each decision rewarded, once


def _race(prefix: str, decisions: list[str], barrier: Any, queue: Any) -> None:
    runtime = BanditRuntime.open("agent", storage=storage(prefix))
    won: list[str] = []
    barrier.wait()
    for decision in decisions:
        try:
            runtime.update(decision, 1.0)
            won.append(decision)
        except DuplicateRewardError:
            pass
    runtime.close()
    queue.put(won)


def test_racing_processes_reward_each_decision_once(redis_prefix: str) -> None:
    bandit = open_bandit(redis_prefix)
    decisions = [bandit.select().decision_id for _ in range(50)]
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(redis_prefix, decisions, barrier, queue)) for _ in range(4)
    ]
    for p in procs:
        p.start()
    won = [d for _ in procs for d in queue.get(timeout=120)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert sorted(won) == sorted(decisions)  # every decision won by exactly one process
    assert sum(a.rewarded for a in bandit.arms()) == 50
    assert sum(a.alpha + a.beta - 2.0 for a in bandit.arms()) == 50.0


def test_evidence_is_stored_exactly_as_the_pure_math_computes_it(redis_prefix: str) -> None:
    """Lua's doubles written as %.17g read back bit for bit: == against observe_one."""
    bandit = open_bandit(
        redis_prefix, arms=[{"arm_id": "only", "prior": [2.0, 3.0]}], discount=0.993, window=37
    )
    dyn = bandit.config.dynamics()
    expected = (0.0,) * 5
    for i in range(120):
        reward = ((i * 7919) % 101) / 100
        bandit.update(bandit.select().decision_id, reward)
        expected, _ = observe_one(expected, reward, 2.0, 3.0, dyn)
    stats = bandit.backend.stats("agent", "")["only"]
    assert (stats.s, stats.f) == (expected[0], expected[1])


def test_prefixes_isolate_bandits_of_the_same_name(redis_prefix: str) -> None:
    one = open_bandit(redis_prefix)
    two = open_bandit(redis_prefix + "other:")
    try:
        one.update(one.select().decision_id, 1.0)
        assert sum(a.pulls for a in one.arms()) == 1
        assert sum(a.pulls for a in two.arms()) == 0
    finally:
        one.close()
        two.close()
    registry = RuntimeRegistry()
    try:
        first = registry.backend(StorageConfig(**storage(redis_prefix)))
        assert registry.backend(StorageConfig(**storage(redis_prefix))) is first
        assert registry.backend(StorageConfig(**storage(redis_prefix + "b:"))) is not first
    finally:
        registry.close()


def test_an_unreachable_server_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "redis://:s3cret@127.0.0.1:1/0"
    with pytest.raises(BanditError) as err:
        BanditRuntime.open("agent", {"arms": ARMS, "storage": {"backend": "redis", "url": url}})
    message = str(err.value)
    assert "redis://:***@127.0.0.1:1/0" in message and "s3cret" not in message
    assert "ARMATURE_REDIS_URL" in message and "redis-server" in message
    monkeypatch.setenv("ARMATURE_REDIS_URL", "redis://127.0.0.1:2/3")
    with pytest.raises(BanditError, match=r"Redis server at redis://127\.0\.0\.1:2/3"):
        BanditRuntime.open("agent", {"arms": ARMS, "storage": {"backend": "redis"}})


def test_urls_and_prefixes_of_the_wrong_backend_are_refused() -> None:
    with pytest.raises(BanditConfigError, match=r"does not fit backend 'redis'.*redis://"):
        BanditRuntime.open(
            "agent", {"arms": ARMS, "storage": {"backend": "redis", "url": "sqlite:///x.db"}}
        )
    with pytest.raises(BanditConfigError, match="does not fit backend 'postgres'"):
        BanditRuntime.open(
            "agent",
            {"arms": ARMS, "storage": {"backend": "postgres", "url": "redis://127.0.0.1/0"}},
        )
    with pytest.raises(BanditConfigError, match="'prefix' is for the redis backend"):
        BanditRuntime.open(
            "agent", {"arms": ARMS, "storage": {"backend": "sqlite", "prefix": "p:"}}
        )


def test_safe_url_hides_only_the_password() -> None:
    assert safe_url("redis://user:pw@host:6380/2") == "redis://user:***@host:6380/2"
    assert safe_url("redis://host:6379/0") == "redis://host:6379/0"
