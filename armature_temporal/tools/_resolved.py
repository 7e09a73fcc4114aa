"""What a built-in call will touch, as the OS resolves it: the pseudo-fields safety rules see.

``shell`` gives ``_executable`` (the file that will run), the file tools ``_resolved_path``
(their ``path`` resolved against the workspace); :func:`resolving` attaches them to the
built-ins. The path logic itself is in :mod:`armature_temporal.tools._base`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

from pydantic import BaseModel

from armature_temporal.runtime.policy import EXECUTABLE_FIELD, RESOLVED_PATH_FIELD
from armature_temporal.tools._base import (
    ResolveFields,
    ToolImpl,
    real_workspace,
    resolve_executable,
    resolve_path,
    shown_path,
)
from armature_temporal.tools._models import ToolContext
from armature_temporal.tools._shell import ShellArgs

__all__ = ["resolving"]


def _path_fields(args: BaseModel, ctx: ToolContext) -> dict[str, str]:
    """A file tool's ``_resolved_path``: its ``path`` as the OS will resolve it."""
    raw = getattr(args, "path", None)
    if not isinstance(raw, str):
        raise TypeError(f"expected file tool args with a path, got {type(args).__name__}")
    root = real_workspace(ctx)
    try:
        return {RESOLVED_PATH_FIELD: shown_path(root, resolve_path(root, raw))}
    except ValueError:  # a NUL byte: the tool refuses it; the field stays missing
        return {}


def _shell_fields(args: BaseModel, ctx: ToolContext) -> dict[str, str]:
    """shell's ``_executable``: the file that will run (none when the program is not found)."""
    if not isinstance(args, ShellArgs):
        raise TypeError(f"expected ShellArgs, got {type(args).__name__}")
    try:
        cwd = resolve_path(real_workspace(ctx), args.cwd)
    except ValueError:
        return {}
    program = resolve_executable(args.command[0], cwd, os.environ.get("PATH"))
    return {} if program is None else {EXECUTABLE_FIELD: str(program)}


def _with(impl: ToolImpl, name: str, fn: ResolveFields) -> ToolImpl:
    return dataclasses.replace(impl, resolved_names=(name,), resolve_fields=fn)


def resolving(file_tools: Iterable[ToolImpl], shell: ToolImpl) -> tuple[ToolImpl, ...]:
    """The file tools with ``_resolved_path`` and ``shell`` with ``_executable``."""
    return (
        *(_with(t, RESOLVED_PATH_FIELD, _path_fields) for t in file_tools),
        _with(shell, EXECUTABLE_FIELD, _shell_fields),
    )
