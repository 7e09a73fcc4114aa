"""The bandit benchmark's throughput measurement: ``BanditRuntime`` on one store, timed.

``throughput`` runs select alone and select+update pairs through ``BanditRuntime`` with 1 or N
concurrent clients — threads sharing one runtime for the memory store, spawned processes (each
its own backend, as separate machines would be) for SQLite, PostgreSQL and Redis — then counts
what the store recorded against what the clients made, and checks that a second reward for one
decision is refused. ``postgres_database`` and ``redis_prefix`` give a run a store of its own on
a server and remove it afterwards. Used by ``bandit.py``, which prints the table.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from armature_temporal.bandit import BanditRuntime, DuplicateRewardError, StorageConfig
from armature_temporal.bandit._runtime import open_backend

__all__ = ["ARMS", "Throughput", "log", "postgres_database", "redis_prefix", "throughput"]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _work(runtime: BanditRuntime, n: int, mode: str) -> float:
    total = 0.0
    for _ in range(n):
        selection = runtime.select()
        if mode == "pairs":
            reward = 1.0 if selection.arm_id == "good" else 0.25
            runtime.update(selection.decision_id, reward)
            total += reward
    return total


def _warm(backend: Any, storage: dict[str, Any], seed: int) -> None:
    """Open connections, fill statement caches and spawn the generator outside the timing."""
    warm = BanditRuntime.open(
        f"bench-warm-{uuid.uuid4().hex[:8]}",
        {"arms": ARMS, "storage": storage},
        backend=backend,
        seed=seed,
    )
    _work(warm, 50, "pairs")


def _client(
    storage: dict[str, Any], name: str, n: int, mode: str, seed: int, barrier: Any, out: Any
) -> None:
    backend = open_backend(StorageConfig.model_validate(storage))
    _warm(backend, storage, seed)
    runtime = BanditRuntime.open(name, backend=backend, seed=seed)
    barrier.wait()
    start = time.perf_counter()
    total = _work(runtime, n, mode)
    out.put((total, start, time.perf_counter()))
    runtime.close()


def _shared_client(
    runtime: BanditRuntime, n: int, mode: str, barrier: Any, out: list[float]
) -> None:
    _warm(runtime.backend, {"backend": "memory"}, 0)
    barrier.wait()
    out.append(_work(runtime, n, mode))


@dataclass
class Throughput:
    backend: str
    clients: int
    select_per_s: float
    pairs_per_s: float
    pulls: int
    expected_pulls: int
    lost_updates: int
    duplicate_refused: bool
    notes: list[str] = field(default_factory=list)


ARMS = [{"arm_id": "good"}, {"arm_id": "fair"}, {"arm_id": "poor"}]


def throughput(
    backend: str, storage: dict[str, Any], clients: int, n_select: int, n_pairs: int
) -> Throughput:
    shared = storage["backend"] != "memory"
    rates: dict[str, float] = {}
    expected_reward = 0.0
    names = {mode: f"bench-{mode}-{uuid.uuid4().hex[:8]}" for mode in ("select", "pairs")}
    runtimes = {
        mode: BanditRuntime.open(names[mode], {"arms": ARMS, "storage": storage}, seed=7)
        for mode in names
    }
    for mode, n in (("select", n_select), ("pairs", n_pairs)):
        if not shared:
            barrier = threading.Barrier(clients + 1)
            totals: list[float] = []
            threads = [
                threading.Thread(
                    target=_shared_client, args=(runtimes[mode], n, mode, barrier, totals)
                )
                for _ in range(clients)
            ]
            for th in threads:
                th.start()
            barrier.wait()
            start = time.perf_counter()
            for th in threads:
                th.join()
            rates[mode] = clients * n / (time.perf_counter() - start)
            if mode == "pairs":
                expected_reward = sum(totals)
        else:
            ctx = mp.get_context("spawn")
            mp_barrier = ctx.Barrier(clients + 1)
            queue = ctx.Queue()
            procs = [
                ctx.Process(
                    target=_client,
                    args=(storage, names[mode], n, mode, 100 + i, mp_barrier, queue),
                )
                for i in range(clients)
            ]
            for proc in procs:
                proc.start()
            mp_barrier.wait()
            start = time.perf_counter()
            got = [queue.get() for _ in procs]
            wall = time.perf_counter() - start
            span = max(g[2] for g in got) - min(g[1] for g in got)
            log(f"    {mode}: wall {wall:.2f}s, clients' own span {span:.2f}s")
            rates[mode] = clients * n / span
            for proc in procs:
                proc.join()
            if mode == "pairs":
                expected_reward = sum(g[0] for g in got)
    runtime = runtimes["pairs"]
    arms = runtime.arms()
    pulls = sum(a.pulls for a in arms)
    rewarded = sum(a.rewarded for a in arms)
    reward_sum = sum(a.reward_sum for a in arms)
    expected = clients * n_pairs
    lost = (expected - rewarded) + (0 if abs(expected_reward - reward_sum) < 1e-6 else 1)
    probe = runtime.select()
    runtime.update(probe.decision_id, 1.0)
    try:
        runtime.update(probe.decision_id, 1.0)
        refused = False
    except DuplicateRewardError:
        refused = sum(a.rewarded for a in runtime.arms()) == rewarded + 1
    for rt in runtimes.values():
        rt.close()
    return Throughput(
        backend, clients, rates["select"], rates["pairs"], pulls, expected, lost, refused
    )


def postgres_database(url: str) -> tuple[str, Callable[[], None]] | None:
    """A fresh database on the server of ``url`` (dropped by the returned callback)."""
    try:
        import psycopg
        from sqlalchemy.engine import make_url
    except ImportError:
        return None
    base = make_url(url)
    dbname = f"armature_bench_{uuid.uuid4().hex[:8]}"
    conninfo = (
        f"host={base.host} port={base.port or 5432} user={base.username} dbname={base.database}"
    )
    if base.password:
        conninfo += f" password={base.password}"
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
    except psycopg.Error as exc:
        log(f"PostgreSQL unreachable at {base.host}:{base.port}: {exc}; skipping its rows")
        return None

    def drop() -> None:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')

    return base.set(database=dbname).render_as_string(hide_password=False), drop


def redis_prefix(url: str) -> tuple[str, Callable[[], None], str] | None:
    """A fresh key prefix on the Redis server at ``url`` (its keys deleted by the callback),
    and the server's persistence settings (what its figures were measured with)."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=3, decode_responses=True)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        log(f"Redis unreachable at {url}: {exc}; skipping its rows")
        client.close()
        return None
    try:
        conf = {
            k: v
            for name in ("appendonly", "appendfsync", "save")
            for k, v in client.config_get(name).items()
        }
        durability = (
            f"aof {conf['appendfsync']}" if conf.get("appendonly") == "yes" else "no aof"
        ) + (f", rdb {conf['save']!r}" if conf.get("save") else ", no rdb")
    except redis.ResponseError:  # CONFIG is disabled on some managed servers
        durability = "persistence unknown"
    log(f"Redis at {url}: {durability}")
    prefix = f"armature:bench:{uuid.uuid4().hex[:8]}:"

    def drop() -> None:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        client.close()

    return prefix, drop, durability
