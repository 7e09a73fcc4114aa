"""The embedded single-machine stack: a Temporal dev server and an Armature worker (which
starts its tools-only child, without the provider secrets: see ``armature worker``).

``armature submit`` starts it in the background when no Temporal address is configured and
nothing listens on 127.0.0.1:7233; ``armature dev`` runs it in the foreground; ``armature dev
stop`` stops it. The dev server keeps its state in a SQLite file under ARMATURE_HOME, so runs
(and runs waiting at a gate) survive a restart. Logs go to ARMATURE_HOME/logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from armature_temporal.errors import ArmatureError
from armature_temporal.runtime.private import private_dir, secure_home, write_private
from armature_temporal.runtime.search_attributes import dev_server_flags
from armature_temporal.service.temporal_bin import dev_server_config_flags, temporal_binary
from armature_temporal.settings import armature_home, dev_port, dev_ui_port, task_queue

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = [
    "StackState",
    "ensure_local_stack",
    "is_listening",
    "stack_client",
    "stack_state",
    "start_dev_server",
    "start_worker",
    "stop_stack",
    "wait_for_server",
]


@dataclass(frozen=True)
class StackState:
    server_pid: int | None
    worker_pid: int | None
    listening: bool
    address: str

    @property
    def server_ours(self) -> bool:
        return self.server_pid is not None


def _run_dir(home: Path) -> Path:
    return private_dir(home / "run")


def _logs(home: Path) -> Path:
    return private_dir(home / "logs")


def _read_pid(path: Path) -> int | None:
    """The pid in ``path`` if that process is still alive, else None (and the file goes)."""
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
        return None
    except PermissionError:
        return pid
    # A zombie (exited child not yet reaped) counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            path.unlink(missing_ok=True)
            return None
    except (OSError, IndexError):
        pass
    return pid


def is_listening(host: str, port: int, timeout: float = 0.3) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def stack_state(home: Path | None = None, port: int | None = None) -> StackState:
    home = home or armature_home()
    port = port or dev_port()
    run = _run_dir(home)
    return StackState(
        server_pid=_read_pid(run / "temporal.pid"),
        worker_pid=_read_pid(run / "worker.pid"),
        listening=is_listening("127.0.0.1", port),
        address=f"127.0.0.1:{port}",
    )


def start_dev_server(
    home: Path | None = None, port: int | None = None, ui_port: int | None = None
) -> int:
    """Start ``temporal server start-dev`` detached; returns its pid. State: home/temporal.db."""
    home = home or armature_home()
    port = port or dev_port()
    ui_port = ui_port or dev_ui_port()
    binary = temporal_binary()
    if is_listening("127.0.0.1", port):
        raise ArmatureError(
            f"port {port} is already in use; stop what listens there or pass "
            "--address to use that server"
        )
    args = [
        str(binary),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--db-filename",
        str(home / "temporal.db"),
        "--log-level",
        "warn",
        *dev_server_flags(),
        *dev_server_config_flags(),
    ]
    # The server binary is built without cgo and needs $USER to name the current user.
    env = {**os.environ, "USER": os.environ.get("USER") or getpass.getuser()}
    secure_home(private_dir(home))  # an existing temporal.db of an older Armature: 0600
    return _spawn(args, home, "temporal", env)


def start_worker(address: str, home: Path | None = None, queue: str | None = None) -> int:
    """Start an ``armature worker`` process detached; returns its pid. It starts its own
    tools-only child (same process group: stopping the worker's group stops both)."""
    home = home or armature_home()
    args = [
        sys.executable,
        "-m",
        "cli",
        "worker",
        "--address",
        address,
        "--task-queue",
        queue or task_queue(),
    ]
    pid = _spawn(args, home, "worker", {**os.environ, "ARMATURE_HOME": str(home)})
    (_run_dir(home) / "worker.code").write_text(code_stamp())
    return pid


def code_stamp(root: Path | None = None) -> str:
    """A fingerprint of the installed Armature code (every module's path, size and mtime): a
    background worker started from other code cannot run plans this code compiles."""
    import hashlib

    root = root or Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in ("armature_temporal", "workflows", "activities"):
        for path in sorted((root / package).rglob("*.py")):
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    for name in ("worker.py", "cli.py"):
        path = root / name
        if path.exists():
            stat = path.stat()
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _stop(home: Path, name: str, timeout_s: float = 10.0) -> None:
    path = _run_dir(home) / f"{name}.pid"
    pid = _read_pid(path)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _read_pid(path) is not None:
        time.sleep(0.1)
    if _read_pid(path) is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _spawn(args: list[str], home: Path, name: str, env: dict[str, str]) -> int:
    """Start ``args`` detached (own session, output to logs/NAME.log); record logs/NAME.pid."""
    logged = os.open(_logs(home) / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(logged, "ab") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            # What it creates under ARMATURE_HOME (temporal.db: every payload) is owner-only.
            umask=0o077,
        )
    write_private(_run_dir(home) / f"{name}.pid", str(proc.pid).encode())
    return proc.pid


async def wait_for_server(
    address: str, timeout_s: float = 30.0, server_pid: int | None = None
) -> None:
    """Wait until the server answers; raise with the log's location if it does not."""
    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
    from temporalio.client import Client

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if server_pid is not None and _read_pid(_run_dir(armature_home()) / "temporal.pid") is None:
            break
        try:
            client = await Client.connect(address)
            await client.workflow_service.get_system_info(GetSystemInfoRequest())
            return
        except RuntimeError as exc:
            last = exc
        await asyncio.sleep(0.2)
    raise ArmatureError(
        f"the Temporal dev server at {address} did not come up within {timeout_s:g}s "
        f"({last}); see {_logs(armature_home()) / 'temporal.log'}"
    )


def stop_stack(
    home: Path | None = None,
    timeout_s: float = 10.0,
    only: Collection[str] = ("worker", "temporal"),
) -> list[str]:
    """Stop the worker and dev server this ARMATURE_HOME started (``only``: those of them, by
    name); returns what was stopped."""
    home = home or armature_home()
    stopped = []
    for name in ("worker", "temporal"):
        if name not in only:
            continue
        path = _run_dir(home) / f"{name}.pid"
        pid = _read_pid(path)
        if pid is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _read_pid(path) is not None:
            time.sleep(0.1)
        if _read_pid(path) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        path.unlink(missing_ok=True)
        stopped.append(f"{name} (pid {pid})")
    return stopped


async def ensure_local_stack(cli_address: str | None = None) -> tuple[str, list[str]]:
    """The address to use, starting the embedded stack when needed; plus what was started.

    With ``--address`` or ``$TEMPORAL_ADDRESS`` nothing is started: that server's workers are
    the user's. Otherwise the local dev server on 127.0.0.1:7233 is used (started if nothing
    listens there) and a background worker is started if this ARMATURE_HOME has none running.
    """
    address, said, _ = await start_local_stack(cli_address)
    return address, said


async def start_local_stack(cli_address: str | None = None) -> tuple[str, list[str], set[str]]:
    """:func:`ensure_local_stack`, also naming the parts it started (``temporal``,
    ``worker``), which :func:`stop_stack` takes as ``only``: a foreground ``armature dev``
    stops those and leaves a stack that was already running alone."""
    from armature_temporal.settings import configured_address

    configured = configured_address(cli_address)
    started: set[str] = set()
    if configured:
        return configured, [], started
    home = armature_home()
    state = stack_state(home)
    address = state.address
    said = []
    if not state.listening:
        pid = start_dev_server(home)
        started.add("temporal")
        await wait_for_server(address, server_pid=pid)
        said.append(
            f"started the local Temporal dev server (pid {pid}, Web UI "
            f"http://localhost:{dev_ui_port()}, state in {home / 'temporal.db'}, log "
            f"{home / 'logs' / 'temporal.log'})"
        )
    elif not state.server_ours and state.worker_pid is None:
        from armature_temporal.service.client import connect

        await connect(address)  # not a Temporal server: stack_client explains, no worker starts
        said.append(f"using the Temporal server already listening on {address}")
    stamp = _run_dir(home) / "worker.code"
    if state.worker_pid is not None and (
        not stamp.exists() or stamp.read_text().strip() != code_stamp()
    ):
        # Started from other code (an upgrade, an edit): it may not decode this code's plans.
        _stop(home, "worker")
        said.append(f"stopped the background worker (pid {state.worker_pid}): the code changed")
        state = stack_state(home)
    if state.worker_pid is None:
        pid = start_worker(address, home)
        started.add("worker")
        said.append(
            f"started an Armature worker and its tools worker (pid {pid}, log "
            f"{home / 'logs' / 'worker.log'}); `armature dev stop` stops the local stack"
        )
    return address, said, started


async def stack_client(address: str | None = None) -> tuple[Client, list[str]]:
    """A connected client for ``address`` (else ``$TEMPORAL_ADDRESS``, else the embedded
    stack, started when needed: :func:`ensure_local_stack`), plus what was started, in
    sentences for the caller to show. ``armature submit`` and the library call this.

    Raises:
        ConnectionFailed: the server cannot be reached.
    """
    from armature_temporal.service.client import ConnectionFailed, connect
    from armature_temporal.settings import configured_address

    addr = configured_address(address) or stack_state().address
    try:
        addr, said = await ensure_local_stack(address)
        return await connect(addr), said
    except ConnectionFailed as exc:
        if configured_address(address):
            raise
        # The embedded stack's port: what answers there is not our dev server.
        state = stack_state()
        if state.server_ours:
            raise ConnectionFailed(
                f"the local Temporal dev server (pid {state.server_pid}) does not answer on "
                f"{addr} ({exc.reason}); see {armature_home() / 'logs' / 'temporal.log'}, "
                "then `armature dev stop` and try again"
            ) from None
        raise ConnectionFailed(
            f"something that is not a Temporal server Armature can talk to listens on {addr} "
            f"(ARMATURE_DEV_PORT={dev_port()}), so the local stack cannot use it: stop what "
            "listens on that port, or set ARMATURE_DEV_PORT and ARMATURE_UI_PORT to free "
            f"ports (the connection said: {exc.reason})"
        ) from None
