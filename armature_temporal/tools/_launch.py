"""How a call starts in a sandbox: the argv that runs the program through
:mod:`~armature_temporal.tools._nsinit` (under bwrap, with bwrap's options for the call's
:class:`~armature_temporal.tools._hiding.Layout`), the proxy variables of a granted call, and what
the shim's status pipe says when it did not get to the program."""

from __future__ import annotations

import errno
import marshal
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from armature_temporal.tools import _nsinit
from armature_temporal.tools._box import MODES, Sandbox, SandboxFailed
from armature_temporal.tools._hiding import Layout

__all__ = ["PROXY_PORT", "PROXY_VARIABLES", "proxied", "setup_failure", "shimmed", "unavailable"]

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

_NSINIT = _nsinit.__file__


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
    for path in mounts.runtime:
        args += ["--ro-bind", path, path]
    for path in mounts.hide:
        args += ["--remount-ro", path]
    if egress is not None:
        args += ["--bind", egress, _nsinit.EGRESS_SOCKET]
    return args


def shimmed(
    box: Sandbox,
    argv: Sequence[str],
    program: str,
    cwd: Path,
    lc_ctype: str | None,
    mounts: Layout,
    status_fd: int,
    egress: str | None,
    *,
    die_with_worker: bool = False,
) -> list[str]:
    """The argv that runs ``program`` as ``argv`` in ``box`` through
    :mod:`~armature_temporal.tools._nsinit`, reporting on ``status_fd``. ``die_with_worker``:
    the sandbox (and so the program) is killed when this process dies (a long-lived program,
    such as an MCP server, must not outlive a worker that was killed)."""
    inner = box.kind == "bwrap"
    spec = {
        "mode": MODES[box.kind],
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
        "runtime": [] if inner else list(mounts.runtime),
        "egress": None if inner else egress,
        "proxy_port": PROXY_PORT if egress is not None else 0,
        "fallback": os.environ.get("ARMATURE_SANDBOX_NO_SETATTR") == "1",
        "parent": os.getpid() if die_with_worker and not inner else 0,
    }
    shim = [sys.executable, "-I", "-S", _NSINIT, marshal.dumps(spec).hex(), *argv]
    if not inner:
        return shim
    dies = ["--die-with-parent"] if die_with_worker else []
    return [*box.prefix, *dies, *_bwrap_mounts(mounts, egress), "--chdir", str(cwd), "--", *shim]


def setup_failure(said: bytes, stderr: str, box: Sandbox, program: str) -> OSError | None:
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


def unavailable(box: Sandbox) -> SandboxFailed:
    return SandboxFailed(
        errno.EPERM,
        f"tool programs do not run here: no sandbox gives them their guarantees ({box.note}). "
        "Install bubblewrap (bwrap), allow unprivileged user namespaces (sysctl "
        "kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0, or an AppArmor "
        "profile that allows them), or run the tools worker with CAP_SYS_ADMIN; or set "
        "ARMATURE_SANDBOX=none to accept running them unsandboxed (they then see and reach "
        "everything the tools worker does). `armature doctor` lists what holds",
    )


def proxied(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the proxy variables naming the forwarder in the program's namespace."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    kept = {k: v for k, v in env.items() if k.lower() != "no_proxy"}
    return kept | dict.fromkeys(PROXY_VARIABLES, url)
