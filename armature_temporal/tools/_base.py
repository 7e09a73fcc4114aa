"""What every tool implementation is made of, built-in or Python function."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from armature_temporal.tools._models import Reversibility, ToolContext, ToolSpec

__all__ = [
    "PolicyView",
    "Postcondition",
    "ResolveFields",
    "RunFn",
    "ToolArgs",
    "ToolImpl",
    "builtin_spec",
    "real_workspace",
    "resolve_executable",
    "resolve_path",
    "shown_path",
    "typed_run",
]

A = TypeVar("A", bound=BaseModel)

#: Runs a tool with its validated args; returns the JSON-safe output or raises ToolFailure.
RunFn = Callable[[BaseModel, ToolContext], Awaitable[dict[str, Any]]]

#: Checked after a successful call with the validated args and the output; False fails the
#: call with ``postcondition_failed``.
Postcondition = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]

#: The fields safety rules see for a call, from its validated args (see ToolImpl.policy_view).
PolicyView = Callable[[BaseModel], dict[str, Any]]

#: The pseudo-fields safety rules see for a call (``_executable``, ``_resolved_path``): what the
#: OS will actually touch, from its validated args and context (see ToolImpl.resolve_fields).
ResolveFields = Callable[[BaseModel, ToolContext], dict[str, str]]


class ToolArgs(BaseModel):
    """Base of the built-in tools' argument models: unknown arguments are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class ToolImpl:
    """A resolved tool: its spec, how to validate its args, and how to run it.

    ``run`` returns the JSON-safe output or raises ``ToolFailure``; it enforces its own time
    limit from the context. ``policy_view`` turns validated args into what safety rules see
    (default: the args as given), so a rule matches what will run, e.g. shell's ``cmd`` and
    ``argv`` both; ``resolve_fields`` gives the pseudo-fields (``_executable``,
    ``_resolved_path``), named in ``resolved_names``. ``check_schema`` False skips the JSON
    Schema check before the call (tools of 0.7.0 tool modules, whose handlers took their args
    unchecked).
    """

    spec: ToolSpec
    args_model: type[BaseModel]
    run: RunFn
    postcondition: Postcondition | None = None
    reversibility_of: Callable[[Mapping[str, Any], ToolContext | None], Reversibility] | None = None
    policy_view: PolicyView | None = None
    check_schema: bool = True
    #: The pseudo-fields ``resolve_fields`` can give (what spec checks accept in rules).
    resolved_names: tuple[str, ...] = ()
    resolve_fields: ResolveFields | None = None

    def renamed(self, name: str) -> ToolImpl:
        """The same tool under another name (a registered tool reached as module:function)."""
        spec = self.spec.model_copy(update={"name": name})
        return dataclasses.replace(self, spec=spec)

    def reversibility(
        self, args: Mapping[str, Any], ctx: ToolContext | None = None
    ) -> Reversibility:
        """How far this particular call can be undone (in ``ctx``: what the spec marks safe)."""
        if self.reversibility_of is not None:
            return self.reversibility_of(args, ctx)
        return self.spec.reversibility


def typed_run(model: type[A], fn: Callable[[A, ToolContext], Awaitable[dict[str, Any]]]) -> RunFn:
    """Adapt a run function over one args model to the RunFn every ToolImpl holds."""

    async def run(args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        if not isinstance(args, model):
            raise TypeError(f"expected {model.__name__}, got {type(args).__name__}")
        return await fn(args, ctx)

    return run


def builtin_spec(
    name: str, description: str, model: type[BaseModel], reversibility: Reversibility
) -> ToolSpec:
    """A built-in tool's spec, its parameters generated from its args model."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    return ToolSpec(
        name=name, description=description, parameters=schema, reversibility=reversibility
    )


# --- what a call will touch, as the OS resolves it ------------------------------------------


def real_workspace(ctx: ToolContext) -> Path:
    """The workspace directory with every symlink in it resolved (it need not exist)."""
    return Path(os.path.realpath(ctx.workspace))


def resolve_path(base: Path, raw: str) -> Path:
    """``raw`` resolved from ``base`` the way the OS resolves it: absolute, every symlink
    followed, ``.``, ``..`` and ``//`` collapsed (``..`` after the symlink before it, as the
    kernel does). An absolute ``raw`` replaces ``base``; ``~`` is just a name; a part that does
    not exist is kept as written. Pure path logic apart from reading symlinks.

    Raises:
        ValueError: ``raw`` contains a NUL byte.
    """
    if "\x00" in raw:
        raise ValueError(f"path {raw!r} contains a NUL byte")
    real = os.path.realpath(os.path.join(base, raw))
    if real.startswith("//") and not real.startswith("///"):
        real = real[1:]  # POSIX leaves a leading "//" to the system; Linux reads it as "/"
    return Path(real)


def shown_path(root: Path, path: Path) -> str:
    """How safety rules see a resolved ``path``: relative to the workspace ``root``
    (``notes/a.txt``; ``.`` for the root) when inside it, absolute (``/etc/passwd``) when not,
    so a rule anchored on ``^notes/`` can never match a path outside the workspace."""
    if path == root:
        return "."
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    return path.as_posix()


def resolve_executable(program: str, cwd: Path, search_path: str | None) -> Path | None:
    """The file that running ``program`` in ``cwd`` executes: resolved from ``cwd`` when it
    contains a ``/`` (whether or not it exists), else the first executable regular file named
    ``program`` in ``search_path`` (``os.pathsep``-separated; an empty or relative entry is
    relative to ``cwd``, where the program runs; None means :data:`os.defpath`); symlinks
    followed. None when no such program is found.

    The shell tool runs exactly this path (argv[0] stays the program's name), so what the
    safety policy checked as ``_executable`` is what runs: there is no second PATH lookup.
    """
    if "/" in program:
        return resolve_path(cwd, program)
    if not program or "\x00" in program:
        return None
    for entry in (os.defpath if search_path is None else search_path).split(os.pathsep):
        candidate = os.path.join(cwd, entry, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return resolve_path(cwd, candidate)
    return None
