"""Reading the files a spec names: only inside the spec's folder tree, only regular files, and
never more than a limit, checked by reading.

A spec names files besides itself: ``context_layers[].src``, ``skill_library.*.path``,
``agent_library.*.path`` (agent bundles) and ``stages[].subagent_spec`` (child specs). Their
text goes into the compiled Plan, so ``armature plan --json`` prints it and every prompt may
carry it: a spec that could name ``~/.armature/trace.key`` or ``/proc/self/environ`` would hand
them to whoever reads the plan or the model. So each path, resolved the way the OS will open it
(``..`` collapsed, symlinks followed), must lie in the top-level spec's folder tree (or a folder
listed in ``$ARMATURE_SPEC_ROOTS``), never in ``/proc`` or ``/sys``, and never in what
tools may not see either (``$ARMATURE_HOME``, the worker's credential files: see
:func:`armature_temporal.tools.sandbox.hidden_paths`). The file is opened without following a
final symlink and without blocking (a FIFO would), checked again on the descriptor (a regular
file, at the path that was checked), and read up to the limit plus one byte: ``/proc`` and
``/sys`` files report size 0, so a size from ``stat`` proves nothing.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from armature_temporal.errors import ArmatureError, SpecError, SpecIssue

__all__ = [
    "KERNEL_TREES",
    "SpecFileRefused",
    "SpecRoots",
    "read_capped",
    "read_spec_file",
    "roots_of",
    "spec_file_path",
]

#: Kernel file systems a spec may never read from, whatever the roots: their files look
#: regular, say size 0, and hold the process's environment, memory maps, keys. (Device nodes,
#: in /dev or anywhere, are refused as not regular files; /dev/shm holds ordinary files.)
KERNEL_TREES: tuple[Path, ...] = (Path("/proc"), Path("/sys"))

_ROOTS_HINT = "ARMATURE_SPEC_ROOTS"


class SpecFileRefused(ArmatureError):
    """A file a spec names cannot be read: the message says why and what to do instead."""


@dataclass(frozen=True)
class SpecRoots:
    """The folders a spec's files may lie in (real paths): the top-level spec's folder, shared
    by its child specs, and those ``$ARMATURE_SPEC_ROOTS`` adds."""

    folder: Path
    extra: tuple[Path, ...] = ()

    @classmethod
    def of(cls, folder: Path) -> SpecRoots:
        """The roots for a spec in ``folder``, with ``$ARMATURE_SPEC_ROOTS``.

        Raises:
            SettingError: ``$ARMATURE_SPEC_ROOTS`` holds a relative path.
        """
        from armature_temporal.settings import spec_roots

        return cls(_real(folder), tuple(_real(p) for p in spec_roots()))

    def holding(self, path: Path) -> Path | None:
        """The root ``path`` lies in, or None."""
        return next((r for r in (self.folder, *self.extra) if _under(path, r)), None)


def roots_of(folder: Path, display: str) -> SpecRoots:
    """:meth:`SpecRoots.of`, a bad ``$ARMATURE_SPEC_ROOTS`` reported against the spec
    ``display``.

    Raises:
        SpecError: ``$ARMATURE_SPEC_ROOTS`` holds a relative path.
    """
    from armature_temporal.settings import SettingError

    try:
        return SpecRoots.of(folder)
    except SettingError as exc:
        raise SpecError([SpecIssue(display, 0, 0, "", str(exc))]) from None


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def spec_file_path(roots: SpecRoots, base_dir: Path, relative: str) -> Path:
    """Where ``relative`` (as the spec wrote it, relative to ``base_dir``) leads, as a real
    path, when a spec may read it there.

    Raises:
        SpecFileRefused: it leads outside the roots, into a kernel file system or into what
            tools may not see, or names something that is not a regular file.
    """
    if "\0" in relative:
        raise SpecFileRefused(f"{relative!r} has a NUL byte; name a file by its path")
    real = _real(base_dir / relative)
    shown = f"{relative!r}" if str(real) == relative else f"{relative!r} (that is {str(real)!r})"
    for tree in KERNEL_TREES:
        if _under(real, tree):
            raise SpecFileRefused(
                f"{shown} is in {tree}, a kernel file system, which a spec may not read; "
                "name a text file in the spec's folder"
            )
    root = roots.holding(real)
    if root is None:
        listed = "" if not roots.extra else f" or {[str(r) for r in roots.extra]}"
        raise SpecFileRefused(
            f"{shown} is outside the spec's folder {str(roots.folder)!r}{listed} (after "
            "following '..' and symlinks), and a spec may only read files in its own folder "
            "tree; move or copy the file under that folder, or list its folder in "
            f"{_ROOTS_HINT} (folders separated by '{os.pathsep}')"
        )
    for hidden in _hidden():
        if _under(real, hidden) and hidden not in root.parents:
            raise SpecFileRefused(
                f"{shown} is inside {str(hidden)!r}, which holds Armature's records and keys "
                "or the worker's credentials and which specs may not read; keep the file in "
                "the spec's folder, away from it"
            )
    try:
        info = os.lstat(real)
    except FileNotFoundError:
        raise SpecFileRefused(
            f"file {str(real)!r} does not exist (paths are relative to the spec's folder)"
        ) from None
    except OSError as exc:
        raise SpecFileRefused(f"cannot read {shown}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecFileRefused(
            f"{shown} is {_kind(info.st_mode)}, not a regular file; name a text file"
        )
    return real


def read_spec_file(roots: SpecRoots, base_dir: Path, relative: str, limit: int) -> str:
    """The UTF-8 text of ``relative`` (see :func:`spec_file_path`), at most ``limit`` bytes.

    Raises:
        SpecFileRefused: the path is refused, the file cannot be read, is over ``limit``
            bytes or is not UTF-8.
    """
    real = spec_file_path(roots, base_dir, relative)
    return read_capped(real, limit, relative)


def read_capped(real: Path, limit: int, shown: str | None = None) -> str:
    """The UTF-8 text of the regular file at ``real`` (a real path: no symlink, no ``..``),
    refused past ``limit`` bytes.

    The size is found by reading (at most ``limit + 1`` bytes), never by ``stat``: ``/proc``
    and ``/sys`` files say 0 whatever they hold. Opened without following a final symlink and
    without blocking; what was opened must be a regular file at ``real`` (a symlink swapped
    into the path after it was checked is refused).

    Raises:
        SpecFileRefused: as :func:`read_spec_file`.
    """
    name = repr(shown if shown is not None else str(real))
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise SpecFileRefused(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecFileRefused(
                f"{name} is {_kind(info.st_mode)}, not a regular file; name a text file"
            )
        opened = _opened_path(fd)
        if opened is not None and opened != real:
            raise SpecFileRefused(
                f"{name} changed while it was read (it now leads to {str(opened)!r}); "
                "load the spec again"
            )
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SpecFileRefused(f"cannot read {name}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise SpecFileRefused(
            f"{name} is over {limit} bytes (counted by reading it); shorten it or split it "
            "into several files"
        )
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecFileRefused(
            f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None


def _opened_path(fd: int) -> Path | None:
    """The path the kernel holds for ``fd`` (Linux), or None where it cannot say."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _hidden() -> list[Path]:
    """What tools may not see (real paths); asked only when a spec names a file."""
    from armature_temporal.tools.sandbox import hidden_paths

    return hidden_paths()
