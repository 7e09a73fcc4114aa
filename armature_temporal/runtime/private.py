"""Files only their owner may read: the trace key, the SQLite store, payloads and adapters.

Directories Armature creates are ``0700`` and files ``0600``, whatever the process umask, so
another local user cannot read a run's data or the key that makes its record tamper-evident.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "make_private", "private_dir", "write_private"]

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
