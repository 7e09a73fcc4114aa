"""`armature submit | runs | approve | reject | gates | cancel | dev`, run as a user runs them:
the real console script in a subprocess, against a real Temporal dev server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.fakes import free_port, run_armature
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
ARMATURE = str(Path(sys.executable).parent / "armature")


def address_of(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


async def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = await run_armature(*args, env=env, timeout=timeout)
    return result


async def test_submit_wait_prints_outputs_and_the_web_ui_link(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    addr = address_of(temporal_env)
    async with build_worker(client, task_queue):
        done = await cli(
            "submit",
            "specs/quickstart.yaml",
            "--wait",
            "--address",
            addr,
            "--task-queue",
            task_queue,
            "--input",
            "topic=coral reefs",
        )
        as_json = await cli(
            "submit",
            "specs/quickstart.yaml",
            "--wait",
            "--json",
            "--address",
            addr,
            "--task-queue",
            task_queue,
        )
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout and "outline" in done.stdout and "review" in done.stdout
    assert "Web UI: http://localhost:" in done.stdout and "/workflows/quickstart-" in done.stdout
    assert "outline: completed" in done.stderr  # progress while waiting
    view = json.loads(as_json.stdout)
    assert view["state"] == "completed"
    assert len(view["outputs"]["outline"]["points"]) == 3


async def test_gate_approve_reject_and_refusals_from_the_cli(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    addr = address_of(temporal_env)
    common = ["--address", addr]
    async with build_worker(client, task_queue):
        started = await cli(
            "submit", "specs/customer-triage.yaml", "--json", *common, "--task-queue", task_queue
        )
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run_id"]
        gates: dict[str, Any] = {}
        for _ in range(100):
            listed = json.loads((await cli("gates", "--json", *common)).stdout)
            gates = {g["run_id"]: g for g in listed}
            if run_id in gates:
                break
            await asyncio.sleep(0.1)
        assert [g["stage"] for g in gates[run_id]["gates"]] == ["approve_reply"]

        wrong = await cli("approve", run_id, "analyze", *common)
        assert wrong.returncode == 2
        assert "'analyze' is not waiting for approval" in wrong.stderr
        missing = await cli("approve", "no-such-run", "x", *common)
        assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr
        shown = json.loads((await cli("runs", "show", run_id, "--json", *common)).stdout)
        assert shown["state"] == "waiting_gate"
        assert shown["pending_gates"][0]["stage"] == "approve_reply"

        blank = await cli("reject", run_id, "approve_reply", "--reason", "", *common)
        assert blank.returncode == 2 and "needs a reason" in blank.stderr
        rejected = await cli("reject", run_id, "approve_reply", "--reason", "tone", *common)
        assert rejected.returncode == 0 and "approve_reply: rejected" in rejected.stdout
        for _ in range(100):
            shown = json.loads((await cli("runs", "show", run_id, "--json", *common)).stdout)
            if shown["status"] != "running":
                break
            await asyncio.sleep(0.1)
    assert shown["state"] == "rejected"
    assert "tone" in shown["reason"]
    listed_runs = json.loads(
        (await cli("runs", "list", "--json", "--spec", "customer-triage", *common)).stdout
    )
    assert run_id in [r["run_id"] for r in listed_runs]


async def test_failed_run_exits_1_and_bad_inputs_exit_2(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    addr = address_of(temporal_env)
    spec = tmp_path / "fails.yaml"
    spec.write_text("""\
name: fails
inputs: [n]
model_tiers: {only: {provider: simulate, valid_rate: 0.0}}
stages:
  - id: s
    role: {name: S, description: "{{ n }}"}
    output_mode: json
""")
    async with build_worker(client, task_queue):
        failed = await cli(
            "submit",
            str(spec),
            "--wait",
            "--input",
            "n=1",
            "--address",
            addr,
            "--task-queue",
            task_queue,
        )
    assert failed.returncode == 1
    assert "failed" in failed.stdout and "output invalid" in failed.stdout
    bad = await cli("submit", str(spec), "--address", addr)
    assert bad.returncode == 2
    assert "run inputs for 'fails' are invalid" in bad.stderr and "'n' is a required" in bad.stderr


async def test_unreachable_server_is_a_clear_error() -> None:
    port = free_port()
    result = await cli("runs", "list", "--address", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"cannot reach the Temporal server at 127.0.0.1:{port}" in result.stderr
    assert "armature dev" in result.stderr


async def test_submit_starts_the_local_stack_once_and_dev_stop_stops_it(tmp_path: Path) -> None:
    env = {
        "ARMATURE_HOME": str(tmp_path / "home"),
        "ARMATURE_DEV_PORT": str(free_port()),
        "ARMATURE_UI_PORT": str(free_port()),
    }
    try:
        first = await cli("submit", "specs/quickstart.yaml", "--wait", env=env)
        assert first.returncode == 0, first.stderr + first.stdout
        assert "started the local Temporal dev server" in first.stderr
        assert "started an Armature worker" in first.stderr
        assert f"http://localhost:{env['ARMATURE_UI_PORT']}/namespaces/default" in first.stdout
        assert (tmp_path / "home" / "temporal.db").exists()
        second = await cli("submit", "specs/quickstart.yaml", "--wait", env=env)
        assert second.returncode == 0, second.stderr
        assert "started" not in second.stderr.split("started run")[0]
        listed = json.loads((await cli("runs", "list", "--json", env=env)).stdout)
        assert len(listed) == 2
    finally:
        stopped = await cli("dev", "stop", env=env)
    assert stopped.returncode == 0 and "worker" in stopped.stdout and "temporal" in stopped.stdout
    again = await cli("dev", "stop", env=env)
    assert "not running" in again.stdout


async def test_dev_in_the_foreground_stops_only_what_it_started(tmp_path: Path) -> None:
    """`armature dev` beside a stack already running in the background stopped that stack on
    Ctrl-C (and the `serve` using it answered 503): it now leaves what it did not start."""
    import os
    import signal

    from armature_temporal.service.devstack import stack_state

    home = tmp_path / "home"
    env = {
        "ARMATURE_HOME": str(home),
        "ARMATURE_DEV_PORT": str(free_port()),
        "ARMATURE_UI_PORT": str(free_port()),
    }
    try:
        first = await cli("submit", "specs/quickstart.yaml", "--wait", env=env)
        assert first.returncode == 0, first.stderr + first.stdout
        before = stack_state(home, int(env["ARMATURE_DEV_PORT"]))
        assert before.server_pid is not None and before.worker_pid is not None
        fg = await asyncio.create_subprocess_exec(
            ARMATURE, "dev", cwd=ROOT, env={**os.environ, **env},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert fg.stdout is not None and fg.stderr is not None
        line = await asyncio.wait_for(fg.stdout.readline(), 60)
        assert b"Ctrl-C leaves it running" in line, line
        fg.send_signal(signal.SIGINT)
        _, said = await asyncio.wait_for(fg.communicate(), 60)
        assert "left running what this command did not start" in said.decode(), said
        after = stack_state(home, int(env["ARMATURE_DEV_PORT"]))
        assert (after.server_pid, after.worker_pid) == (before.server_pid, before.worker_pid)
        assert after.listening
        again = await cli("submit", "specs/quickstart.yaml", "--wait", env=env)
        assert again.returncode == 0, again.stderr
    finally:
        stopped = await cli("dev", "stop", env=env)
    assert "worker" in stopped.stdout and "temporal" in stopped.stdout


async def test_submit_on_a_dev_port_another_server_holds_says_to_free_or_move_it(
    tmp_path: Path,
) -> None:
    """With ARMATURE_DEV_PORT on a port another server holds, submit advised `armature dev`
    (and started a worker against that server); doctor already gave the right fix."""
    import http.server
    import threading

    from armature_temporal.service.devstack import stack_state

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    home = tmp_path / "home"
    env = {"ARMATURE_HOME": str(home), "ARMATURE_DEV_PORT": str(port),
           "ARMATURE_UI_PORT": str(free_port())}  # fmt: skip
    try:
        done = await cli("submit", "specs/quickstart.yaml", "--wait", env=env)
    finally:
        server.shutdown()
        await cli("dev", "stop", env=env)
    assert done.returncode == 1, done.stderr
    assert f"not a Temporal server Armature can talk to listens on 127.0.0.1:{port}" in (
        done.stderr
    )
    assert "set ARMATURE_DEV_PORT and ARMATURE_UI_PORT to free ports" in done.stderr
    assert "Start the local stack with `armature dev`" not in done.stderr
    assert stack_state(home, port).worker_pid is None
