"""`armature serve`, run as a user runs it: the console script in a subprocess, serving the
customer-triage example's webhook against a real Temporal dev server."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.service.client import show_run
from armature_temporal.service.webhook_auth import sign
from tests.fakes import free_port, run_armature, wait_serving
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
            "--max-streams-per-token",
            "1",
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
            await wait_healthy(http, proc)
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
                # --max-streams-per-token 1: every caller of this open server is "loopback".
                events = f"/run/{run_id}/events"
                async with http.stream("GET", events) as first:
                    second = await http.get(events)
                    assert first.status_code == 200
                assert second.status_code == 429, second.text
                assert "the most one token may hold (1)" in second.json()["error"]["message"]
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
        (
            ["specs/quickstart.yaml", "--host", "0.0.0.0"],
            {},
            "no API token exists: create one first (`armature tokens create",
        ),
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
        # A traceback (OverflowError from bind) before.
        (["specs/quickstart.yaml", "--port", "99999"], {}, "Invalid value for '--port'"),
    ],
    ids=["open-without-token", "same-path-twice", "open-without-secret", "port-out-of-range"],
)
async def test_serve_refuses_setups_that_cannot_work_or_are_unsafe(
    args: list[str], env: dict[str, str], words: str
) -> None:
    # No --address and no server: each refusal must come before anything is started.
    done = await run_armature("serve", *args, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert "started the local Temporal dev server" not in done.stderr


async def wait_healthy(http: httpx.AsyncClient, proc: subprocess.Popen[str]) -> None:
    await wait_serving(http, proc, "/healthz")


async def slow_headers_closed_after(port: int) -> float:
    """Seconds until the server closes a connection whose headers never end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(b"POST /hooks/triage HTTP/1.1\r\nHost: x\r\nX-Slow: a")
    await writer.drain()
    try:
        assert await asyncio.wait_for(reader.read(), 20) == b""
    finally:
        writer.close()
    return time.monotonic() - started


async def test_serve_applies_its_edge_options_and_warns_about_body_signatures(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    addr = str(temporal_env.client.service_client.config.target_host)
    port, secret = free_port(), "cli-secret"
    proc = subprocess.Popen(
        [
            *(ARMATURE, "serve", "specs/customer-triage.yaml", "--port", str(port)),
            *("--address", addr, "--task-queue", task_queue, "--accept-body-signatures"),
            *("--signature-tolerance", "60", "--request-timeout", "1", "--max-concurrency", "4"),
            *("--max-streams", "1"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ARMATURE_WEBHOOK_SECRET": secret},
    )
    body = json.dumps({"ticket": f"cli {task_queue}"}).encode()
    body_sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            await wait_healthy(http, proc)
            # 120 s old: inside the default 300 s window, outside the 60 s configured.
            stale = await http.post(
                "/hooks/triage",
                content=body,
                headers=sign(secret, body, timestamp=int(time.time()) - 120, path="/hooks/triage"),
            )
            github = {"X-Hub-Signature-256": body_sig, "X-GitHub-Delivery": "g-1"}
            legacy = await http.post("/hooks/triage", content=body, headers=github)
            replay = await http.post(
                "/hooks/triage", content=body, headers={**github, "X-GitHub-Delivery": "g-2"}
            )
            schema = await http.get("/openapi.json")
            took = await slow_headers_closed_after(port)
            # The connection ceiling: 4 requests, the 8 kept for health and decisions, 1 stream.
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4 + 8 + 1)]
            try:
                crowded = await http.get("/healthz")
            finally:
                for _, writer in held:
                    writer.close()
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert stale.status_code == 401 and "60 s either way" in stale.json()["error"]
    assert legacy.status_code == 202, legacy.text
    assert replay.status_code == 200 and replay.json()["run_id"] == legacy.json()["run_id"]
    # The run API's schema (open, like the API, on loopback while no token exists); it never
    # lists the hooks, which are for the secret's holders.
    assert schema.status_code == 200 and "/run/async" in schema.json()["paths"]
    assert not any(path.startswith("/hooks") for path in schema.json()["paths"])
    assert took < 4.0, f"--request-timeout 1 closed slow headers after {took:.1f} s"
    assert crowded.status_code == 503
    assert "warning: --accept-body-signatures is deprecated" in stderr
    await temporal_env.client.get_workflow_handle(legacy.json()["run_id"]).terminate("test done")


async def test_watch_serves_under_the_same_edge_limits(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    addr = str(temporal_env.client.service_client.config.target_host)
    port = free_port()
    proc = subprocess.Popen(
        [
            *(ARMATURE, "watch", "specs/customer-triage.yaml", "--port", str(port)),
            *("--address", addr, "--task-queue", task_queue, "--request-timeout", "1"),
            "--remove-on-exit",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ARMATURE_WEBHOOK_SECRET": "watch-secret"},
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            await wait_healthy(http, proc)
            unsigned = await http.post("/hooks/triage", json={"ticket": "x"})
            took = await slow_headers_closed_after(port)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert unsigned.status_code == 401 and "X-Armature-Timestamp" in unsigned.json()["error"]
    assert took < 4.0, f"--request-timeout 1 closed slow headers after {took:.1f} s"


@pytest.mark.parametrize(
    "command", [["serve", "specs/quickstart.yaml"], ["watch", "specs/customer-triage.yaml"]]
)
async def test_without_the_serve_extra_serve_and_watch_name_it(
    tmp_path: Path, command: list[str]
) -> None:
    """`armature serve` without fastapi printed a 60-line ModuleNotFoundError."""
    shadow = tmp_path / "no-serve-extra" / "fastapi"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ImportError("No module named fastapi", name="fastapi")\n'
    )
    path = os.pathsep.join(p for p in (str(shadow.parent), os.environ.get("PYTHONPATH")) if p)
    # Free ports for the local stack, should anything start it (it must not: 7233 is a user's).
    ports = {"ARMATURE_DEV_PORT": str(free_port()), "ARMATURE_UI_PORT": str(free_port())}
    done = await run_armature(*command, env={"PYTHONPATH": path, **ports}, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "needs the serve extra (missing: fastapi)" in done.stderr
    assert "[serve]" in done.stderr and "Traceback" not in done.stderr


async def test_the_help_example_runs_as_printed_and_curl_d_alone_is_taken(tmp_path: Path) -> None:
    """`armature serve --help`'s curl example failed (`curl -d` sends a form: 422). It runs
    here as printed — but on free ports, not 8787 and 7233 — and the same request without a
    Content-Type (what `curl -d` alone sends) is taken as the JSON it is."""
    import re
    import shutil
    import sys

    from armature_temporal.commands.serve import serve

    if shutil.which("curl") is None:
        pytest.skip("the example uses curl, which is not on PATH here")
    doc = " ".join((serve.__doc__ or "").split())
    example = doc.split("Example: ", 1)[1]
    port = free_port()
    script = example.replace("localhost:8787", f"localhost:{port}").replace(
        "armature serve specs/quickstart.yaml", f"armature serve specs/quickstart.yaml -p {port}"
    )
    assert script != example and "curl -sS" in script
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "ARMATURE_HOME": str(tmp_path / "home"),
        "ARMATURE_DEV_PORT": str(free_port()),
        "ARMATURE_UI_PORT": str(free_port()),
    }
    plain = (
        f'; curl -sS localhost:{port}/run -H "Authorization: Bearer $ARMATURE_TOKEN" '
        """-d '{"spec": "quickstart", "inputs": {"topic": "kelp"}}'"""
    )
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", f"set -m; {script}; echo; {plain.lstrip('; ')}; echo; kill %1"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        await run_armature("dev", "stop", env={k: env[k] for k in ("ARMATURE_HOME",)})
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == 2, (done.stdout, done.stderr)
    for answer in answers:
        assert answer.get("state") == "completed", answer
        assert re.match(r"quickstart-", answer["run_id"]), answer
    assert "Traceback" not in done.stderr
