"""The ``shell`` tool: run one program with arguments, never through a shell.

``argv`` goes to the OS as is (``["echo", "$HOME"]`` prints ``$HOME``): no globbing, no
variables, no pipes. The program runs in the workspace (or ``cwd`` inside it), with stdin
closed, a small environment (:data:`ENV_PASSTHROUGH`, so API keys in the worker's environment
do not leak into commands), in its own process group, which is killed on timeout.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from pydantic import Field

from armature_temporal.tools._base import ToolArgs, ToolImpl, builtin_spec, typed_run
from armature_temporal.tools._errors import ToolFailure
from armature_temporal.tools._files import resolve_in_workspace
from armature_temporal.tools._models import ToolContext

__all__ = ["ENV_PASSTHROUGH", "SHELL_TOOL"]

#: Environment variables a command inherits from the worker; everything else is dropped.
ENV_PASSTHROUGH: tuple[str, ...] = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SYSTEMROOT",
)
_CHUNK = 65_536


class ShellArgs(ToolArgs):
    argv: list[str] = Field(
        ...,
        min_length=1,
        description='Program and its arguments, e.g. ["ls", "-la"]; no shell syntax.',
    )
    timeout_s: float | None = Field(
        None, gt=0, description="Seconds before the command is killed (capped by the worker)."
    )
    cwd: str = Field(".", min_length=1, description="Working directory, relative to the workspace.")


class _Capped:
    """Collects a stream up to ``cap`` bytes and drains (drops) the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(_CHUNK):
            room = self.cap - len(self.data)
            if len(chunk) > room:
                self.truncated = True
            self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows
            proc.kill()
    except ProcessLookupError:
        pass


async def _run_shell(args: ShellArgs, ctx: ToolContext) -> dict[str, Any]:
    _, cwd = resolve_in_workspace(ctx, args.cwd)
    if not cwd.is_dir():
        raise ToolFailure("tool_error", f"cwd {args.cwd!r} is not a directory in the workspace")
    timeout = min(args.timeout_s or ctx.timeout_s, ctx.timeout_s)
    env = {k: v for k in ENV_PASSTHROUGH if (v := os.environ.get(k)) is not None}
    try:
        proc = await asyncio.create_subprocess_exec(
            *args.argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ToolFailure(
            "tool_error", f"command {args.argv[0]!r} not found on PATH {env.get('PATH', '')!r}"
        ) from None
    except OSError as exc:
        raise ToolFailure(
            "tool_error", f"cannot run {args.argv[0]!r}: {exc.strerror or exc}"
        ) from exc
    out, err = _Capped(ctx.output_cap_bytes), _Capped(ctx.output_cap_bytes)
    exit_code: int | None = None
    finished = False
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(out.drain(proc.stdout), err.drain(proc.stderr))
            exit_code = await proc.wait()
            finished = True
    except TimeoutError:
        pass
    finally:
        if not finished:  # timed out or cancelled: kill the group, background children too
            _kill(proc)
            await proc.wait()
    output = {
        "exit_code": exit_code,
        "stdout": out.text(),
        "stderr": err.text(),
        "truncated": out.truncated or err.truncated,
    }
    if not finished:
        raise ToolFailure(
            "timeout", f"command {args.argv[0]!r} killed after {timeout:g}s", output=output
        )
    return output


SHELL_TOOL = ToolImpl(
    spec=builtin_spec(
        "shell",
        "Run a program with arguments in the workspace (no shell: no pipes, globs or $VARS). "
        "Returns exit_code, stdout, stderr and truncated.",
        ShellArgs,
        "none",
    ),
    args_model=ShellArgs,
    run=typed_run(ShellArgs, _run_shell),
)
