"""A worker in its own process, for tests that kill workers: ``python -m tests.worker_process
ADDRESS TASK_QUEUE``.

Runs the interpreter with the real activities, except that ``llm_call`` is
``fake_llm_call_counting`` (the real one plus one line per execution in $ARMATURE_CALL_LOG).
Prints ``ready`` once connected and built, and shuts down cleanly on SIGTERM or SIGINT;
SIGKILL is the crash the durability tests simulate. ``$ARMATURE_TEST_ACTIVITY_SLOTS`` caps the
activities it runs at once (the worker's default otherwise).

:func:`spawn` starts one from a test and hands back a :class:`WorkerProcess` to crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from activities.llm import llm_call
from armature_temporal.service.client import connect
from tests.fakes import fake_llm_call_counting
from worker import ACTIVITIES, build_worker

READY = "ready"
REPO = Path(__file__).resolve().parents[1]


async def serve(address: str, task_queue: str) -> None:
    client = await connect(address)
    activities = [fake_llm_call_counting, *(a for a in ACTIVITIES if a is not llm_call)]
    slots = os.environ.get("ARMATURE_TEST_ACTIVITY_SLOTS")
    worker = build_worker(
        client,
        task_queue,
        activities=activities,
        **({"max_concurrent_activities": int(slots)} if slots else {}),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(READY, flush=True)
        await stop.wait()


@dataclass
class WorkerProcess:
    """A worker started by :func:`spawn`; ``stderr`` is the file its stderr goes to."""

    proc: asyncio.subprocess.Process
    stderr: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def crash(self) -> None:
        """SIGKILL: no graceful shutdown, no final heartbeat, no sticky-queue hand-back."""
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()


@contextlib.asynccontextmanager
async def spawn(
    address: str, task_queue: str, stderr: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[WorkerProcess]:
    """Run ``python -m tests.worker_process`` until it prints ``ready``; killed on exit.

    Args:
        address: The Temporal server's host:port.
        task_queue: The queue the worker polls.
        stderr: A file for the worker's stderr (shown when it fails to start).
        env: Variables set for the worker on top of this process's environment.
    """
    with stderr.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.worker_process",
            address,
            task_queue,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
    try:
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        except TimeoutError:
            line = b""
        if line.decode().strip() != READY:
            raise AssertionError(
                f"worker process did not start (exit {proc.returncode}): "
                f"{stderr.read_text(errors='replace')[-3000:]}"
            )
        yield WorkerProcess(proc, stderr)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.worker_process ADDRESS TASK_QUEUE", file=sys.stderr)
        return 2
    asyncio.run(serve(argv[0], argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
