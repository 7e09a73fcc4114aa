"""`armature serve` as the HTTP sidecar, run as a user runs it: the console script serving the
run API for the example specs against a real Temporal dev server. Open on loopback while no
token exists (with a warning), closed by the first `armature tokens create` without a restart,
and the README's "HTTP sidecar" curl example run as it is written."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.fakes import free_port, run_armature, wait_serving
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")

ROOT = Path(__file__).resolve().parents[2]
ARMATURE = str(Path(sys.executable).parent / "armature")


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- test:http-sidecar -->\n```bash\n(.*?)```", text, re.S)
    assert found, "README.md lost its tested HTTP sidecar example"
    return found.group(1)


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="needs curl and jq")
async def test_serve_run_api_opens_closes_with_the_first_token_and_runs_the_readme_example(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    addr = str(temporal_env.client.service_client.config.target_host)
    port = free_port()
    proc = subprocess.Popen(
        [
            ARMATURE,
            "serve",
            "specs/quickstart.yaml",
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
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            await wait_serving(http, proc)
            health = (await http.get("/health")).json()
            assert health == {"ok": True, "specs": 2, "temporal": "reachable"}
            # Open: no token exists and it listens on loopback.
            assert (await http.get("/workflows")).status_code == 200
            # The webhook paths keep working beside the API.
            assert (await http.get("/healthz")).json() == {"ok": True, "hooks": 1}
            created = await run_armature("tokens", "create", "readme", "--scope", "admin")
            assert created.returncode == 0, created.stderr
            token = created.stdout.strip()
            assert token.startswith("arm_") and "shown this once" in created.stderr
            for _ in range(40):  # closed within about a second, without a restart
                if (await http.get("/workflows")).status_code == 401:
                    break
                await asyncio.sleep(0.1)
            refused = await http.get("/workflows")
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthorized"
            async with build_worker(client, task_queue):
                done = await asyncio.to_thread(
                    subprocess.run,
                    ["bash", "-euo", "pipefail", "-c", readme_example()],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    env={**os.environ, "ARMATURE_URL": base, "ARMATURE_TOKEN": token},
                )
            assert done.returncode == 0, done.stdout + done.stderr
            assert '"status":"completed"' in done.stdout
            assert '"decision":"approve"' in done.stdout and '"by":"readme"' in done.stdout
            listed = await run_armature("tokens", "list", "--json")
            assert '"last_used_at": null' not in listed.stdout and token not in listed.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert "anyone on this machine can start, cancel and approve runs" in stderr
    assert f"serving the run API at http://127.0.0.1:{port} for 2 spec(s)" in stderr
