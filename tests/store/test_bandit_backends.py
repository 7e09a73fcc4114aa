"""The bandit runtime on every backend — memory, SQLite, PostgreSQL and Redis — with the same
tests.

PostgreSQL cases use a fresh schema in the session's database (``pg_database`` in conftest),
Redis cases a fresh key prefix on the server at ``$ARMATURE_TEST_REDIS_URL`` (``redis_prefix``
in conftest, its keys deleted afterwards); both skip, saying why, when the server is unreachable.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL

from armature_temporal.bandit import (
    BanditConfigError,
    BanditRuntime,
    DuplicateRewardError,
    InvalidRewardError,
    RuntimeRegistry,
    UnknownBanditError,
    UnknownDecisionError,
    configure_runtime,
    history,
    maintenance,
    runtime_arms,
    runtime_events,
    runtime_select,
    runtime_update,
)
from armature_temporal.bandit._math import Dynamics, observe_one
from tests.store.conftest import REDIS_URL

ARMS = [{"arm_id": "good", "params": {"temperature": 0.2}}, {"arm_id": "bad"}]


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The storage section of a config: memory, a SQLite file, a fresh PostgreSQL schema, or a
    fresh key prefix on the Redis server."""
    if request.param == "memory":
        return {"backend": "memory"}
    if request.param == "sqlite":
        return {"backend": "sqlite", "path": str(tmp_path / "bandit.db")}
    if request.param == "redis":
        return {
            "backend": "redis",
            "url": REDIS_URL,
            "prefix": request.getfixturevalue("redis_prefix"),
        }
    database: URL = request.getfixturevalue("pg_database")
    schema = f"b_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(
        host=database.host,
        port=database.port or 5432,
        user=database.username,
        password=database.password,
        dbname=database.database,
        autocommit=True,
    ) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = database.update_query_dict({"options": f"-csearch_path={schema}"})
    return {"backend": "postgres", "url": url.render_as_string(hide_password=False)}


@pytest.fixture
def runtimes(storage: dict[str, Any]) -> Iterator[list[BanditRuntime]]:
    """Runtimes opened by a test, closed after it."""
    opened: list[BanditRuntime] = []
    yield opened
    for runtime in opened:
        runtime.close()


def open_bandit(
    storage: dict[str, Any], runtimes: list[BanditRuntime], name: str = "agent", **config: Any
) -> BanditRuntime:
    body = {"arms": ARMS, "storage": storage} | config
    runtime = BanditRuntime.open(name, body, seed=1, clock=lambda: datetime(2025, 1, 1, tzinfo=UTC))
    runtimes.append(runtime)
    return runtime


def by_id(runtime: BanditRuntime, context: Any = None, **kw: Any) -> dict[str, Any]:
    return {a.arm_id: a for a in runtime.arms(context, **kw)}


# --- selection, rewards, reports --------------------------------------------------------------


def test_select_update_and_report(storage: dict[str, Any], runtimes: list[BanditRuntime]) -> None:
    bandit = open_bandit(storage, runtimes)
    rewards = {"good": [1.0, 0.5, 1.0], "bad": [0.0, 0.25]}
    pending = {"good": list(rewards["good"]), "bad": list(rewards["bad"])}
    while pending["good"] or pending["bad"]:
        selection = bandit.select(user_id="u1")
        assert selection.params == {"good": {"temperature": 0.2}, "bad": {}}[selection.arm_id]
        queue = pending[selection.arm_id]
        bandit.update(selection.decision_id, queue.pop() if queue else 0.5)
    arms = by_id(bandit)
    for arm_id, expected in rewards.items():
        arm = arms[arm_id]
        extra = arm.rewarded - len(expected)
        assert arm.pulls == arm.rewarded
        assert arm.reward_sum == pytest.approx(sum(expected) + 0.5 * extra)
        assert arm.alpha == pytest.approx(1 + arm.reward_sum)
        assert arm.beta == pytest.approx(1 + arm.rewarded - arm.reward_sum)
        assert arm.mean == pytest.approx(arm.alpha / (arm.alpha + arm.beta))
        assert arm.low < arm.mean < arm.high
    assert sum(a.p_best for a in arms.values()) == pytest.approx(1.0)


def test_the_bandit_learns_the_better_arm(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes)
    for _ in range(150):
        selection = bandit.select()
        bandit.update(selection.decision_id, 1.0 if selection.arm_id == "good" else 0.0)
    arms = by_id(bandit)
    assert arms["good"].pulls > 120
    assert arms["good"].p_best > 0.99


def test_a_second_reward_is_refused_and_changes_nothing(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes)
    selection = bandit.select()
    bandit.update(selection.decision_id, 0.75)
    before = by_id(bandit)[selection.arm_id]
    with pytest.raises(DuplicateRewardError) as err:
        bandit.update(selection.decision_id, 0.0)
    message = str(err.value)
    assert "'agent'" in message and repr(selection.decision_id) in message
    assert "0.75" in message and "new selection" in message
    after = by_id(bandit)[selection.arm_id]
    assert (after.rewarded, after.reward_sum, after.alpha) == (
        before.rewarded,
        before.reward_sum,
        before.alpha,
    )


@pytest.mark.parametrize("reward", [1.5, -0.1, math.nan, math.inf, "1", None])
def test_invalid_rewards_are_refused_and_leave_the_decision_open(
    storage: dict[str, Any], runtimes: list[BanditRuntime], reward: Any
) -> None:
    bandit = open_bandit(storage, runtimes)
    selection = bandit.select()
    with pytest.raises(InvalidRewardError) as err:
        bandit.update(selection.decision_id, reward)
    assert repr(reward) in str(err.value) and "[0, 1]" in str(err.value)
    assert sum(a.rewarded for a in bandit.arms()) == 0
    bandit.update(selection.decision_id, 1.0)  # still rewardable once
    assert sum(a.rewarded for a in bandit.arms()) == 1


def test_unknown_decisions_are_refused(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes)
    other = open_bandit(storage, runtimes, name="other")
    with pytest.raises(UnknownDecisionError, match="no decision 'nope' was recorded"):
        bandit.update("nope", 1.0)
    foreign = other.select()
    with pytest.raises(UnknownDecisionError):
        bandit.update(foreign.decision_id, 1.0)  # decision ids belong to one bandit
    other.update(foreign.decision_id, 1.0)


def test_selecting_again_with_the_same_decision_id_is_idempotent(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes)
    first = bandit.select(decision_id="run-1/stage-a", context={"task": "triage"}, user_id="u")
    for _ in range(5):
        again = bandit.select(decision_id="run-1/stage-a")
        assert (again.arm_id, again.context, again.user_id) == (first.arm_id, "task=triage", "u")
    assert sum(a.pulls for a in bandit.arms()) == 1
    bandit.update("run-1/stage-a", 1.0)


def test_reward_updates_match_the_pure_math_including_detected_changes(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    """The SQL UPDATE reproduces observe_one exactly, context and global rows alike."""
    bandit = open_bandit(
        storage,
        runtimes,
        arms=[{"arm_id": "only", "prior": [2.0, 3.0]}],
        discount=0.995,
        window=150,
    )
    dyn = bandit.config.dynamics()
    assert dyn == Dynamics(discount=0.995, window=150.0)
    rewards = [1.0, 0.9, 0.75] * 60 + [0.0, 0.1] * 40
    expected, changes = (0.0,) * 5, []
    for i, reward in enumerate(rewards):
        selection = bandit.select(context={"segment": "a"})
        receipt = bandit.update(selection.decision_id, reward)
        expected, alarm = observe_one(expected, reward, 2.0, 3.0, dyn)
        assert receipt.change_detected == alarm, i
        if alarm:
            changes.append(i)
    assert changes, "the drop should have been detected"
    for context in (None, {"segment": "a"}):
        arm = by_id(bandit, context)["only"]
        assert arm.rewarded == len(rewards) and arm.resets == len(changes)
        if context is None:
            assert (arm.alpha, arm.beta) == pytest.approx((2.0 + expected[0], 3.0 + expected[1]))
    kinds = [e.kind for e in bandit.events()]
    assert kinds.count("change_detected") == 2 * len(changes)  # global and context rows


def test_a_detected_change_resets_every_arm_of_the_context(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes, sampling="thompson")
    for _ in range(300):
        s = bandit.select()
        bandit.update(s.decision_id, 1.0 if s.arm_id == "good" else 0.0)
    assert by_id(bandit)["good"].alpha > 200
    changed = False
    for _ in range(200):
        s = bandit.select()
        receipt = bandit.update(s.decision_id, 0.0 if s.arm_id == "good" else 1.0)
        if receipt.change_detected:
            changed = True
            break
    assert changed
    arms = by_id(bandit)
    assert arms["bad"].alpha + arms["bad"].beta == 2.0  # forgotten along with the changed arm
    assert arms["good"].alpha + arms["good"].beta == 2.0
    assert arms["good"].rewarded > 200  # lifetime counters are kept


def test_contexts_learn_separately_and_report_their_own_pulls(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes, contexts={"keys": ["segment"]})
    for i in range(400):
        segment = "a" if i % 2 else "b"
        s = bandit.select(context={"segment": segment, "noise": i})
        assert s.context == f"segment={segment}"
        wins = (s.arm_id == "good") == (segment == "a")
        bandit.update(s.decision_id, 1.0 if wins else 0.0)
    a, b = by_id(bandit, {"segment": "a"}), by_id(bandit, {"segment": "b"})
    assert a["good"].p_best > 0.95 and b["bad"].p_best > 0.95
    assert a["good"].pulls + a["bad"].pulls == 200
    assert sum(x.pulls for x in by_id(bandit).values()) == 400


def test_contexts_off_pools_every_decision(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes, contexts={"enabled": False})
    assert bandit.select(context={"segment": "a"}).context == ""


# --- reconfiguration, evolution, maintenance --------------------------------------------------


def test_reconfiguring_adds_and_retires_arms_keeping_history(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes)
    for _ in range(40):
        s = bandit.select()
        bandit.update(s.decision_id, 1.0 if s.arm_id == "good" else 0.0)
    before = by_id(bandit)
    bandit.apply_config(
        {
            "arms": [{"arm_id": "good", "params": {"temperature": 0.3}}, {"arm_id": "new"}],
            "storage": storage,
        }
    )
    arms = by_id(bandit, include_retired=True)
    assert arms["bad"].status == "retired"
    assert (arms["bad"].pulls, arms["bad"].reward_sum) == (
        before["bad"].pulls,
        before["bad"].reward_sum,
    )
    assert arms["good"].rewarded == before["good"].rewarded
    assert arms["good"].params == {"temperature": 0.3}
    assert {a.arm_id for a in bandit.arms()} == {"good", "new"}
    assert all(bandit.select().arm_id != "bad" for _ in range(30))
    bandit.apply_config({"arms": ARMS, "storage": storage})
    again = by_id(bandit)
    assert again["bad"].status == "active" and again["bad"].pulls == before["bad"].pulls
    kinds = [(e.kind, e.arm_id) for e in bandit.events()]
    for item in [
        ("arm_added", "new"),
        ("arm_retired", "bad"),
        ("arm_params_changed", "good"),
        ("arm_reactivated", "bad"),
        ("arm_retired", "new"),
    ]:
        assert item in kinds
    assert [k for k, _ in kinds].count("configured") == 3


def test_maintenance_breeds_within_bounds_retires_losers_and_snapshots(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    arms = [
        {"arm_id": f"t{t}", "params": {"temperature": t / 10, "style": "plain"}} for t in (1, 5, 9)
    ]
    evolution = {
        "params": {
            "temperature": {"type": "float", "low": 0.0, "high": 1.0},
            "style": {"type": "choice", "choices": ["plain", "rich"]},
        },
        "min_pulls": 1,
        "retire_below": 0.05,
        "retire_patience": 2,
        "children_per_round": 1,
        "max_arms": 4,
        "prior_shrink": 0.5,
        "prior_max": 10.0,
    }
    bandit = open_bandit(storage, runtimes, arms=arms, evolution=evolution)
    for _ in range(300):
        s = bandit.select()
        bandit.update(s.decision_id, 1.0 if s.arm_id == "t9" else 0.0)
    first = bandit.maintenance()
    assert len(first.bred) == 1 and first.retired == []
    child = by_id(bandit)[first.bred[0]]
    assert child.origin == "evolved"
    assert 0.0 <= child.params["temperature"] <= 1.0 and child.params["style"] in ("plain", "rich")
    assert 2.0 < child.alpha + child.beta <= 12.0  # a shrunk, capped prior from the parents
    second = bandit.maintenance()
    assert set(second.retired) <= {"t1", "t5"} and second.retired
    assert all(r.arm_id in by_id(bandit, include_retired=True) for r in first.snapshot)
    snapshots = bandit.history()
    assert len(snapshots) == len(first.snapshot) + len(second.snapshot)
    assert {s.taken_at for s in snapshots} == {first.at}  # the test clock is fixed
    kinds = [e.kind for e in bandit.events()]
    assert "arm_bred" in kinds and "arm_retired" in kinds
    bred = next(e for e in bandit.events() if e.kind == "arm_bred")
    assert bred.detail["parents"] and bred.detail["params"] == child.params


# --- concurrency ------------------------------------------------------------------------------


def test_concurrent_threads_lose_no_pull_and_no_reward(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes, contexts={"seed_strength": 0.0})
    per_thread, threads = 100, 8
    errors: list[BaseException] = []

    def client() -> None:
        try:
            for _ in range(per_thread):
                s = bandit.select(context={"segment": "x"})
                bandit.update(s.decision_id, 0.5)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    arms = bandit.arms()
    total = per_thread * threads
    assert sum(a.pulls for a in arms) == total
    assert sum(a.rewarded for a in arms) == total
    assert sum(a.reward_sum for a in arms) == pytest.approx(total * 0.5)
    ctx = bandit.arms({"segment": "x"})
    assert sum(a.alpha + a.beta - 2 for a in ctx) == pytest.approx(total)


def test_racing_rewards_for_one_decision_record_exactly_one(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    bandit = open_bandit(storage, runtimes)
    decision = bandit.select().decision_id
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def client() -> None:
        barrier.wait()
        try:
            bandit.update(decision, 1.0)
            outcomes.append("ok")
        except DuplicateRewardError:
            outcomes.append("refused")

    workers = [threading.Thread(target=client) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(outcomes) == ["ok"] + ["refused"] * 7
    assert sum(a.rewarded for a in bandit.arms()) == 1


def _process_client(storage: dict[str, Any], n: int, queue: Any) -> None:
    runtime = BanditRuntime.open("agent", storage=storage)  # the stored configuration
    total = 0.0
    for _ in range(n):
        s = runtime.select()
        reward = 1.0 if s.arm_id == "good" else 0.25
        runtime.update(s.decision_id, reward)
        total += reward
    runtime.close()
    queue.put(total)


def test_concurrent_processes_lose_nothing(
    storage: dict[str, Any], runtimes: list[BanditRuntime]
) -> None:
    if storage["backend"] == "memory":
        pytest.skip("the memory backend lives in one process")
    bandit = open_bandit(storage, runtimes)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_process_client, args=(storage, 100, queue)) for _ in range(8)]
    for p in procs:
        p.start()
    totals = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    arms = bandit.arms()
    assert sum(a.pulls for a in arms) == 800
    assert sum(a.rewarded for a in arms) == 800
    assert sum(a.reward_sum for a in arms) == pytest.approx(sum(totals))


# --- the standalone async API -----------------------------------------------------------------


async def test_standalone_api_round_trip(storage: dict[str, Any]) -> None:
    registry = RuntimeRegistry()
    try:
        await configure_runtime(
            "my_agent", config={"arms": ARMS, "storage": storage}, seed=3, registry=registry
        )
        selection = await runtime_select(
            "my_agent", user_id="user_123", context={"task": "triage"}, registry=registry
        )
        assert selection.arm_id in {"good", "bad"} and selection.context == "task=triage"
        receipt = await runtime_update(
            "my_agent", decision_id=selection.decision_id, reward=1.0, registry=registry
        )
        assert receipt.arm_id == selection.arm_id
        with pytest.raises(DuplicateRewardError):
            await runtime_update(
                "my_agent", decision_id=selection.decision_id, reward=1.0, registry=registry
            )
        arms = await runtime_arms("my_agent", registry=registry)
        assert sum(a.pulls for a in arms) == 1
        report = await maintenance("my_agent", contexts=[{"task": "triage"}], registry=registry)
        assert {s.context for s in report.snapshot} == {"", "task=triage"}
        assert len(await history("my_agent", registry=registry)) == len(report.snapshot)
        assert (await runtime_events("my_agent", registry=registry))[0].kind == "configured"
        with pytest.raises(UnknownBanditError, match="configure_runtime\\('nobody'"):
            await runtime_select("nobody", registry=registry)
    finally:
        registry.close()


async def test_a_second_process_loads_the_stored_configuration(storage: dict[str, Any]) -> None:
    if storage["backend"] == "memory":
        pytest.skip("memory bandits are not shared")
    writer, reader = RuntimeRegistry(), RuntimeRegistry()
    try:
        await configure_runtime(
            "shared", config={"arms": ARMS, "storage": storage, "discount": 0.99}, registry=writer
        )
        runtime = await configure_runtime("shared", storage=storage, registry=reader)
        assert runtime.config.discount == 0.99
        assert [a.arm_id for a in runtime.config.arms] == ["good", "bad"]
        with pytest.raises(UnknownBanditError, match="no stored configuration"):
            await configure_runtime("absent", storage=storage, registry=reader)
    finally:
        writer.close()
        reader.close()


def test_invalid_names_and_configs_are_refused(storage: dict[str, Any]) -> None:
    with pytest.raises(BanditConfigError, match="bandit name 'a b' is invalid"):
        BanditRuntime.open("a b", {"arms": ARMS, "storage": storage})
    with pytest.raises(BanditConfigError, match=r"config\.arms"):
        BanditRuntime.open("x", {"arms": [], "storage": storage})
