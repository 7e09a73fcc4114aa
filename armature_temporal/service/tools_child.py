"""The tools-only child of ``armature worker`` (and ``watch --worker``): started with the
allow-listed part of this process's environment (:func:`tools_worker_env`), stopped by draining
it, then killing it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from armature_temporal.service.tools_env import tools_worker_env

__all__ = ["PARENT_ENV", "start_tools_child", "stop_child"]

#: Set in the child's environment: the pid of the worker that started it (it exits with it).
PARENT_ENV = "ARMATURE_TOOLS_PARENT_PID"


async def start_tools_child(addr: str, tq: str) -> asyncio.subprocess.Process:
    """``armature worker --tools-only`` as a child, with the allow-listed part of this
    environment (and ``ARMATURE_SERVICE_HOSTS``: the services the egress proxy refuses)."""
    env = {**tools_worker_env(address=addr), PARENT_ENV: str(os.getpid())}
    args = ["-m", "cli", "worker", "--tools-only", "--address", addr, "--task-queue", tq]
    return await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stdin=asyncio.subprocess.DEVNULL
    )


async def stop_child(child: asyncio.subprocess.Process, timeout_s: float = 30.0) -> None:
    """SIGTERM the child (it drains its tool calls), SIGKILL after ``timeout_s``."""
    if child.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        await asyncio.wait_for(child.wait(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
