"""Tool programs do not outlive their call, and a tools worker holds no secrets (issue #14.7).

The shell tool's process runner (:func:`armature_temporal.tools.sandbox.run_process`, which
script adapters use too) kills the call's whole tree when the program exits, times out or is
cancelled; in a PID-namespace sandbox even a program that left its session with ``setsid``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from pathlib import Path

import pytest

from armature_temporal.service.tools_env import is_secret, tools_worker_env
from armature_temporal.tools import ToolContext, call_tool
from armature_temporal.tools.sandbox import (
    Sandbox,
    SandboxUnavailable,
    minimal_env,
    run_process,
    sandbox,
)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, timeout_s=20, output_cap_bytes=10_000)


def _marker() -> str:
    """A sleep duration no other process on the machine uses, to find ours in /proc."""
    return f"{random.randint(100_000, 999_999)}.{random.randint(100, 999)}"


def _alive_with(marker: str) -> list[int]:
    """Pids (as this process sees them) whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


async def _gone(marker: str, within_s: float = 3.0) -> list[int]:
    """Wait up to ``within_s`` for every process with ``marker`` to die; those left."""
    deadline = time.monotonic() + within_s
    while (left := _alive_with(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


def _escapes(marker: str) -> str:
    """A shell script leaving three detached grandchildren behind: one in a new session
    (setsid), one nohup'd, one double-forked (its parent subshell exits at once)."""
    return (
        f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & "
        f"nohup sleep {marker} >/dev/null 2>&1 & "
        f"(sleep {marker} >/dev/null 2>&1 &) ; "
        "echo started"
    )


def _needs_namespace() -> None:
    if not sandbox().isolated:
        pytest.skip(
            f"no PID-namespace sandbox here ({sandbox().note}): a setsid escapee outlives a "
            "plain process group, as the module says"
        )


def _cleanup(marker: str) -> None:
    """Kill, by pid, what a failing run left behind (so a red test leaves no sleepers)."""
    for pid in _alive_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_detached_grandchildren_are_dead_when_the_shell_call_returns(
    ctx: ToolContext,
) -> None:
    _needs_namespace()
    marker = _marker()
    try:
        result = await call_tool("shell", {"argv": ["sh", "-c", _escapes(marker)]}, ctx)
        assert result.ok, result.error
        assert result.output["stdout"] == "started\n"
        assert await _gone(marker) == []
    finally:
        _cleanup(marker)


async def test_detached_grandchildren_are_dead_after_a_timeout(ctx: ToolContext) -> None:
    _needs_namespace()
    marker = _marker()
    script = _escapes(marker) + f"; sleep {marker}"
    try:
        start = time.monotonic()
        result = await call_tool("shell", {"argv": ["sh", "-c", script], "timeout_s": 1}, ctx)
        assert (result.ok, result.error_type) == (False, "timeout")
        assert time.monotonic() - start < 8
        assert await _gone(marker) == []
    finally:
        _cleanup(marker)


async def test_a_cancelled_call_kills_its_tree(tmp_path: Path) -> None:
    _needs_namespace()
    marker = _marker()
    script = _escapes(marker) + f"; sleep {marker}"
    try:
        task = asyncio.ensure_future(
            run_process(
                ["sh", "-c", script], cwd=tmp_path, env=minimal_env(), timeout_s=60, cap=100
            )
        )
        deadline = time.monotonic() + 5
        while len(_alive_with(marker)) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # three escapees and the foreground sleep (and the sh, unshare running the script)
        assert len(_alive_with(marker)) >= 4
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _gone(marker) == []
    finally:
        _cleanup(marker)


async def test_without_a_sandbox_the_process_group_is_still_killed_at_exit(
    tmp_path: Path,
) -> None:
    """The fallback: a background child that stayed in the group dies with the call."""
    marker = _marker()
    plain = Sandbox("process-group", (), "test")
    script = f"nohup sleep {marker} >/dev/null 2>&1 & (sleep {marker} >/dev/null 2>&1 &); echo ok"
    try:
        done = await run_process(
            ["sh", "-c", script], cwd=tmp_path, env=minimal_env(), timeout_s=10, cap=100, box=plain
        )
        assert (done.exit_code, done.stdout) == (0, "ok\n")
        assert await _gone(marker) == []
    finally:
        _cleanup(marker)


async def test_a_sandboxed_program_sees_only_its_own_processes(tmp_path: Path) -> None:
    _needs_namespace()
    done = await run_process(
        ["sh", "-c", "ls /proc | grep -c '^[0-9]'; cat /proc/$PPID/environ || echo no-parent"],
        cwd=tmp_path,
        env=minimal_env(),
        timeout_s=10,
        cap=10_000,
    )
    count, *rest = done.stdout.splitlines()
    assert int(count) <= 5, done.stdout  # sh, ls, grep (and bwrap's init): not the machine's
    assert rest == ["no-parent"]  # its parent is outside the namespace: pid 0


async def test_output_after_exit_is_kept_and_exit_code_reported(tmp_path: Path) -> None:
    done = await run_process(
        ["sh", "-c", "printf 'a%.0s' $(seq 1 5000); echo; echo err >&2; exit 4"],
        cwd=tmp_path,
        env=minimal_env(),
        timeout_s=10,
        cap=100_000,
    )
    assert (done.exit_code, done.stdout, done.stderr) == (4, "a" * 5000 + "\n", "err\n")


async def test_a_missing_program_is_file_not_found_inside_a_sandbox_too(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await run_process(
            ["no-such-program-xyz"], cwd=tmp_path, env=minimal_env(), timeout_s=5, cap=10
        )


def test_an_unknown_sandbox_choice_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARMATURE_SANDBOX", "firejail")
    with pytest.raises(SandboxUnavailable, match="'firejail' is not one of"):
        sandbox()
    monkeypatch.setenv("ARMATURE_SANDBOX", "none")
    assert sandbox().kind == "process-group"


# --- what a tools worker inherits -----------------------------------------------------------


def test_the_tools_worker_environment_has_no_provider_secrets() -> None:
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/home/a",
        "PYTHONPATH": "/app",
        "ARMATURE_HOME": "/data",
        "ARMATURE_TASK_QUEUE": "armature",
        "TEMPORAL_ADDRESS": "temporal:7233",
        "TEMPORAL_API_KEY": "needed-to-connect",
        "OPENAI_API_KEY": "sk-1",
        "ANTHROPIC_API_KEY": "sk-2",
        "HF_TOKEN": "hf-3",
        "WATSONX_APIKEY": "w-4",
        "AWS_ACCESS_KEY_ID": "AKIA5",
        "AWS_SECRET_ACCESS_KEY": "s-6",
        "AWS_REGION_NAME": "eu-west-1",
        "AZURE_API_BASE": "https://x.openai.azure.com",
        "GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json",
        "VERTEXAI_PROJECT": "p",
        "ARMATURE_WEBHOOK_SECRET": "w",
        "ARMATURE_DB_URL": "postgresql+psycopg://armature:pw@db:5432/armature",
        "REDIS_URL": "redis://:pw@cache:6379/0",
        "GITHUB_TOKEN": "ghp_7",
        "SENTRY_DSN": "https://public@o0.ingest.sentry.io/1",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/x",
        "GIT_REMOTE": "https://ghp_8@github.com/a/b.git",
        "MY_TOOL_TOKEN": "kept on purpose",
        "ARMATURE_TOOLS_ENV_KEEP": "MY_TOOL_TOKEN",
    }
    env = tools_worker_env(parent)
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/a",
        "PYTHONPATH": "/app",
        "ARMATURE_HOME": "/data",
        "ARMATURE_TASK_QUEUE": "armature",
        "TEMPORAL_ADDRESS": "temporal:7233",
        "TEMPORAL_API_KEY": "needed-to-connect",
        "MY_TOOL_TOKEN": "kept on purpose",
        "ARMATURE_TOOLS_ENV_KEEP": "MY_TOOL_TOKEN",
        # The services the egress proxy refuses: the store's host, not its URL (a password).
        "ARMATURE_SERVICE_HOSTS": "db,temporal",
    }
    # A store URL without a password (SQLite, trust auth) is no secret.
    assert not is_secret("ARMATURE_DB_URL", "sqlite:////data/armature.db")
    assert not is_secret("ARMATURE_DB_URL", "postgresql+psycopg://armature@db/armature")


def test_every_provider_key_doctor_knows_is_a_secret() -> None:
    from armature_temporal.commands.doctor import PROVIDER_KEYS

    names = [name for names in PROVIDER_KEYS.values() for name in names]
    assert names and all(is_secret(name, "x") for name in names)


async def test_every_sandbox_that_works_here_kills_detached_grandchildren(tmp_path: Path) -> None:
    """Not only the one auto picks: each candidate this machine can run (bwrap, unshare as
    root, unshare in a user namespace) hides the worker and leaves nothing behind."""
    from armature_temporal.tools._detect import working as usable

    working = usable()
    if not working:
        pytest.skip("no sandbox works here")
    for box in working:
        marker = _marker()
        try:
            done = await run_process(
                ["sh", "-c", _escapes(marker) + "; cat /proc/$PPID/environ || echo hidden"],
                cwd=tmp_path,
                env=minimal_env(),
                timeout_s=10,
                cap=10_000,
                box=box,
            )
            assert done.stdout.splitlines() == ["started", "hidden"], (box.kind, done)
            assert await _gone(marker) == [], box.kind
        finally:
            _cleanup(marker)


@pytest.mark.parametrize("isolated", [True, False])
async def test_the_resolved_executable_runs_and_keeps_its_argv0(
    tmp_path: Path, isolated: bool
) -> None:
    """The shell tool passes the file the policy checked (``_executable``): that file runs, with
    no PATH lookup, and still sees the name it was called by (busybox-style programs need it)."""
    if isolated:
        _needs_namespace()
    box = sandbox() if isolated else Sandbox("process-group", (), "test")
    done = await run_process(
        ["called-as", "-c", 'echo "$0"'],
        executable="/bin/sh",
        cwd=tmp_path,
        env={"PATH": "/nowhere"},  # so a PATH lookup of either name would fail
        timeout_s=10,
        cap=1000,
        box=box,
    )
    assert done.exit_code == 0, done
    assert done.stdout == "called-as\n"  # dash's $0 under -c: the argv[0] it was given
