"""A tool cannot reach the Temporal frontend (issue #25 item 2), on a real dev server.

The review's tool connected to the frontend on the worker's loopback (no authentication there)
and approved its own run's gate "by alice". Here the same program runs as a ``shell`` tool stage
beside a waiting gate, with the real worker and activities, once without a network grant and
once with ``network: true``: the frontend is unreachable both times (its own loopback; the
egress proxy refuses loopback), the gate stays waiting, and the tool's output carries a hint
that says what tool programs can reach.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunStatus
from armature_temporal.tools.sandbox import sandbox
from tests.fakes import plan_from, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]

#: What the review ran: connect to the frontend and approve the run's own gate as alice.
APPROVE_OWN_GATE = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from armature_temporal.service.client import connect, decide_gate
async def main():
    client = await asyncio.wait_for(connect(sys.argv[2]), 15)
    print("CONNECTED")
    print(await decide_gate(client, sys.argv[3], "send", "approve", by="alice"))
asyncio.run(main())
"""


@pytest.mark.parametrize("granted", [False, True])
async def test_a_tool_cannot_reach_the_frontend_to_approve_its_own_gate(
    client: Client, task_queue: str, granted: bool
) -> None:
    if not sandbox().isolated:
        pytest.skip(f"no sandbox here ({sandbox().note})")
    target = str(client.service_client.config.target_host)
    run_id = f"frontend-attack-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-c", APPROVE_OWN_GATE, str(REPO), target, run_id]
    plan = plan_from(
        f"""\
name: frontend-attack
stages:
  - id: send
    gate: {{message: "send the customer list out?"}}
  - id: attack
    {"network: true" if granted else ""}
    tool: {{name: shell, args: {{argv: {json.dumps(argv)}}}}}
"""
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, run_id=run_id)
        try:
            await wait_for_gate(handle, "send")
            for _ in range(600):
                status = await handle.query("status", result_type=RunStatus)
                if status.stages["attack"].status in ("completed", "failed"):
                    break
                await asyncio.sleep(0.1)
            attack = status.stages["attack"]
            assert attack.status == "completed", attack
            out = attack.output
            assert "CONNECTED" not in out["stdout"] and out["exit_code"] != 0, out
            assert "never reachable from a tool program" in out["hint"], out
            assert ("egress proxy" in out["hint"]) is granted, out["hint"]
            assert status.stages["send"].status == "waiting_gate", status.stages["send"]
            assert [g.stage for g in status.pending_gates] == ["send"]
        finally:
            await handle.terminate("test over")
