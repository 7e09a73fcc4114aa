"""Large outputs go to external storage, so a run's history stays small."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from armature_temporal.service.client import run_outcome
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_one_mib_stage_output_keeps_history_under_64_kib(
    client: Client, task_queue: str
) -> None:
    plan = plan_from("""\
name: big
model_tiers: {small: {provider: simulate}}
stages:
  - id: produce
    tool: {name: "tests.fakes:fake_big_output", args: {size: 1048576}}
  - id: use
    depends_on: [produce]
    role: {name: U, description: "{{ produce.text | length }} bytes arrived"}
""")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        result = await run_outcome(handle)
    assert result is not None
    assert result.state == "completed", result.reason
    assert len(result.outputs["produce"]["text"]) == 1048576
    desc = await handle.describe()
    size = desc.raw_info.history_size_bytes
    assert size < 64 * 1024, f"history is {size} bytes"


async def test_a_500_stage_run_stays_well_within_history_limits(
    client: Client, task_queue: str
) -> None:
    lines = [
        "name: long",
        "model_tiers: {small: {provider: simulate}}",
        "stages:",
        "  - {id: s0, role: {name: W, description: start}}",
    ]
    for i in range(1, 500):
        lines.append(
            f"  - {{id: s{i}, depends_on: [s{i - 1}], "
            f"role: {{name: W, description: '{{{{ s{i - 1}.content | length }}}}'}}}}"
        )
    plan = plan_from("\n".join(lines) + "\n")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        result = await run_outcome(handle)
    assert result is not None and result.state == "completed", result and result.reason
    assert len(result.outputs) == 500
    desc = await handle.describe()
    # Temporal's limits: 51,200 events and 50 MB per history (warnings from 10k / 10 MB).
    assert desc.history_length < 10_000
    assert desc.raw_info.history_size_bytes < 10 * 1024 * 1024
