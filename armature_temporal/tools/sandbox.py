"""Running a tool's program: in a sandbox it cannot undo, killed whole at the end.

:func:`run_process` is how the ``shell`` tool and script adapters start a program. Each call:

- runs with exactly the environment it is given (callers give :func:`minimal_env`: ``PATH``,
  ``LANG``, ``LC_*``, ``TZ``, ``HOME`` = the workspace, ``TMPDIR`` = the private ``/tmp``, what
  the spec's ``sandbox.env`` names), stdin closed, stdout and stderr captured up to a cap;
- runs in its own session and process group and, in the sandbox :func:`sandbox` found, in new
  PID, mount, network, IPC and UTS namespaces that :mod:`~armature_temporal.tools._nsinit`
  builds (or ``bwrap``): its own ``/proc``, showing only its own processes; no capability
  (empty bounding set, ``no_new_privs``); every mount read-only but its workspace(s) and a
  private ``/tmp``, ``/var/tmp``, ``/run`` and ``/dev/shm``; a ``/dev`` of ``null``, ``zero``,
  ``full``, ``random``, ``urandom``, ``tty`` and its own ``pts``; ``$ARMATURE_HOME``, the
  worker's credential files (:data:`SECRET_HOME_PATHS`), password hashes, SSH host keys and
  every unix socket a service listens on covered; all of those mounts locked to the program
  (made in the parent's user namespace, entered through a child one), so ``umount``, ``mount``
  and ``unshare -r`` cannot lift them; its own network namespace with only its own loopback,
  so no service of the worker's machine (Temporal, PostgreSQL, Redis, the run API) is reachable,
  and with ``network=True`` (the spec's grant) HTTP(S) out through the egress proxy
  (:mod:`~armature_temporal.tools._egress`), which never connects to loopback, link-local or
  private addresses or the worker's services;
- ends with the whole namespace gone (the kernel kills what is left when its first process
  ends) and the group killed (``SIGKILL``): a detached grandchild does not outlive the call.

Where no sandbox can give those guarantees, programs do not run: :class:`SandboxFailed` says what
failed and how to fix it (install bubblewrap, allow unprivileged user namespaces, give the tools
worker ``CAP_SYS_ADMIN``), or set ``ARMATURE_SANDBOX=none`` to accept plain process groups (no
isolation at all: the program sees and reaches what the worker does). ``$ARMATURE_SANDBOX``
chooses: ``auto`` (default), ``unshare`` (as root, else in a user namespace), ``bwrap`` or
``none``; naming one that does not work here is an error. ``armature doctor`` lists each
guarantee as holding or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from armature_temporal.tools._box import (
    Guarantee,
    Sandbox,
    SandboxFailed,
    SandboxKind,
    SandboxUnavailable,
)
from armature_temporal.tools._egress import network_hint
from armature_temporal.tools._hiding import (
    SECRET_HOME_PATHS,
    HidePlan,
    Layout,
    hidden_paths,
    layout,
)
from armature_temporal.tools._launch import (
    PROXY_PORT,
    PROXY_VARIABLES,
    proxied,
    setup_failure,
    shimmed,
    unavailable,
)

__all__ = [
    "ENV_PASSTHROUGH",
    "PROXY_PORT",
    "PROXY_VARIABLES",
    "SECRET_HOME_PATHS",
    "Guarantee",
    "HidePlan",
    "Layout",
    "ProcessResult",
    "Sandbox",
    "SandboxFailed",
    "SandboxKind",
    "SandboxUnavailable",
    "hidden_paths",
    "minimal_env",
    "network_hint",
    "run_process",
    "sandbox",
]

#: The variables a tool program gets (and every other ``LC_*``) besides the spec's
#: ``sandbox.env``: ``PATH``, ``LANG``, ``LC_*`` and ``TZ`` are the worker's, ``HOME`` is the
#: workspace and ``TMPDIR`` the private ``/tmp``, never the worker's.
ENV_PASSTHROUGH: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
_FROM_WORKER = ("PATH", "LANG", "TZ")
_CHUNK = 65_536
#: After the program exits, how long its output pipes may stay open (held by a process that
#: escaped the group where there is no sandbox) before they are closed unread.
DRAIN_GRACE_S = 1.0

log = logging.getLogger(__name__)


def minimal_env(
    home: str | os.PathLike[str] | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A tool program's environment: ``PATH``, ``LANG``, ``TZ`` and ``LC_*`` from the worker,
    ``TMPDIR=/tmp``, ``HOME`` = ``home`` (the workspace), then ``extra`` (the spec's
    ``sandbox.env``)."""
    env = {k: v for k in _FROM_WORKER if (v := os.environ.get(k)) is not None}
    env |= {k: v for k, v in os.environ.items() if k.startswith("LC_")}
    env["TMPDIR"] = "/tmp"
    if home is not None:
        env["HOME"] = os.fspath(home)
    env |= dict(extra or {})
    return env


def sandbox() -> Sandbox:
    """The sandbox tool programs run in here (probed once per process and choice).

    Raises:
        SandboxUnavailable: ``$ARMATURE_SANDBOX`` names one that does not work here.
    """
    from armature_temporal.tools._detect import choice, detect

    return detect(choice())


@dataclass(frozen=True)
class ProcessResult:
    """What a program did. ``exit_code`` is None when it was killed at its timeout."""

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool


class _Capped:
    """Collects a stream up to ``cap`` bytes and drains (drops) the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            room = self.cap - len(self.data)
            if len(chunk) > room:
                self.truncated = True
            self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _check_executable(program: str, cwd: Path, env: Mapping[str, str]) -> None:
    """Raise what ``exec`` would (before a sandbox wraps the program and hides the error)."""
    if "/" in program:
        path = Path(program) if os.path.isabs(program) else cwd / program
        if not path.is_file():
            raise FileNotFoundError(2, "No such file or directory", program)
        if not os.access(path, os.X_OK):
            raise PermissionError(13, "Permission denied", program)
        return
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(2, "No such file or directory", program)


async def _reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader, transport


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    cap: int,
    box: Sandbox | None = None,
    executable: str | os.PathLike[str] | None = None,
    visible: Sequence[Path] = (),
    readable: Sequence[Path] = (),
    network: bool = False,
    mounts: Layout | None = None,
) -> ProcessResult:
    """Run ``argv`` in ``cwd`` with exactly ``env``, in the sandbox, killed whole at the end.

    Args:
        argv: The program and its arguments (no shell).
        executable: The file to execute, already resolved (the shell tool's ``_executable``,
            which the safety policy checked): no PATH lookup happens, and the program still
            sees ``argv[0]`` as its name.
        cwd: Its working directory.
        env: Its whole environment (with ``network``, plus the proxy variables).
        timeout_s: Seconds before it (and everything it started) is killed.
        cap: Bytes of stdout and of stderr kept; the rest is read and dropped.
        box: The sandbox (default: :func:`sandbox`).
        visible: The call's workspace(s), which stay visible and writable (default: ``cwd``).
        readable: Files the call needs that may lie in a hidden or private directory (an
            adapter's context file): bound back read-only.
        network: The spec grants this call network: HTTP(S) through the egress proxy.
        mounts: The layout to use instead of the one computed from the settings (probes).

    Raises:
        SandboxFailed: no sandbox works here, or it could not be set up; the program did not run.
        FileNotFoundError, PermissionError, OSError: the program cannot be started.
        asyncio.CancelledError: the caller was cancelled; the program was killed first.
    """
    if not argv:
        raise ValueError("argv is empty; name a program to run")
    if box is None:
        box = await asyncio.to_thread(sandbox)  # probes once per process: not in the loop
    if box.kind == "unavailable":
        raise unavailable(box)
    program = argv[0] if executable is None else os.fspath(executable)
    _check_executable(program, cwd, env)
    inner, exec_file, status = list(argv), None, None
    if box.isolated:
        if mounts is None:
            mounts = await asyncio.to_thread(layout, visible or (cwd,), readable)
        egress = None
        if network:
            from armature_temporal.tools._egress import egress_proxy

            egress = str((await asyncio.to_thread(egress_proxy)).path)
            env = proxied(env)
        status = os.pipe()
        try:
            inner = shimmed(box, argv, program, cwd, env.get("LC_CTYPE"), mounts, status[1], egress)
        except BaseException:
            os.close(status[0])
            os.close(status[1])
            raise
    elif executable is not None:
        exec_file = program
    # Our own pipes, not asyncio's: its wait() would also wait for every process holding them.
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *inner,
            executable=exec_file,
            pass_fds=() if status is None else (status[1],),
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
        )
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        if status is not None:
            os.close(status[0])
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
        if status is not None:
            os.close(status[1])
    (out_stream, out_t), (err_stream, err_t) = await _reader(out_r), await _reader(err_r)
    st_stream, st_t = await _reader(status[0]) if status is not None else (None, None)
    said = b""
    out, err = _Capped(cap), _Capped(cap)
    drains = asyncio.ensure_future(asyncio.gather(out.drain(out_stream), err.drain(err_stream)))
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout_s):
                if st_stream is not None:  # "R" (about to exec), "F..." (failed), or EOF
                    said = await st_stream.read(1)
                if st_stream is None or said == b"R":
                    await proc.wait()
        except TimeoutError:
            timed_out = True
    finally:
        # Exited, timed out or cancelled: kill what is left of the group (in a sandbox, the
        # namespace went with its first process), then take the output that is still buffered.
        _kill_group(proc.pid)
        await proc.wait()
        if st_stream is not None:  # the rest: why it failed, if it did (all holders are gone)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_GRACE_S):
                    said += await st_stream.read()
        try:
            async with asyncio.timeout(DRAIN_GRACE_S):
                await asyncio.shield(drains)
        except TimeoutError:
            log.warning(
                "program %r exited but something it started still holds its output open "
                "(it left its process group; sandbox: %s); output after that is dropped",
                argv[0],
                box.kind,
            )
        finally:
            drains.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drains
            out_t.close()
            err_t.close()
            if st_t is not None:
                st_t.close()
    if st_stream is not None and not timed_out:
        failure = setup_failure(said, err.text(), box, program)
        if failure is not None:
            raise failure
    return ProcessResult(
        exit_code=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
        timed_out=timed_out,
    )
