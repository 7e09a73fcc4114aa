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
import errno
import logging
import marshal
import os
import re
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from armature_temporal.errors import ArmatureError
from armature_temporal.tools import _nsinit
from armature_temporal.tools._hiding import (
    SECRET_HOME_PATHS,
    HidePlan,
    Layout,
    hidden_paths,
    layout,
)

__all__ = [
    "ENV_PASSTHROUGH",
    "PROXY_PORT",
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
#: Where a granted program's proxy variables point: its own namespace's loopback.
PROXY_PORT = 3128
PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
)

SandboxKind = Literal["bwrap", "unshare", "unshare-user", "process-group", "unavailable"]
_MODE = {"unshare": "root", "unshare-user": "user", "bwrap": "inner"}
_CHUNK = 65_536
#: After the program exits, how long its output pipes may stay open (held by a process that
#: escaped the group where there is no sandbox) before they are closed unread.
DRAIN_GRACE_S = 1.0
_NSINIT = _nsinit.__file__

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


class SandboxUnavailable(ArmatureError):
    """``$ARMATURE_SANDBOX`` names a sandbox that cannot run here."""


class SandboxFailed(ArmatureError, OSError):
    """The sandbox could not set up a call: the program did not run."""


@dataclass(frozen=True)
class Guarantee:
    """One property of the sandbox, as probed here: ``holds``, and what was seen."""

    name: str
    holds: bool
    detail: str


@dataclass(frozen=True)
class Sandbox:
    """How tool programs are isolated in this process.

    Attributes:
        kind: ``unshare`` (namespaces made with the worker's ``CAP_SYS_ADMIN``),
            ``unshare-user`` (in an unprivileged user namespace), ``bwrap``, ``process-group``
            (none: ``ARMATURE_SANDBOX=none``), ``unavailable`` (no sandbox works here and none
            was waived: programs do not run).
        prefix: bwrap's path and options (empty for the others).
        note: What was found: why this one, or what failed, for ``armature doctor``.
        guarantees: What the probe saw (empty where none was run).
    """

    kind: SandboxKind
    prefix: tuple[str, ...] = ()
    note: str = ""
    guarantees: tuple[Guarantee, ...] = ()

    @property
    def isolated(self) -> bool:
        """Whether programs run in the namespaces (and so with every guarantee)."""
        return self.kind in _MODE

    @property
    def hides(self) -> bool:
        """Whether programs cannot see :func:`hidden_paths` (``$ARMATURE_HOME`` and the rest)."""
        return self.isolated


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


def _bwrap_mounts(mounts: Layout, egress: str | None) -> list[str]:
    """bwrap's options for ``mounts`` (after its ``--ro-bind / /``, ``--proc``, ``--dev``)."""
    args: list[str] = []
    for path, mode in mounts.private:
        args += ["--perms", mode, "--tmpfs", path]
    for path in mounts.hide:
        args += ["--tmpfs", path]
    for path in mounts.mask:
        args += ["--ro-bind", "/dev/null", path]
    for path in mounts.rebind:
        args += ["--bind", path, path]
    for path in mounts.readable:
        args += ["--ro-bind", path, path]
    for path in mounts.hide:
        args += ["--remount-ro", path]
    if egress is not None:
        args += ["--bind", egress, _nsinit.EGRESS_SOCKET]
    return args


def _shimmed(
    box: Sandbox,
    argv: Sequence[str],
    program: str,
    cwd: Path,
    lc_ctype: str | None,
    mounts: Layout,
    status_fd: int,
    egress: str | None,
) -> list[str]:
    """The argv that runs ``program`` as ``argv`` in ``box`` through
    :mod:`~armature_temporal.tools._nsinit`, reporting on ``status_fd``."""
    inner = box.kind == "bwrap"
    spec = {
        "mode": _MODE[box.kind],
        "status": status_fd,
        "program": program,
        "cwd": str(cwd),
        "lc_ctype": lc_ctype,
        "host_mnt": os.readlink("/proc/self/ns/mnt"),
        "private": [] if inner else [list(p) for p in mounts.private],
        "hide": [] if inner else list(mounts.hide),
        "mask": [] if inner else list(mounts.mask),
        "rebind": [] if inner else list(mounts.rebind),
        "readable": [] if inner else list(mounts.readable),
        "egress": None if inner else egress,
        "proxy_port": PROXY_PORT if egress is not None else 0,
        "fallback": os.environ.get("ARMATURE_SANDBOX_NO_SETATTR") == "1",
    }
    shim = [sys.executable, "-I", "-S", _NSINIT, marshal.dumps(spec).hex(), *argv]
    if not inner:
        return shim
    return [*box.prefix, *_bwrap_mounts(mounts, egress), "--chdir", str(cwd), "--", *shim]


def _setup_failure(said: bytes, stderr: str, box: Sandbox, program: str) -> OSError | None:
    """What the shim's status (``R`` then maybe ``E...``, or ``F...``, or nothing) means."""
    text = said[1:].decode(errors="replace")
    if said[:1] == b"R" and said[1:2] == b"E":
        code, _, why = text[1:].partition(":")
        return OSError(int(code) if code.isdigit() else errno.EIO, why, program)
    if said[:1] == b"R":
        return None
    why = text if said[:1] == b"F" else (stderr.strip().splitlines() or ["no message"])[-1]
    return SandboxFailed(
        errno.EPERM,
        f"the {box.kind} sandbox could not be set up for {program!r}, so it did not run: "
        f"{why}; `armature doctor` shows which guarantee fails here. Install bubblewrap, allow "
        "unprivileged user namespaces or give the tools worker CAP_SYS_ADMIN, or set "
        "ARMATURE_SANDBOX=none to run tools without any sandbox",
    )


def _unavailable(box: Sandbox) -> SandboxFailed:
    return SandboxFailed(
        errno.EPERM,
        f"tool programs do not run here: no sandbox gives them their guarantees ({box.note}). "
        "Install bubblewrap (bwrap), allow unprivileged user namespaces (sysctl "
        "kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0, or an AppArmor "
        "profile that allows them), or run the tools worker with CAP_SYS_ADMIN; or set "
        "ARMATURE_SANDBOX=none to accept running them unsandboxed (they then see and reach "
        "everything the tools worker does). `armature doctor` lists what holds",
    )


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


def _proxied(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the proxy variables naming the forwarder in the program's namespace."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    kept = {k: v for k, v in env.items() if k.lower() != "no_proxy"}
    return kept | dict.fromkeys(PROXY_VARIABLES, url)


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
        raise _unavailable(box)
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
            env = _proxied(env)
        status = os.pipe()
        try:
            inner = _shimmed(
                box, argv, program, cwd, env.get("LC_CTYPE"), mounts, status[1], egress
            )
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
        failure = _setup_failure(said, err.text(), box, program)
        if failure is not None:
            raise failure
    return ProcessResult(
        exit_code=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
        timed_out=timed_out,
    )


#: What programs print when they cannot resolve a name or reach an address.
_NETWORK_TROUBLE = re.compile(
    r"could not resolve|temporary failure in name resolution|name or service not known|"
    r"nodename nor servname|getaddrinfo|network is unreachable|no route to host|"
    r"connection refused|failed to connect|unable to connect|could not connect|"
    r"cannot connect|connect(ion)? timed out|name resolution|no address associated|"
    r"proxy|tunnel failed|\b403\b.*forbidden",
    re.IGNORECASE,
)


def network_hint(stderr: str, stdout: str, *, granted: bool, box: Sandbox) -> str | None:
    """A hint for a program that failed the way programs without a network fail, or None."""
    if not box.isolated or not _NETWORK_TROUBLE.search(f"{stderr}\n{stdout}"):
        return None
    loopback = (
        "the worker's loopback and its services (Temporal, the store, the run API) are never "
        "reachable from a tool program: its 127.0.0.1 is its own; to call an HTTP service use "
        "the http_request tool with http_allow_hosts"
    )
    if granted:
        return (
            "this call has network only through the egress proxy (HTTP_PROXY/HTTPS_PROXY are "
            "set; raw sockets, UDP and the program's own DNS lookups do not get out), which "
            f"refuses loopback, link-local and private addresses; {loopback}"
        )
    return (
        "tool programs have no network unless the spec grants it: `sandbox: {allow_network: "
        "true}` for the whole spec, or `network: true` on this stage; " + loopback
    )
