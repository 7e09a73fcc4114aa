"""Tools run on their own task queue, in a worker without provider secrets (issue #14.7).

The workers here are real processes started as users start them (``python -m cli worker``),
so the shell tool's parent process, its environment and the processes it can see are those of
production, not of the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.commands._common import queue_pollers
from armature_temporal.commands.stack import activity_pollers
from armature_temporal.runtime.models import RunStatus
from armature_temporal.service.client import run_outcome
from armature_temporal.tools.sandbox import sandbox
from tests.fakes import plan_from, start
from worker import build_worker, tools_task_queue

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]

#: Everything a program could read the worker's secrets from: its own environment, its parent's
#: (the worker that started it), and every process it can see.
PEEK = (
    "env; echo '--- parent'; cat /proc/$PPID/environ 2>&1; echo; echo '--- all'; "
    "cat /proc/[0-9]*/environ 2>/dev/null; echo; echo '--- end'"
)


def _target(client: Client) -> str:
    return str(client.service_client.config.target_host)


@contextlib.asynccontextmanager
async def cli_worker(
    client: Client, task_queue: str, *flags: str, env: dict[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m cli worker FLAGS`` until its queues have pollers; stopped (SIGTERM) after."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli",
            "worker",
            "--address",
            _target(client),
            "--task-queue",
            task_queue,
            *flags,
            cwd=REPO,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            main = "--tools-only" in flags or await queue_pollers(client, task_queue) > 0
            tools = "--no-tools" in flags or (
                await activity_pollers(client, tools_task_queue(task_queue)) > 0
            )
            if main and tools:
                break
            if proc.returncode is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"worker {flags} did not start (exit {proc.returncode}): "
                    f"{log.read_text(errors='replace')[-3000:]}"
                )
            await asyncio.sleep(0.3)
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _children(pid: int) -> list[int]:
    raw = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in raw.split()]


def _peek_plan(name: str) -> Any:
    return plan_from(
        f"name: {name}\nstages:\n"
        f"  - {{id: peek, tool: {{name: shell, args: {{argv: [sh, -c, {PEEK!r}]}}}}}}\n"
    )


async def test_a_shell_tool_cannot_read_the_workers_secrets(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    if not sandbox().isolated and os.geteuid() == 0:
        pytest.skip(
            "no PID-namespace sandbox here, and root (CAP_SYS_PTRACE) reads every process's "
            "/proc/<pid>/environ: run as another user or where unshare/bwrap works"
        )
    secret = f"sk-canary-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "OPENAI_API_KEY": secret,
        "AWS_SECRET_ACCESS_KEY": f"aws-{secret}",
        "PYTHONPATH": str(REPO),
    }
    log = tmp_path / "worker.log"
    async with cli_worker(client, task_queue, env=env, log=log) as proc:
        # The main worker does hold the secret (so the test would see a leak) ...
        assert secret in Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
        (tools_pid,) = _children(proc.pid)
        # ... and its tools child does not.
        tools_env = Path(f"/proc/{tools_pid}/environ").read_bytes().decode(errors="replace")
        assert secret not in tools_env and "PATH=" in tools_env
        result = await run_outcome(await start(client, _peek_plan("peek"), task_queue))
    assert result is not None and result.state == "completed", result
    seen = result.outputs["peek"]["stdout"]
    assert "PATH=" in seen and "--- end" in seen, seen  # the program did run and print
    assert secret not in seen
    assert secret not in result.outputs["peek"]["stderr"]
    # Stopping the worker stopped its tools child too.
    deadline = time.monotonic() + 10
    while Path(f"/proc/{tools_pid}").exists() and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{tools_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        await asyncio.sleep(0.1)
    stat = Path(f"/proc/{tools_pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


async def test_tool_calls_wait_for_a_tools_worker_and_never_run_on_the_main_one(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(
        "name: waits-for-tools\nstages:\n"
        "  - {id: hello, tool: {name: shell, args: {argv: [echo, hi]}}}\n"
    )
    async with build_worker(client, task_queue, role="main"):
        handle = await start(client, plan, task_queue)
        deadline = time.monotonic() + 20
        pending: list[Any] = []
        while not pending and time.monotonic() < deadline:
            pending = list((await handle.describe()).raw_description.pending_activities)
            await asyncio.sleep(0.2)
        assert [p.activity_type.name for p in pending] == ["tool_call"]
        await asyncio.sleep(3)  # time enough for a main worker to have picked it up
        info = (await handle.describe()).raw_description.pending_activities[0]
        assert info.attempt == 1 and not info.HasField("last_started_time"), info
        status = await handle.query("status", result_type=RunStatus)
        assert status.state == "running" and status.stages["hello"].status == "running"
        assert await activity_pollers(client, tools_task_queue(task_queue)) == 0
        async with build_worker(client, task_queue, role="tools"):
            result = await asyncio.wait_for(run_outcome(handle), 30)
    assert result is not None and result.state == "completed", result
    assert result.outputs["hello"]["stdout"] == "hi\n"


async def test_armature_worker_tools_only_serves_the_tools(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = tmp_path / "tools.log"
    async with (
        cli_worker(client, task_queue, "--tools-only", env=env, log=log),
        build_worker(client, task_queue, role="main"),
    ):
        result = await asyncio.wait_for(
            run_outcome(await start(client, _peek_plan("tools-only"), task_queue)), 60
        )
    assert result is not None and result.state == "completed", result
    assert "--- end" in result.outputs["peek"]["stdout"]
    said = log.read_text()
    assert f"task queue '{tools_task_queue(task_queue)}'" in said, said
    assert f"sandbox {sandbox().kind}" in said, said


async def test_doctor_reports_the_sandbox_and_a_missing_tools_worker(
    client: Client, task_queue: str
) -> None:
    import json

    from tests.fakes import run_armature

    args = ["doctor", "--address", _target(client), "--task-queue", task_queue, "--json"]
    async with build_worker(client, task_queue, role="main"):
        without = {c["check"]: c for c in json.loads((await run_armature(*args)).stdout)}
    async with build_worker(client, task_queue, role="tools"):
        with_tools = {c["check"]: c for c in json.loads((await run_armature(*args)).stdout)}
    assert without["tools worker"]["status"] == "warn"
    assert f"'{tools_task_queue(task_queue)}'" in without["tools worker"]["detail"]
    assert "--tools-only" in without["tools worker"]["fix"]
    assert with_tools["tools worker"]["status"] == "ok"
    box = sandbox()
    assert without["tool sandbox"]["status"] == ("ok" if box.isolated else "warn")
    assert box.kind in without["tool sandbox"]["detail"]


async def test_a_script_adapter_leaves_no_detached_process_behind(
    client: Client, task_queue: str
) -> None:
    from tests.unit.test_sandbox import _cleanup, _escapes, _gone, _marker
    from tests.workflows.collaborators_harness import harness_worker, start_harness

    if not sandbox().isolated:
        pytest.skip(f"no PID-namespace sandbox here ({sandbox().note}): setsid escapes a group")
    marker = _marker()
    plan = plan_from(
        "name: adapter-escape\nadapters:\n"
        f"  escape: {{type: script, shell: true, cmd: {_escapes(marker)!r}}}\n"
        "stages:\n  - {id: go, adapter: escape}\n"
    )
    try:
        async with harness_worker(client, task_queue):
            handle = await start_harness(client, task_queue, plan, {})
            result = await asyncio.wait_for(handle.result(), timeout=60)
        assert result.state == "completed", result.stages
        assert result.outputs["go"]["stdout"] == "started\n"
        assert await _gone(marker) == []
    finally:
        _cleanup(marker)


async def test_a_tool_call_on_the_main_queue_is_refused_not_run() -> None:
    """Only a run from before the tools queue schedules one there (its replay keeps the old
    queue): the main worker says so instead of running the tool next to the keys."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities.tool_queue import refuse_on_main_queue

    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(refuse_on_main_queue("tool_call"), {"tool": "shell"})
    assert info.value.non_retryable and info.value.type == "tool_queue_moved"
    assert "start the run again" in str(info.value)
