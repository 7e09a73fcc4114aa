"""The file tools (file_read, file_write, file_list), confined to the context's workspace.

Paths are never handed to the OS whole. The workspace directory is opened, then each component
is opened relative to the directory above it with ``O_NOFOLLOW`` (``openat``-style), so what is
checked is what is used: a symlink swapped in between a check and an open, anywhere on the path,
cannot redirect the call. Symlinks inside the workspace are followed by this walk itself, and
only while they stay inside: an absolute target must lie under the workspace and a ``..`` in a
relative target may not climb above it. The model's own path may not contain ``..`` at all
(safety rules match the path as written, so ``notes/../ls`` must not pass a ``^notes/`` rule),
and an absolute path must name something under the workspace.

A regular file with more than one hard link is refused for reads and writes alike: a hard link
is an outside file under a workspace name, indistinguishable from it, so reading it leaks as
surely as writing it corrupts. New files are created with ``O_CREAT | O_EXCL`` and mode
:data:`FILE_MODE`, new directories with :data:`DIR_MODE` (both under the process umask); an
existing file keeps its mode. FIFOs, sockets and devices are refused without blocking.

POSIX only (``dir_fd``, ``O_NOFOLLOW``, ``O_DIRECTORY``). Not covered: a directory the walk
already holds being renamed out of the workspace by another process mid-call (the call then
finishes in the moved directory, among the workspace's own files); run the worker in an OS
sandbox when the workspace is shared with untrusted processes.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

from pydantic import Field

from armature_temporal.tools._base import ToolArgs, ToolImpl, builtin_spec, typed_run
from armature_temporal.tools._errors import ToolFailure
from armature_temporal.tools._models import ToolContext

__all__ = ["DIR_MODE", "FILE_MODE", "FILE_TOOLS", "resolve_in_workspace"]

#: file_list stops after this many entries, or this many directory levels, and says so.
MAX_LIST_ENTRIES = 1000
MAX_LIST_DEPTH = 64
#: Symlinks one path may pass through (as Linux's own limit).
MAX_SYMLINKS = 40
#: Mode of the files and directories the tools create (the umask still applies).
FILE_MODE = 0o600
DIR_MODE = 0o700

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
#: O_NONBLOCK: opening a FIFO must fail or return at once, never wait for its other end.
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC

#: Marks a '..' that came from a symlink's target (never from the model's path, which may not
#: hold '..' or NUL): ``_UP + link + NUL + target``, kept for the error message.
_UP = "\x00.."

T = TypeVar("T")


def workspace_root(ctx: ToolContext) -> Path:
    """The resolved workspace directory; a missing workspace is a tool error."""
    root = ctx.workspace.resolve()
    if not root.is_dir():
        raise ToolFailure(
            "tool_error", f"workspace {str(ctx.workspace)!r} is not a directory; create it first"
        )
    return root


def _outside(raw: str, root: Path, why: str) -> ToolFailure:
    return ToolFailure(
        "policy_blocked",
        f"path {raw!r} {why} outside the workspace {str(root)!r}; use a path relative to the "
        "workspace, without '..'",
    )


def _via_symlink(raw: str, root: Path, link: str, target: str) -> ToolFailure:
    return _outside(raw, root, f"passes the symlink {link!r} -> {target!r}, which leads")


def _climbs_out(raw: str, root: Path, marker: str) -> ToolFailure:
    """The refusal for a symlink target's '..' above the root (``marker``: see ``_UP``)."""
    link, target = marker[len(_UP) :].split("\x00", 1)
    return _via_symlink(raw, root, link, target)


def _components(ctx: ToolContext, root: Path, raw: str) -> list[str]:
    """The model's path as components under the workspace root."""
    if "\x00" in raw:
        raise ToolFailure("invalid_args", f"path {raw!r} contains a NUL byte")
    path = PurePosixPath(raw)  # "~" is just a name
    if path.is_absolute():
        for base in (root, ctx.workspace.absolute()):
            if path.is_relative_to(base):
                path = path.relative_to(base)
                break
        else:
            raise _outside(raw, root, "is absolute and")
    parts = [p for p in path.parts if p != "."]
    if ".." in parts:
        raise _outside(raw, root, "has a '..' component, which could lead")
    return parts


class _Beneath:
    """Open directories from the workspace root down to where a walk has got to.

    Every directory on the stack was opened by name from the one above it with O_NOFOLLOW, so
    the stack is the real path; ``..`` (only ever from a symlink's target) pops it and cannot
    climb past the root.
    """

    def __init__(self, root: Path, raw: str) -> None:
        self.root = root
        self.raw = raw
        self.fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)]
        self.names: list[str] = []
        self.todo: list[str] = []  # what the walk has still to do (see walk)
        self.hops = 0

    def __enter__(self) -> _Beneath:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def rel(self, name: str = "") -> str:
        """The workspace-relative path of ``name`` in the current directory (``.`` for root)."""
        return "/".join([*self.names, name] if name else self.names) or "."

    def _to_root(self) -> None:
        while len(self.fds) > 1:
            os.close(self.fds.pop())
        self.names.clear()

    def _up(self, marker: str) -> None:
        if not self.names:
            raise _climbs_out(self.raw, self.root, marker)
        os.close(self.fds.pop())
        self.names.pop()

    def _hop(self) -> None:
        self.hops += 1
        if self.hops > MAX_SYMLINKS:
            raise ToolFailure(
                "tool_error",
                f"path {self.raw!r} passes through more than {MAX_SYMLINKS} symlinks (or kept "
                "changing while it was opened)",
            )

    def link_target(self, name: str) -> list[str] | None:
        """Where the symlink ``name`` in the current directory points, as components to walk
        next from the current directory (an absolute target moves the walk to the root);
        None when ``name`` is not a symlink (any more)."""
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                self._hop()  # it changed under us; the caller looks again
                return None
            raise
        self._hop()
        link = self.rel(name)
        path = PurePosixPath(target)
        if path.is_absolute():
            if not path.is_relative_to(self.root):
                raise _via_symlink(self.raw, self.root, link, target)
            self._to_root()
            path = path.relative_to(self.root)
        parts = [p for p in path.parts if p != "."]
        return [f"{_UP}{link}\x00{target}" if p == ".." else p for p in parts]

    def enter(self, name: str, *, create: bool) -> list[str] | None:
        """Step into the directory ``name`` (created if missing and ``create``); a symlink is
        not entered: its target's components are returned, to be walked instead."""
        made = False
        while True:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
            except FileNotFoundError:
                if not create:
                    raise
                if made:
                    self._hop()  # removed again as soon as it was made
                try:
                    os.mkdir(name, DIR_MODE, dir_fd=self.fd)
                    made = True
                except FileExistsError:
                    self._hop()  # made by someone else meanwhile: open whatever it is
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                target = self.link_target(name)
                if target is None:
                    raise ToolFailure(
                        "tool_error", f"{self.rel(name)!r} is not a directory (in {self.raw!r})"
                    ) from None
                return target
            self.fds.append(fd)
            self.names.append(name)
            return None

    def walk(
        self, parts: list[str], last: Callable[[str], T | None] | None, *, create: bool = False
    ) -> tuple[T | None, str]:
        """Walk ``parts``; every one but the last must be a directory (or a symlink to one).

        ``last(name)`` opens the final component in the current directory and returns what it
        opened, or None when that is a symlink, which is then followed. Without ``last`` (or
        when the path ends at a directory) every component is a directory, and the result is
        None with the walk standing in it. Returns the result and the final path, relative.
        A missing directory raises FileNotFoundError with :attr:`todo` still holding it and
        what follows it.
        """
        self.todo = list(parts)
        while self.todo:
            name = self.todo[0]
            if name.startswith(_UP):  # a '..' from a symlink's target
                self._up(name)
                self.todo.pop(0)
                continue
            if len(self.todo) > 1 or last is None:
                followed = self.enter(name, create=create)
            else:
                opened = last(name)
                if opened is not None:
                    return opened, self.rel(name)
                followed = self.link_target(name)
                if followed is None:  # not a symlink after all: it changed; look again
                    followed = [name]
            self.todo.pop(0)
            if followed is not None:
                self.todo[:0] = followed
        return None, self.rel()


def _not_a_symlink(walk: _Beneath, name: str) -> bool | None:
    try:
        os.readlink(name, dir_fd=walk.fd)
    except OSError:  # not a symlink, or not there: either way the path ends here
        return True
    return None


def resolve_in_workspace(ctx: ToolContext, raw: str) -> tuple[Path, Path]:
    """``(root, path)``: ``raw`` resolved inside the workspace (symlinks followed as the file
    tools follow them), refused with ``policy_blocked`` when it leads outside or has ``..``.

    Components that do not exist yet are kept as written. The answer describes the path at the
    time of the call; the file tools themselves never open by it (they walk again, by fd).

    Raises:
        ToolFailure: ``policy_blocked`` (outside, or ``..``), ``invalid_args`` (a NUL byte),
            ``tool_error`` (a component that is a file, not a directory).
    """
    root = workspace_root(ctx)
    parts = _components(ctx, root, raw)
    with _Beneath(root, raw) as walk:
        try:
            _, rel = walk.walk(parts, lambda name: _not_a_symlink(walk, name))
        except FileNotFoundError:  # the rest does not exist yet: it is what it says
            names = list(walk.names)
            for part in walk.todo:
                if not part.startswith(_UP):
                    names.append(part)
                elif names:
                    names.pop()
                else:
                    raise _climbs_out(raw, root, part) from None
            return root, root.joinpath(*names)
    return root, root if rel == "." else root / rel


async def _in_thread(ctx: ToolContext, fn: Callable[[], T]) -> T:
    async with asyncio.timeout(ctx.timeout_s):
        return await asyncio.to_thread(fn)


def _regular_single(fd: int, raw: str, rel: str) -> os.stat_result:
    """fstat of what was opened: a regular file with exactly one link, or a refusal."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ToolFailure("tool_error", f"{raw!r} is not a regular file")
    if info.st_nlink > 1:
        raise ToolFailure(
            "policy_blocked",
            f"{raw!r} ({rel!r}) has {info.st_nlink} hard links: a hard link may be a file outside "
            "the workspace under a workspace name, so the file tools refuse it; replace it with "
            "a copy (cp --remove-destination SRC DEST) to use it",
        )
    return info


def _os_failure(verb: str, raw: str, exc: OSError) -> ToolFailure:
    if exc.errno == errno.EISDIR:
        return ToolFailure("tool_error", f"{raw!r} is a directory; name a file")
    if exc.errno == errno.ENXIO:
        return ToolFailure("tool_error", f"{raw!r} is not a regular file")
    return ToolFailure("tool_error", f"cannot {verb} {raw!r}: {exc.strerror}")


# --- file_read ---------------------------------------------------------------------------------


class FileReadArgs(ToolArgs):
    path: str = Field(..., min_length=1, description="File path relative to the workspace.")


def _open_for_read(walk: _Beneath, name: str) -> int | None:
    try:
        return os.open(name, os.O_RDONLY | _FILE_FLAGS, dir_fd=walk.fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise


def _read(ctx: ToolContext, args: FileReadArgs) -> dict[str, Any]:
    root = workspace_root(ctx)
    parts = _components(ctx, root, args.path)
    try:
        with _Beneath(root, args.path) as walk:
            fd, rel = walk.walk(parts, lambda name: _open_for_read(walk, name))
        if fd is None:
            raise ToolFailure("tool_error", f"{args.path!r} is not a regular file")
        with os.fdopen(fd, "rb") as fh:
            info = _regular_single(fd, args.path, rel)
            data = fh.read(ctx.output_cap_bytes + 1)
    except FileNotFoundError:
        raise ToolFailure("tool_error", f"no file {args.path!r} in the workspace") from None
    except OSError as exc:
        raise _os_failure("read", args.path, exc) from exc
    truncated = len(data) > ctx.output_cap_bytes
    return {
        "path": rel,
        "content": data[: ctx.output_cap_bytes].decode("utf-8", errors="replace"),
        "size": info.st_size,
        "truncated": truncated,
    }


async def _run_read(args: FileReadArgs, ctx: ToolContext) -> dict[str, Any]:
    return await _in_thread(ctx, lambda: _read(ctx, args))


# --- file_write --------------------------------------------------------------------------------


class FileWriteArgs(ToolArgs):
    path: str = Field(..., min_length=1, description="File path relative to the workspace.")
    content: str = Field(..., description="Text to write (UTF-8); replaces the file.")


def _open_for_write(walk: _Beneath, name: str) -> tuple[int, bool] | None:
    """``(fd, created)``: a new file (O_EXCL), else the existing one, never truncated here."""
    flags = os.O_WRONLY | _FILE_FLAGS
    try:
        return os.open(name, flags | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=walk.fd), True
    except FileExistsError:
        pass
    try:
        return os.open(name, flags, dir_fd=walk.fd), False
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT):  # a symlink, or gone again: look again
            return None
        raise


def _write(ctx: ToolContext, args: FileWriteArgs) -> dict[str, Any]:
    root = workspace_root(ctx)
    parts = _components(ctx, root, args.path)
    data = args.content.encode("utf-8")
    if len(data) > ctx.max_write_bytes:
        raise ToolFailure(
            "invalid_args",
            f"content is {len(data)} bytes, over the {ctx.max_write_bytes}-byte write cap",
        )
    if not parts:
        raise ToolFailure("tool_error", f"{args.path!r} is a directory; name a file")
    try:
        with _Beneath(root, args.path) as walk:
            opened, rel = walk.walk(parts, lambda name: _open_for_write(walk, name), create=True)
        if opened is None:
            raise ToolFailure("tool_error", f"{args.path!r} is a directory; name a file")
        fd, created = opened
        with os.fdopen(fd, "wb") as fh:
            _regular_single(fd, args.path, rel)  # before anything is changed
            os.ftruncate(fd, 0)
            fh.write(data)
    except OSError as exc:
        raise _os_failure("write", args.path, exc) from exc
    return {"path": rel, "bytes_written": len(data), "created": created}


async def _run_write(args: FileWriteArgs, ctx: ToolContext) -> dict[str, Any]:
    return await _in_thread(ctx, lambda: _write(ctx, args))


# --- file_list ---------------------------------------------------------------------------------


class FileListArgs(ToolArgs):
    path: str = Field(".", min_length=1, description="Directory relative to the workspace.")
    recursive: bool = Field(False, description="Also list subdirectories (symlinks not followed).")


EntryType = Literal["file", "dir", "symlink", "other"]


def _kind(mode: int) -> EntryType:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


class _Lister:
    """Depth-first listing from an open directory, each subdirectory opened by fd."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.truncated = False

    def list(self, fd: int, prefix: str, depth: int, recursive: bool) -> None:
        with os.scandir(fd) as it:
            found = sorted(it, key=lambda e: e.name)
        subdirs: list[str] = []
        for entry in found:
            if len(self.entries) >= MAX_LIST_ENTRIES:
                self.truncated = True
                return
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed since the directory was read
                continue
            kind = _kind(info.st_mode)
            path = f"{prefix}{entry.name}"
            self.entries.append({"path": path, "type": kind, "size": info.st_size})
            if kind == "dir":
                subdirs.append(entry.name)
        if not recursive:
            return
        for name in subdirs:
            if depth >= MAX_LIST_DEPTH:
                self.truncated = True
                return
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # swapped for a symlink, removed, unreadable: not entered
                if exc.errno in (errno.ENOTDIR, errno.ELOOP, errno.ENOENT, errno.EACCES):
                    continue
                raise
            try:
                self.list(sub, f"{prefix}{name}/", depth + 1, recursive)
            finally:
                os.close(sub)
            if self.truncated:
                return


def _list(ctx: ToolContext, args: FileListArgs) -> dict[str, Any]:
    root = workspace_root(ctx)
    parts = _components(ctx, root, args.path)
    lister = _Lister()
    try:
        with _Beneath(root, args.path) as walk:
            _, rel = walk.walk(parts, None)
            lister.list(walk.fd, "" if rel == "." else f"{rel}/", 1, args.recursive)
    except FileNotFoundError:
        raise ToolFailure(
            "tool_error", f"{args.path!r} is not a directory in the workspace"
        ) from None
    except OSError as exc:
        raise ToolFailure("tool_error", f"cannot list {args.path!r}: {exc.strerror}") from exc
    return {"path": rel, "entries": lister.entries, "truncated": lister.truncated}


async def _run_list(args: FileListArgs, ctx: ToolContext) -> dict[str, Any]:
    return await _in_thread(ctx, lambda: _list(ctx, args))


FILE_TOOLS: tuple[ToolImpl, ...] = (
    ToolImpl(
        spec=builtin_spec(
            "file_read",
            "Read a text file in the workspace (UTF-8; content capped, see truncated).",
            FileReadArgs,
            "full",
        ),
        args_model=FileReadArgs,
        run=typed_run(FileReadArgs, _run_read),
    ),
    ToolImpl(
        spec=builtin_spec(
            "file_write",
            "Write a text file in the workspace, creating parent directories; replaces an "
            "existing file.",
            FileWriteArgs,
            "partial",
        ),
        args_model=FileWriteArgs,
        run=typed_run(FileWriteArgs, _run_write),
    ),
    ToolImpl(
        spec=builtin_spec(
            "file_list",
            f"List a workspace directory (at most {MAX_LIST_ENTRIES} entries).",
            FileListArgs,
            "full",
        ),
        args_model=FileListArgs,
        run=typed_run(FileListArgs, _run_list),
    ),
)
