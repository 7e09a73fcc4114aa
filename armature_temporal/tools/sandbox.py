"""Running a tool's program: in a sandbox where the kernel allows one, killed whole at the end.

:func:`run_process` is how the ``shell`` tool and script adapters start a program. Each call:

- runs with the environment it is given (the callers give a small one: no API keys), stdin
  closed, stdout and stderr captured up to a cap;
- runs in its own session and process group, inside the sandbox :func:`sandbox` found: a new
  PID namespace with its own ``/proc`` (``bwrap``, else ``unshare``), so the program sees only
  its own processes (``/proc/<ppid>/environ`` and ``/proc/*/environ`` show nothing of the
  worker), and when the program exits, is killed at its timeout or its activity is cancelled,
  the kernel kills everything left in the namespace: a detached grandchild (``setsid``,
  ``nohup``, a double fork) does not outlive the call;
- ends with the whole group killed (``SIGKILL``), also when there is no sandbox.

In a sandbox with a mount namespace (``bwrap``, ``unshare``) the program also cannot see what
tools must never see (:func:`hidden_paths`): ``$ARMATURE_HOME`` as a whole (the trace key, the
SQLite store and its ``-wal``/``-shm``, payloads, bandit and other stores, the dev stack's files)
and the worker's credential files in ``$HOME`` (:data:`SECRET_HOME_PATHS`); each is covered by an
empty read-only tmpfs (a file: by ``/dev/null``), and the call's workspace, which may live under
``$ARMATURE_HOME``, is bound back at its own path, readable and writable. If a mount fails, the
call fails (:class:`SandboxFailed`) rather than run unhidden.

Where neither ``bwrap`` nor ``unshare`` can create a PID namespace (a container without
``CAP_SYS_ADMIN`` and without unprivileged user namespaces), programs run in a plain process
group, one warning says so: a program that leaves its group with ``setsid`` can outlive the
call, and nothing is hidden (it can read ``$ARMATURE_HOME``, trace key included).
``$ARMATURE_SANDBOX`` chooses: ``auto`` (default), ``bwrap``, ``unshare`` or ``none`` (plain
process group); naming one that does not work here is an error. ``armature doctor`` reports
which is in use and whether it hides ``$ARMATURE_HOME``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from armature_temporal.errors import ArmatureError
from armature_temporal.tools._hiding import (
    _SHIM,
    SECRET_HOME_PATHS,
    HidePlan,
    _plan,
    _real,
    hidden_paths,
)

__all__ = [
    "ENV_PASSTHROUGH",
    "SECRET_HOME_PATHS",
    "HidePlan",
    "ProcessResult",
    "Sandbox",
    "SandboxFailed",
    "SandboxKind",
    "SandboxUnavailable",
    "hidden_paths",
    "minimal_env",
    "run_process",
    "sandbox",
]

#: Environment variables a tool program inherits from the worker; everything else is dropped.
ENV_PASSTHROUGH: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SYSTEMROOT",
)

SandboxKind = Literal["bwrap", "unshare", "unshare-user", "process-group"]
#: ``$ARMATURE_SANDBOX`` values.
SandboxChoice = Literal["auto", "bwrap", "unshare", "none"]
_CHOICES: tuple[SandboxChoice, ...] = ("auto", "bwrap", "unshare", "none")
_CHUNK = 65_536
#: After the program exits, how long its output pipes may stay open (held by a process that
#: escaped the group where there is no sandbox) before they are closed unread.
DRAIN_GRACE_S = 1.0
_PROBE_TIMEOUT_S = 10.0
#: Inside a sandbox, executes ``sys.argv[1]`` with ``sys.argv[2:]`` as its argv (argv[0] kept).
_EXECV = "import os, sys; os.execv(sys.argv[1], sys.argv[2:])"

log = logging.getLogger(__name__)


def minimal_env() -> dict[str, str]:
    """The worker's :data:`ENV_PASSTHROUGH` variables (those it has): a tool program's env."""
    return {k: v for k in ENV_PASSTHROUGH if (v := os.environ.get(k)) is not None}


class SandboxUnavailable(ArmatureError):
    """``$ARMATURE_SANDBOX`` names a sandbox that cannot run here."""


class SandboxFailed(ArmatureError, OSError):
    """The sandbox could not set up a call (hide what tools must not see): it did not run."""


@dataclass(frozen=True)
class Sandbox:
    """How tool programs are isolated in this process.

    Attributes:
        kind: ``bwrap`` or ``unshare`` (a PID namespace, as root), ``unshare-user`` (a PID
            namespace inside an unprivileged user namespace), ``process-group`` (none).
        prefix: The argv that goes before the program's.
        note: Why this one: what was tried and failed, for ``armature doctor`` and the warning.
        can_hide: Whether its mount namespace can hide paths (probed); False: it cannot, and
            ``note`` says why.
    """

    kind: SandboxKind
    prefix: tuple[str, ...]
    note: str
    can_hide: bool = True

    @property
    def isolated(self) -> bool:
        """Whether programs get their own PID namespace (and ``/proc``)."""
        return self.kind != "process-group"

    @property
    def hides(self) -> bool:
        """Whether programs cannot see :func:`hidden_paths` (``$ARMATURE_HOME`` and the rest)."""
        return self.isolated and self.can_hide

    def wrap(self, argv: Sequence[str], cwd: Path, plan: HidePlan | None = None) -> list[str]:
        """The argv that runs ``argv`` in this sandbox, in ``cwd`` (bwrap: hiding ``plan``)."""
        if self.kind == "bwrap":
            mounts: list[str] = []
            if plan is not None:
                for d in plan.hide:
                    mounts += ["--tmpfs", d]
                for f in plan.mask:
                    mounts += ["--ro-bind", "/dev/null", f]
                for k in plan.rebind:
                    mounts += ["--bind", k, k]
                for d in plan.hide:
                    mounts += ["--remount-ro", d]
            return [*self.prefix, *mounts, "--chdir", str(cwd), "--", *argv]
        if self.kind == "process-group":
            return list(argv)
        return [*self.prefix, "--", *argv]


def _candidates() -> list[tuple[SandboxKind, tuple[str, ...]]]:
    found: list[tuple[SandboxKind, tuple[str, ...]]] = []
    if bwrap := shutil.which("bwrap"):
        # --dev-bind / /: the same filesystem; the point is the PID namespace and its /proc.
        found.append(
            (
                "bwrap",
                (
                    bwrap,
                    "--die-with-parent",
                    "--unshare-pid",
                    "--unshare-ipc",
                    "--dev-bind",
                    "/",
                    "/",
                    "--proc",
                    "/proc",
                ),
            )
        )
    if unshare := shutil.which("unshare"):
        # --fork: the program is PID 1 of the namespace, so when it ends the kernel kills the
        # rest; --kill-child: it dies with unshare (killed at a timeout) even after a setsid.
        ns = ("--pid", "--fork", "--mount-proc", "--kill-child")
        found.append(("unshare", (unshare, *ns)))
        found.append(("unshare-user", (unshare, "--user", "--map-root-user", *ns)))
    return found


def _probe(kind: SandboxKind, prefix: tuple[str, ...], hide: bool = False) -> str | None:
    """None if a program runs in this sandbox as PID 1 of its own namespace (``hide``: and a
    hidden directory's file is gone while a workspace inside it is writable), else why not."""
    import tempfile

    box = Sandbox(kind, prefix, "")
    # The program is PID 1 of the namespace (2 under bwrap, whose init is 1); outside, far more.
    script = 'test "$$" -le 2 && test -r /proc/self/environ'
    with tempfile.TemporaryDirectory() as tmp:
        home, ws = Path(tmp, "home"), Path(tmp, "home", "ws")
        ws.mkdir(parents=True)
        Path(home, "secret").write_text("x")
        command = ["/bin/sh", "-c", script]
        status = None
        if hide:
            status = os.pipe()
            plan = HidePlan((str(_real(home)),), (), (str(_real(ws)),))
            command[2] += " && ! test -e ../secret && touch probe && ! touch ../written"
            command = _shimmed(box, command, "/bin/sh", ws, None, plan, status[1])
        else:
            command = box.wrap(command, ws)
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                timeout=_PROBE_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", os.defpath)},
                cwd=ws,
                pass_fds=() if status is None else (status[1],),
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{kind}: {exc}"
        finally:
            if status is not None:
                os.close(status[1])
        said = b""
        if status is not None:
            with os.fdopen(status[0], "rb") as reader:
                said = reader.read()
        if done.returncode != 0 or (hide and said != b"R"):
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            why = said[1:].decode(errors="replace") or (lines[-1] if lines else "")
            return f"{kind}: exit {done.returncode}" + (f" ({why})" if why else "")
        if hide and (Path(home, "written").exists() or not Path(ws, "probe").exists()):
            return f"{kind}: the hidden directory was written, or the workspace was not"
    return None


def _choice() -> SandboxChoice:
    raw = (os.environ.get("ARMATURE_SANDBOX") or "auto").strip().lower()
    for choice in _CHOICES:
        if raw == choice:
            return choice
    raise SandboxUnavailable(
        f"ARMATURE_SANDBOX={raw!r} is not one of {list(_CHOICES)}; unset it (auto: the best "
        "that works here) or pick one"
    )


@functools.cache
def _detect(choice: SandboxChoice) -> Sandbox:
    if choice == "none":
        return Sandbox("process-group", (), "ARMATURE_SANDBOX=none")
    failures = []
    for kind, prefix in _candidates():
        if choice != "auto" and not kind.startswith(choice):
            continue
        why = _probe(kind, prefix)
        if why is None:
            hiding = _probe(kind, prefix, hide=True)
            if hiding is None:
                return Sandbox(kind, prefix, f"{kind} creates a PID and mount namespace here")
            note = f"{kind} creates a PID namespace here but cannot hide paths ({hiding})"
            log.warning(
                "tool programs run in a %s sandbox that cannot hide $ARMATURE_HOME (the trace "
                "key, the store) or credential files: %s",
                kind,
                note,
            )
            return Sandbox(kind, prefix, note, can_hide=False)
        failures.append(why)
    tried = "; ".join(failures) or "neither bwrap nor unshare is on PATH"
    if choice != "auto":
        raise SandboxUnavailable(
            f"ARMATURE_SANDBOX={choice} but it cannot create a PID namespace here ({tried}); "
            "install it, allow namespaces, or set ARMATURE_SANDBOX=auto"
        )
    note = f"no sandbox works here ({tried})"
    log.warning(
        "tool programs run in a plain process group, not a sandbox: %s. They can see other "
        "processes under /proc, one that calls setsid can outlive its call, and nothing is "
        "hidden from them: they can read $ARMATURE_HOME (the trace key, the trace store) and "
        "the worker's credential files; install bubblewrap (bwrap) or allow unprivileged user "
        "namespaces",
        note,
    )
    return Sandbox("process-group", (), note)


def sandbox() -> Sandbox:
    """The sandbox tool programs run in here (probed once per process and choice).

    Raises:
        SandboxUnavailable: ``$ARMATURE_SANDBOX`` names one that does not work here.
    """
    return _detect(_choice())


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


def _shimmed(
    box: Sandbox,
    argv: Sequence[str],
    program: str,
    cwd: Path,
    lc_ctype: str | None,
    plan: HidePlan,
    status_fd: int,
) -> list[str]:
    """The argv that runs ``program`` as ``argv`` through :data:`_SHIM` in ``box``, hiding
    ``plan`` (by the shim's mounts; under bwrap, by bwrap's), reporting on ``status_fd``."""
    spec = {
        "status": status_fd,
        "program": program,
        "cwd": str(cwd),
        "lc_ctype": lc_ctype,
        "host_mnt": os.readlink("/proc/self/ns/mnt"),
        "hide": [] if box.kind == "bwrap" else list(plan.hide),
        "mask": [] if box.kind == "bwrap" else list(plan.mask),
        "rebind": [] if box.kind == "bwrap" else list(plan.rebind),
    }
    shim = [sys.executable, "-I", "-S", "-c", _SHIM, json.dumps(spec), *argv]
    return box.wrap(shim, cwd, plan if box.kind == "bwrap" else None)


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
        f"the {box.kind} sandbox could not hide $ARMATURE_HOME and credential files from the "
        f"program, so it did not run: {why}; let the tools worker mount in its namespace "
        "(CAP_SYS_ADMIN, or unprivileged user namespaces), or set ARMATURE_SANDBOX=none to "
        "run tools unhidden",
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
) -> ProcessResult:
    """Run ``argv`` in ``cwd`` with exactly ``env``, in the sandbox, killed whole at the end.

    Args:
        argv: The program and its arguments (no shell).
        executable: The file to execute, already resolved (the shell tool's ``_executable``,
            which the safety policy checked): no PATH lookup happens, and the program still
            sees ``argv[0]`` as its name (inside a sandbox, the resolved path when its base
            name is the same).
        cwd: Its working directory.
        env: Its whole environment.
        timeout_s: Seconds before it (and everything it started) is killed.
        cap: Bytes of stdout and of stderr kept; the rest is read and dropped.
        box: The sandbox (default: :func:`sandbox`).
        visible: The call's workspace(s), which stay visible and writable where the sandbox
            hides :func:`hidden_paths` (default: ``cwd``).

    Raises:
        SandboxFailed: the sandbox could not hide :func:`hidden_paths`; the program did not run.
        FileNotFoundError, PermissionError, OSError: the program cannot be started.
        asyncio.CancelledError: the caller was cancelled; the program was killed first.
    """
    if not argv:
        raise ValueError("argv is empty; name a program to run")
    if box is None:
        box = await asyncio.to_thread(sandbox)  # probes once per process: not in the loop
    program = argv[0] if executable is None else os.fspath(executable)
    _check_executable(program, cwd, env)
    inner, exec_file, status = list(argv), None, None
    if box.hides:
        plan = await asyncio.to_thread(_plan, visible or (cwd,))
        status = os.pipe()
        try:
            inner = _shimmed(box, argv, program, cwd, env.get("LC_CTYPE"), plan, status[1])
        except BaseException:
            os.close(status[0])
            os.close(status[1])
            raise
    elif executable is not None and not box.isolated:
        exec_file = program
    elif executable is not None and os.path.basename(program) == os.path.basename(argv[0]):
        inner = [program, *argv[1:]]
    elif executable is not None:  # a name the program reads (busybox): exec it with argv[0]
        inner = [sys.executable, "-I", "-S", "-c", _EXECV, program, *argv]
    # Our own pipes, not asyncio's: its wait() would also wait for every process holding them.
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *(inner if status is not None else box.wrap(inner, cwd)),
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
