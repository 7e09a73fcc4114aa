"""Files only their owner may read: the trace key, the SQLite store, payloads and adapters.

Directories Armature creates are ``0700`` and files ``0600``, whatever the process umask, so
another local user cannot read a run's data or the key that makes its record tamper-evident.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "OWNED_DIRS",
    "OWNED_FILES",
    "loose_modes",
    "make_private",
    "private_dir",
    "secure_home",
    "tighten",
    "write_private",
]

#: What Armature keeps directly under ARMATURE_HOME: files holding the key, the record and
#: every payload (with SQLite's companions), and the directories it makes.
OWNED_FILES = (
    "trace.key",
    "armature.db",
    "armature.db-wal",
    "armature.db-shm",
    "temporal.db",
    "temporal.db-wal",
    "temporal.db-shm",
)
OWNED_DIRS = ("run", "logs", "payloads", "workspace", "adapters")

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) as ``0700`` directories; returns it.

    A directory that already exists keeps its mode: it may be one the user made and shares
    on purpose (a payload volume, say). Only the ones created here are made private.
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # another process made it meanwhile
        os.chmod(directory, DIR_MODE)  # mkdir's mode is filtered by the umask
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically as a ``0600`` file (created under a temporary
    name, then renamed into place)."""
    private_dir(path.parent)
    # unique per call: threads of one process may write the same path at once
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def make_private(root: Path) -> None:
    """Make ``root`` and everything under it owner-only: directories ``0700``, files ``0600``
    (for trees a library wrote with the umask's modes, such as ``save_pretrained``)."""
    os.chmod(root, DIR_MODE)
    for base, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(base, name), DIR_MODE)
        for name in files:
            os.chmod(os.path.join(base, name), FILE_MODE)


def loose_modes(home: Path) -> list[tuple[Path, int]]:
    """What Armature owns under ``home`` whose mode lets others in: ``home`` itself and
    :data:`OWNED_DIRS` (not ``0700``), :data:`OWNED_FILES` and the files in ``run`` and
    ``logs`` (not ``0600``); with each mode. Only ``stat``: nothing is opened."""
    found: list[tuple[Path, int]] = []
    if not home.is_dir():
        return found
    dirs = [home, *(home / d for d in OWNED_DIRS)]
    files = [home / f for f in OWNED_FILES]
    for sub in ("run", "logs"):
        if (home / sub).is_dir():
            files += sorted(p for p in (home / sub).iterdir() if p.is_file())
    for path in [*dirs, *files]:
        try:
            mode = os.stat(path, follow_symlinks=False).st_mode & 0o777
        except OSError:
            continue
        if mode & 0o077:
            found.append((path, mode))
    return found


def tighten(path: Path) -> int | None:
    """Make ``path`` owner-only (a directory ``0700``, a file ``0600``) when its mode lets
    others in, by ``chmod`` on the path — it is never opened, so a live SQLite file keeps its
    locks. Returns the mode it had when it was changed; ``None`` when it was private already,
    is missing, or is another user's (left alone)."""
    try:
        info = os.stat(path, follow_symlinks=False)
        mode = info.st_mode & 0o777
        if not mode & 0o077 or info.st_uid != os.getuid():
            return None
        os.chmod(path, DIR_MODE if stat.S_ISDIR(info.st_mode) else FILE_MODE)
    except OSError:
        return None
    return mode


def secure_home(home: Path) -> list[str]:
    """Make what Armature owns under an existing ``home`` owner-only (an existing home kept
    0755 and ``temporal.db``, every payload, 0644) with :func:`tighten`. Returns a sentence per
    change, for the caller to say once."""
    said = []
    for path, _ in loose_modes(home):
        mode = tighten(path)
        if mode is not None:
            want = "0700" if path.is_dir() else "0600"
            said.append(f"{path} was {mode:04o}, now {want}: it is Armature's, and private")
    return said
