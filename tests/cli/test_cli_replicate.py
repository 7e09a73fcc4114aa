"""`armature run --replicate N`: simulated noise follows the inputs and the replicate number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.fakes import run_armature
from worker import build_worker

SPEC = """\
name: replicated
inputs:
  type: object
  properties: {topic: {type: string}}
  required: [topic]
model_tiers:
  small: {provider: simulate, quality: 0.6}
stages:
  - id: answer
    role: {name: A, model_tier: small, description: "Write about {{ topic }}."}
"""


@pytest.mark.asyncio(loop_scope="session")
async def test_replicate_picks_the_noise_and_the_run_id_does_not(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    address = str(temporal_env.client.service_client.config.target_host)

    async def outputs(*extra: str) -> str:
        done = await run_armature(
            "run", str(spec), "-i", "topic=tides", "-o", "-", "--address", address,
            "--task-queue", task_queue, *extra,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["answer"]["content"])

    async with build_worker(client, task_queue):
        first = await outputs()
        again = await outputs("--replicate", "0")
        other = await outputs("--replicate", "1")
        bad = await run_armature("run", str(spec), "-i", "topic=tides", "--replicate", "-1")
    assert first == again  # a new run id, the same inputs and replicate: the same output
    assert other != first
    assert bad.returncode == 2 and "--replicate" in bad.stderr
