"""``armature doctor``'s checks of ARMATURE_HOME itself: who may read what Armature keeps
there, and whether a process still writes to store files another process deleted.

A process that holds the SQLite store's ``-wal`` (or the database) after it was deleted
writes every record into a file no one else can see: runs complete and nothing is recorded
(issue 26). Only that process's restart cures it, so doctor names it.
"""

from __future__ import annotations

import os
from pathlib import Path

from armature_temporal.commands.doctor import Check

__all__ = ["deleted_store_check", "holders_of_deleted", "home_modes_check"]


def holders_of_deleted(db: Path, proc: Path = Path("/proc")) -> list[tuple[int, str, str]]:
    """Processes of this user (or any, for root) holding ``db``, its ``-wal`` or ``-shm``
    open after they were deleted: ``(pid, the deleted path, the command line)`` each."""
    names = {f"{db}{suffix} (deleted)" for suffix in ("", "-wal", "-shm")}
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # another user's process, or gone
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target in names:
                found.append((int(entry.name), target.removesuffix(" (deleted)"), _cmd(entry)))
                break
    return found


def _cmd(entry: Path) -> str:
    try:
        raw = (entry / "cmdline").read_bytes()
    except OSError:
        return "?"
    words = raw.rstrip(b"\0").split(b"\0")
    text = " ".join(w.decode(errors="replace") for w in words) or "?"
    return text if len(text) <= 120 else text[:119] + "…"


def deleted_store_check(db: Path, proc: Path = Path("/proc")) -> Check:
    """FAIL when a process writes to a deleted copy of the SQLite store at ``db``."""
    name = "store files"
    if not proc.is_dir():
        return Check(name, "ok", "not checked: no /proc here to see open files")
    holders = holders_of_deleted(db, proc)
    if not holders:
        return Check(name, "ok", f"no process holds a deleted {db.name}, -wal or -shm")
    said = "; ".join(f"pid {pid} ({cmd}) holds {path} (deleted)" for pid, path, cmd in holders)
    return Check(
        name,
        "fail",
        f"{said}: what it records goes into a file no one else can read, so runs complete "
        "and are not in the trace store",
        "restart that process (a worker: stop and start it; the local stack: `armature dev "
        "stop`, then the next `armature submit` starts it again)",
    )


def home_modes_check(home: Path) -> Check:
    """WARN when ARMATURE_HOME, or what Armature keeps in it, lets other users in.

    Every command makes what this user owns there private as it starts; what is still loose
    here belongs to another user or could not be changed."""
    from armature_temporal.runtime.private import loose_modes

    name = "home modes"
    if not home.is_dir():
        return Check(name, "ok", f"{home} does not exist yet; Armature makes it 0700")
    loose = loose_modes(home)
    if not loose:
        return Check(name, "ok", f"{home} and what Armature keeps there are owner-only")
    listed = ", ".join(f"{path} is {mode:04o}" for path, mode in loose[:6])
    more = f" and {len(loose) - 6} more" if len(loose) > 6 else ""
    paths = " ".join(str(p) for p, _ in loose[:6])
    return Check(
        name,
        "warn",
        f"{listed}{more}: other users can read the trace key, the store or run payloads",
        f"chmod go-rwx {paths} (as their owner)",
    )
