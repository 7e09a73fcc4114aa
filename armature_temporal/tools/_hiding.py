"""What a tool program must never see, and the shim that hides it inside the sandbox's mount
namespace: ``$ARMATURE_HOME`` (the trace key, the store, payloads), an SQLite store outside it,
and the worker's credential files; the call's workspaces are bound back. Used by
:mod:`armature_temporal.tools.sandbox`, which runs the programs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SECRET_HOME_PATHS", "HidePlan", "hidden_paths"]

#: Credential files and directories under the worker's ``$HOME`` that no tool program sees
#: (where the sandbox can hide them): cloud CLIs, SSH, registries, git and netrc logins.
SECRET_HOME_PATHS: tuple[str, ...] = (
    ".aws",
    ".azure",
    ".config/gcloud",
    ".docker",
    ".kube",
    ".ssh",
    ".git-credentials",
    ".netrc",
)

#: Inside the sandbox's mount namespace, before the program: hide ``hide`` (directories, under
#: an empty tmpfs) and ``mask`` (files, under /dev/null), bind ``rebind`` (workspaces under a
#: hidden directory) back at their own paths, make the tmpfs read-only, ``chdir``, write ``R``
#: on the status fd and exec ``program`` with ``sys.argv[2:]`` (argv[0] kept). A failed mount
#: writes ``F<why>`` and exits; a failed exec writes ``E<errno>:<why>``.
_SHIM = r"""
import ctypes, json, os, sys
spec = json.loads(sys.argv[1])
st = spec["status"]
os.set_inheritable(st, False)
def fail(tag, text):
    os.write(st, (tag + text).encode(errors="replace"))
    os._exit(126)
libc = ctypes.CDLL(None, use_errno=True)
def mount(src, dst, fs, flags, data, what):
    b = lambda v: None if v is None else v.encode()
    if libc.mount(b(src), b(dst), b(fs), ctypes.c_ulong(flags), b(data)) != 0:
        e = ctypes.get_errno()
        fail("F", "cannot %s %r: %s (errno %d)" % (what, dst, os.strerror(e), e))
BIND, REC, PRIVATE, REMOUNT, RDONLY, NOSUID, NODEV = 4096, 16384, 1 << 18, 32, 1, 2, 4
try:
    if spec["hide"] or spec["mask"]:
        if os.readlink("/proc/self/ns/mnt") == spec["host_mnt"]:
            fail("F", "it has no mount namespace of its own (it would hide paths on the host)")
        mount(None, "/", None, REC | PRIVATE, None, "make private the mounts under")
        fds = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in spec["rebind"]]
        for d in spec["hide"]:
            mount("tmpfs", d, "tmpfs", NOSUID | NODEV, "mode=0755,size=1m", "hide (tmpfs over)")
        for f in spec["mask"]:
            mount("/dev/null", f, None, BIND, None, "hide (/dev/null over)")
        for k, fd in fds:
            os.makedirs(k, exist_ok=True)
            mount("/proc/self/fd/%d" % fd, k, None, BIND | REC, None, "bind back the workspace")
            os.close(fd)
        for d in spec["hide"]:
            mount(None, d, None, REMOUNT | BIND | RDONLY | NOSUID | NODEV, None, "make read-only")
    os.chdir(spec["cwd"])
except OSError as e:
    fail("F", "%s: %s" % (e.filename, e.strerror))
env = dict(os.environ)
if spec["lc_ctype"] is None:
    env.pop("LC_CTYPE", None)  # the interpreter's locale coercion must not reach the program
else:
    env["LC_CTYPE"] = spec["lc_ctype"]
os.write(st, b"R")
try:
    os.execvpe(spec["program"], sys.argv[2:], env)
except OSError as e:
    fail("E", "%d:%s" % (e.errno, e.strerror))
"""


@dataclass(frozen=True)
class HidePlan:
    """What a call's sandbox hides: directories (``hide``), files (``mask``), and the
    workspaces under a hidden directory that are bound back (``rebind``). Real paths."""

    hide: tuple[str, ...]
    mask: tuple[str, ...]
    rebind: tuple[str, ...]


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def hidden_paths() -> list[Path]:
    """What no tool program may see, those that exist (real paths): ``$ARMATURE_HOME``, the
    payload directory and an SQLite store outside it, and :data:`SECRET_HOME_PATHS`."""
    from armature_temporal.runtime.payloads import payload_dir
    from armature_temporal.settings import armature_home

    found = [armature_home(), payload_dir()]
    url = os.environ.get("ARMATURE_DB_URL") or ""
    if url.startswith("sqlite:///") and (db := url.removeprefix("sqlite:///").split("?")[0]):
        found += [Path(db + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    home = Path(os.environ.get("HOME") or Path.home())
    found += [home / rel for rel in SECRET_HOME_PATHS]
    real = []
    for path in found:
        path = _real(path.expanduser())
        if path.exists() and path not in real and path != Path("/"):
            real.append(path)
    # A path inside another hidden directory is hidden with it.
    return [p for p in real if not any(o != p and _under(p, o) for o in real)]


def _plan(visible: Sequence[Path]) -> HidePlan:
    """Hide every :func:`hidden_paths` entry (one that is or holds a workspace too: the
    record's files win) and bind back each workspace that lies inside a hidden directory."""
    hidden = hidden_paths()
    hide = [str(p) for p in hidden if p.is_dir()]
    mask = [str(p) for p in hidden if not p.is_dir()]
    rebind = [
        str(k)
        for k in dict.fromkeys(_real(v) for v in visible)
        if any(_under(k, h) and k != h for h in map(Path, hide))
    ]
    return HidePlan(tuple(hide), tuple(mask), tuple(rebind))
