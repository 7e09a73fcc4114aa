"""The file tools (file_read, file_write, file_list), confined to the context's workspace.

Every path is resolved (symlinks followed, ``..`` collapsed) and must land inside the resolved
workspace root, so ``../../etc/passwd``, an absolute path elsewhere and a symlink pointing out
are all refused with ``policy_blocked``. Limits: a path swapped for a symlink between the check
and the use, and hard links to outside files, are not detected; run the worker with an OS
sandbox when the workspace is shared with untrusted processes.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from armature_temporal.tools._base import ToolArgs, ToolImpl, builtin_spec, typed_run
from armature_temporal.tools._errors import ToolFailure
from armature_temporal.tools._models import ToolContext

__all__ = ["FILE_TOOLS", "resolve_in_workspace"]

#: file_list stops after this many entries and says so (``truncated``).
MAX_LIST_ENTRIES = 1000

T = TypeVar("T")


def workspace_root(ctx: ToolContext) -> Path:
    """The resolved workspace directory; a missing workspace is a tool error."""
    root = ctx.workspace.resolve()
    if not root.is_dir():
        raise ToolFailure(
            "tool_error", f"workspace {str(ctx.workspace)!r} is not a directory; create it first"
        )
    return root


def resolve_in_workspace(ctx: ToolContext, raw: str) -> tuple[Path, Path]:
    """``(root, path)``: ``raw`` resolved against the workspace, refused when outside it."""
    root = workspace_root(ctx)
    if "\x00" in raw:
        raise ToolFailure("invalid_args", f"path {raw!r} contains a NUL byte")
    resolved = (root / raw).resolve()  # an absolute raw replaces root; "~" is just a name
    if not resolved.is_relative_to(root):
        raise ToolFailure(
            "policy_blocked",
            f"path {raw!r} resolves to {str(resolved)!r}, outside the workspace "
            f"{str(root)!r}; use a path relative to the workspace",
        )
    return root, resolved


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() or "."


async def _in_thread(ctx: ToolContext, fn: Callable[[], T]) -> T:
    async with asyncio.timeout(ctx.timeout_s):
        return await asyncio.to_thread(fn)


# --- file_read ---------------------------------------------------------------------------------


class FileReadArgs(ToolArgs):
    path: str = Field(..., min_length=1, description="File path relative to the workspace.")


def _read(ctx: ToolContext, args: FileReadArgs) -> dict[str, Any]:
    root, path = resolve_in_workspace(ctx, args.path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ToolFailure("tool_error", f"{args.path!r} is not a regular file")
        with path.open("rb") as fh:
            data = fh.read(ctx.output_cap_bytes + 1)
    except FileNotFoundError:
        raise ToolFailure("tool_error", f"no file {args.path!r} in the workspace") from None
    except OSError as exc:
        raise ToolFailure("tool_error", f"cannot read {args.path!r}: {exc.strerror}") from exc
    truncated = len(data) > ctx.output_cap_bytes
    return {
        "path": _relative(root, path),
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


def _write(ctx: ToolContext, args: FileWriteArgs) -> dict[str, Any]:
    root, path = resolve_in_workspace(ctx, args.path)
    data = args.content.encode("utf-8")
    if len(data) > ctx.max_write_bytes:
        raise ToolFailure(
            "invalid_args",
            f"content is {len(data)} bytes, over the {ctx.max_write_bytes}-byte write cap",
        )
    if path == root or path.is_dir():
        raise ToolFailure("tool_error", f"{args.path!r} is a directory; name a file")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise ToolFailure("tool_error", f"cannot write {args.path!r}: {exc.strerror}") from exc
    return {"path": _relative(root, path), "bytes_written": len(data), "created": not existed}


async def _run_write(args: FileWriteArgs, ctx: ToolContext) -> dict[str, Any]:
    return await _in_thread(ctx, lambda: _write(ctx, args))


# --- file_list ---------------------------------------------------------------------------------


class FileListArgs(ToolArgs):
    path: str = Field(".", min_length=1, description="Directory relative to the workspace.")
    recursive: bool = Field(False, description="Also list subdirectories (symlinks not followed).")


EntryType = Literal["file", "dir", "symlink", "other"]


def _entry(root: Path, path: Path) -> dict[str, Any]:
    info = path.lstat()
    kind: EntryType = (
        "symlink"
        if stat.S_ISLNK(info.st_mode)
        else "dir"
        if stat.S_ISDIR(info.st_mode)
        else "file"
        if stat.S_ISREG(info.st_mode)
        else "other"
    )
    return {"path": path.relative_to(root).as_posix(), "type": kind, "size": info.st_size}


def _list(ctx: ToolContext, args: FileListArgs) -> dict[str, Any]:
    root, base = resolve_in_workspace(ctx, args.path)
    if not base.is_dir():
        raise ToolFailure("tool_error", f"{args.path!r} is not a directory in the workspace")
    entries: list[dict[str, Any]] = []
    truncated = False
    try:
        for dirpath, dirnames, filenames in os.walk(base):  # never follows symlinked dirs
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                if len(entries) >= MAX_LIST_ENTRIES:
                    truncated = True
                    break
                entries.append(_entry(root, Path(dirpath) / name))
            if truncated or not args.recursive:
                break
    except OSError as exc:
        raise ToolFailure("tool_error", f"cannot list {args.path!r}: {exc.strerror}") from exc
    return {"path": _relative(root, base), "entries": entries, "truncated": truncated}


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
