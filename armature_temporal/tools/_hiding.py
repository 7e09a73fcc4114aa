"""What a tool program must never see or reach through the file system, and the layout of the
world it runs in (:class:`Layout`): ``$ARMATURE_HOME`` (the trace key, the store, payloads), an
SQLite store outside it, the worker's credential files, the machine's password hashes and SSH
host keys, every unix socket a service listens on (PostgreSQL's ``/run/postgresql``, MySQL,
Redis, Docker: a socket reaches a service without any network), and the worker's ``/tmp``,
``/var/tmp`` and ``/run``, replaced by private ones. The call's workspaces are bound back.
Used by :mod:`armature_temporal.tools.sandbox`; the mounts themselves are made by
:mod:`armature_temporal.tools._nsinit` (or bwrap)."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PRIVATE_DIRS",
    "SECRET_HOME_PATHS",
    "SYSTEM_SECRETS",
    "HidePlan",
    "Layout",
    "hidden_paths",
    "layout",
]

#: Credential files and directories under the worker's ``$HOME`` that no tool program sees:
#: cloud CLIs, SSH and GnuPG keys, registry and package-index logins, git and netrc logins,
#: database client passwords, model hub tokens.
SECRET_HOME_PATHS: tuple[str, ...] = (
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".docker",
    ".kube",
    ".ssh",
    ".gnupg",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".my.cnf",
    ".vault-token",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".terraform.d",
    ".cache/huggingface",
    ".huggingface",
)

#: Files of the machine a program running as uid 0 without capabilities could still read
#: (owner permissions): password hashes and SSH host keys (globs).
SYSTEM_SECRETS: tuple[str, ...] = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_*_key",
)

#: Directories each program gets an empty, private tmpfs for (mode), instead of the worker's.
PRIVATE_DIRS: tuple[tuple[str, str], ...] = (
    ("/tmp", "1777"),
    ("/var/tmp", "1777"),
    ("/run", "0755"),
)


@dataclass(frozen=True)
class HidePlan:
    """What a call's sandbox hides: directories (``hide``), files (``mask``), and the
    workspaces under a hidden directory that are bound back (``rebind``). Real paths."""

    hide: tuple[str, ...]
    mask: tuple[str, ...]
    rebind: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """The mounts of one call, real paths: ``private`` directories (with their mode) and
    ``hide`` directories become empty tmpfs (hidden ones read-only), ``mask`` files and sockets
    get ``/dev/null`` over them, ``rebind`` (the workspaces, writable) and ``readable`` (files
    the call needs, read-only) are bound back at their own paths where something covers them
    (a workspace is always bound: it is the one writable place)."""

    private: tuple[tuple[str, str], ...]
    hide: tuple[str, ...]
    mask: tuple[str, ...]
    rebind: tuple[str, ...]
    readable: tuple[str, ...]
    #: Directories of the worker's own Python and PATH that a private directory would cover
    #: (a virtualenv under /tmp): bound back read-only, so the programs a worker would run, and
    #: the sandbox's own interpreter, are there.
    runtime: tuple[str, ...] = ()


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
    found += [Path(p) for pattern in SYSTEM_SECRETS for p in sorted(glob.glob(pattern))]
    real = []
    for path in found:
        path = _real(path.expanduser())
        # os.path.exists: a path this worker may not even look at is one it cannot hide, and
        # one the program (the same uid) cannot read either.
        if os.path.exists(path) and path not in real and path != Path("/"):
            real.append(path)
    # A path inside another hidden directory is hidden with it.
    return [p for p in real if not any(o != p and _under(p, o) for o in real)]


def listening_sockets() -> list[Path]:
    """Unix sockets bound to a path in this network namespace (``/proc/net/unix``): services a
    program could reach without a network (PostgreSQL, MySQL, Redis, Docker, D-Bus ...)."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()[1:]
    except OSError:
        return []
    paths = {parts[7] for line in lines if len(parts := line.split()) >= 8}
    found = []
    for raw in sorted(p for p in paths if p.startswith("/")):
        try:
            if stat.S_ISSOCK(os.lstat(raw).st_mode):
                found.append(_real(Path(raw)))
        except OSError:
            continue
    return found


def _private() -> list[tuple[Path, str]]:
    seen: list[tuple[Path, str]] = []
    for path, mode in PRIVATE_DIRS:
        real = _real(Path(path))
        if os.path.isdir(real) and real != Path("/") and all(real != p for p, _ in seen):
            seen.append((real, mode))
    return seen


def runtime_dirs() -> list[Path]:
    """The worker's Python installation (its prefixes and the interpreter's directory) and the
    directories on its PATH, real paths of those that exist."""
    import sys

    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    found += [d for d in (os.environ.get("PATH") or "").split(os.pathsep) if d]
    real: list[Path] = []
    for raw in found:
        path = _real(Path(raw))
        if os.path.isdir(path) and path not in real:
            real.append(path)
    return real


def layout(visible: Sequence[Path], readable: Sequence[Path] = ()) -> Layout:
    """The mounts for a call whose workspaces are ``visible`` and which reads ``readable``.

    Every :func:`hidden_paths` entry is hidden (one that is or holds a workspace too: the
    record's files win), unless a private directory already covers it; every listening unix
    socket outside the covered directories and the workspaces is masked."""
    private = _private()
    covered = [p for p, _ in private]
    hidden = [p for p in hidden_paths() if not any(_under(p, c) for c in covered)]
    hide = [p for p in hidden if os.path.isdir(p)]
    workspaces = list(dict.fromkeys(_real(v) for v in visible))
    over = [*covered, *hide]
    sockets = [
        s
        for s in listening_sockets()
        if not any(_under(s, c) for c in over) and not any(_under(s, w) for w in workspaces)
    ]
    mask = [p for p in hidden if not os.path.isdir(p)] + [s for s in sockets if s not in hidden]
    rebind = [w for w in workspaces if w not in hide]  # a workspace that is hidden: hidden
    files = [
        f
        for f in dict.fromkeys(_real(r) for r in readable)
        if any(_under(f, c) for c in over) and not any(_under(f, w) for w in rebind)
    ]
    # Only what a private directory covers comes back, read-only; never what is hidden.
    runtime = [
        d
        for d in runtime_dirs()
        if any(_under(d, c) for c in covered)
        and not any(_under(d, h) or _under(h, d) for h in hidden)
        and not any(_under(d, w) for w in rebind)
    ]
    runtime = [d for d in runtime if not any(o != d and _under(d, o) for o in runtime)]
    return Layout(
        private=tuple((str(p), m) for p, m in private),
        hide=tuple(map(str, hide)),
        mask=tuple(map(str, mask)),
        rebind=tuple(map(str, rebind)),
        readable=tuple(map(str, files)),
        runtime=tuple(map(str, runtime)),
    )


def _plan(visible: Sequence[Path]) -> HidePlan:
    """The hiding part of :func:`layout` (what bwrap's options and older callers use)."""
    made = layout(visible)
    return HidePlan(made.hide, made.mask, made.rebind)
