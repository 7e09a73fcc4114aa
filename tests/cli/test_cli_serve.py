"""`armature serve`, run as a user runs it: the console script in a subprocess, serving the
customer-triage example's webhook against a real Temporal dev server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.service.client import show_run
from tests.fakes import free_port, run_armature
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")

ROOT = Path(__file__).resolve().parents[2]
ARMATURE = str(Path(sys.executable).parent / "armature")


async def test_serve_starts_runs_from_posts_until_stopped(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    addr = str(temporal_env.client.service_client.config.target_host)
    port = free_port()
    proc = subprocess.Popen(
        [
            ARMATURE,
            "serve",
            "specs/customer-triage.yaml",
            "--port",
            str(port),
            "--address",
            addr,
            "--task-queue",
            task_queue,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ARMATURE_WEBHOOK_SECRET": ""},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            for _ in range(300):
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, proc.communicate()[1]
                await asyncio.sleep(0.1)
            async with build_worker(client, task_queue):
                answer = await http.post(
                    "/hooks/triage",
                    json={"ticket": "My invoice is wrong"},
                    headers={"Idempotency-Key": "ticket-4711"},
                )
                assert answer.status_code == 202, answer.text
                run_id = answer.json()["run_id"]
                # The example's run goes on to wait at its approval gate.
                for _ in range(200):
                    view = await show_run(client, run_id)
                    if view.pending_gates:
                        break
                    await asyncio.sleep(0.1)
                assert [g.stage for g in view.pending_gates] == ["approve_reply"]
                again = await http.post(
                    "/hooks/triage",
                    json={"ticket": "My invoice is wrong"},
                    headers={"Idempotency-Key": "ticket-4711"},
                )
                assert again.status_code == 200 and again.json()["run_id"] == run_id
                await client.get_workflow_handle(run_id).terminate("test done")
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert f"POST http://127.0.0.1:{port}/hooks/triage → spec 'customer-triage'" in stderr
    assert "no authentication" in stderr


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["specs/quickstart.yaml"], {}, "no webhook triggers in the specs given ('quickstart')"),
        (
            ["specs/customer-triage.yaml", "specs/customer-triage.yaml"],
            {},
            "webhook path '/hooks/triage' is claimed twice",
        ),
        (
            ["specs/customer-triage.yaml", "--host", "0.0.0.0"],
            {"ARMATURE_WEBHOOK_SECRET": ""},
            "set $ARMATURE_WEBHOOK_SECRET",
        ),
    ],
    ids=["no-webhooks", "same-path-twice", "open-without-secret"],
)
async def test_serve_refuses_setups_that_cannot_work_or_are_unsafe(
    args: list[str], env: dict[str, str], words: str
) -> None:
    # No --address and no server: each refusal must come before anything is started.
    done = await run_armature("serve", *args, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert "started the local Temporal dev server" not in done.stderr
