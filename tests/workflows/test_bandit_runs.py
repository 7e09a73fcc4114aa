"""Spec arms are chosen by the bandit runtime and rewarded when the evidence arrives."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.store import TraceStore
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
ARMATURE = str(Path(sys.executable).parent / "armature")

TWO_ARMS = """\
name: learner
model_tiers:
  weak: {provider: simulate, quality: 0.3}
  strong: {provider: simulate, quality: 0.85}
stages:
  - id: answer
    role: {name: A, description: "answer", model_tier: weak}
    arms:
      - {arm_id: cheap, model_tier: weak}
      - {arm_id: good, model_tier: strong}
"""


async def test_selections_shift_to_the_better_arm_within_100_runs(
    client: Client, task_queue: str, armature_home: Path
) -> None:
    plan = plan_from(TWO_ARMS)
    async with build_worker(client, task_queue):
        for batch in range(10):
            handles = [
                await start(client, plan, task_queue, run_id=f"learn-{batch}-{i}")
                for i in range(10)
            ]
            await asyncio.gather(*(h.result() for h in handles))
    store = TraceStore()
    chosen = []
    for batch in range(10):
        for i in range(10):
            stage = next(r for r in store.records(f"learn-{batch}-{i}") if r.kind == "stage")
            chosen.append(stage.arm_id)
            assert stage.decision_id == f"learner:answer@learn-{batch}-{i}"
    late = chosen[50:]
    assert late.count("good") / len(late) >= 0.8, chosen
    shown = await asyncio.to_thread(
        subprocess.run,
        [ARMATURE, "bandit", "show", "learner:answer", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ},
        check=True,
    )
    arms = {a["arm_id"]: a for a in json.loads(shown.stdout)}
    assert arms["good"]["pulls"] + arms["cheap"]["pulls"] == 100
    assert arms["good"]["pulls"] >= 65 and arms["good"]["p_best"] > 0.9
    assert arms["good"]["mean"] > arms["cheap"]["mean"]


async def test_external_rewards_come_from_the_cli_once(client: Client, task_queue: str) -> None:
    plan = plan_from(
        TWO_ARMS.replace(
            "      - {arm_id: good, model_tier: strong}\n",
            "      - {arm_id: good, model_tier: strong}\n    reward: external\n",
        )
    )
    async with build_worker(client, task_queue):
        await (await start(client, plan, task_queue, run_id="ext-1")).result()
    decision = "learner:answer@ext-1"

    async def reward(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run, [ARMATURE, "reward", *args], capture_output=True, text=True
        )

    out_of_range = await reward(decision, "1.5")
    assert out_of_range.returncode == 2 and "1.5" in out_of_range.stderr
    ok = await reward(decision, "0.9")
    assert ok.returncode == 0, ok.stderr
    again = await reward(decision, "0.9")
    assert again.returncode == 2 and "already" in again.stderr.lower()
    unknown = await reward("learner:answer@nope", "1")
    assert unknown.returncode == 2


async def test_a_judge_rewards_the_arm_of_the_stage_it_judged(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(
        TWO_ARMS
        + """\
  - id: grade
    depends_on: [answer]
    role: {name: G, type: judge, description: "{{ answer.content }}", model_tier: strong}
"""
    )
    async with build_worker(client, task_queue):
        result = await (await start(client, plan, task_queue, run_id="judged-1")).result()
    shown = await asyncio.to_thread(
        subprocess.run,
        [ARMATURE, "bandit", "show", "learner:answer", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    arms = json.loads(shown.stdout)
    rewarded = [a for a in arms if a["rewarded"]]
    assert len(rewarded) == 1
    assert rewarded[0]["reward_sum"] == pytest.approx(result.outputs["grade"]["score"], abs=1e-6)


async def test_maintenance_runs_as_a_schedule_and_snapshots_learning_curves(
    client: Client, task_queue: str
) -> None:
    from temporalio.client import ScheduleOverlapPolicy

    from armature_temporal.service.schedules import apply_triggers

    plan = plan_from(TWO_ARMS.replace("name: learner", "name: maintained"))
    async with build_worker(client, task_queue):
        await (await start(client, plan, task_queue, run_id="maint-run-1")).result()
        changes = await apply_triggers(client, plan, task_queue)
        assert [(c.schedule_id, c.action) for c in changes] == [
            ("maintained-bandit-maintenance", "created")
        ]
        handle = client.get_schedule_handle("maintained-bandit-maintenance")
        desc = await handle.describe()
        assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
        await handle.trigger()
        for _ in range(100):
            runs = [
                w
                async for w in client.list_workflows(
                    "WorkflowType = 'BanditMaintenance' AND ExecutionStatus = 'Completed'"
                )
            ]
            if runs:
                break
            await asyncio.sleep(0.1)
        assert runs, "the maintenance schedule ran nothing"
        await apply_triggers(client, plan, task_queue, delete=True)
    shown = await asyncio.to_thread(
        subprocess.run,
        [ARMATURE, "bandit", "history", "maintained:answer", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    snapshots = json.loads(shown.stdout)
    assert {s["arm_id"] for s in snapshots} == {"cheap", "good"}
    assert sum(s["pulls"] for s in snapshots) == 1
