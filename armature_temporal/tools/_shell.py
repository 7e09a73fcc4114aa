"""The ``shell`` tool: run one program with arguments, never through a shell.

The command is ``argv`` (a list) or ``cmd`` (a string, as armature-agents 0.7.0 specs write
it), never both. ``cmd`` is split the way a POSIX shell splits words (:func:`shlex.split`:
quotes and backslashes group and escape) and then run exactly like the ``argv`` it splits into;
an unquoted shell operator in it (``|``, ``;``, ``&&``, ``>``, ``$(`` ...) is refused, because
nothing would interpret it. Either way the argv goes to the OS as is (``["echo", "$HOME"]``
prints ``$HOME``): no globbing, no variables, no pipes. The program runs in the workspace (or
``cwd`` inside it), with stdin closed, a small environment (:func:`minimal_env`: ``HOME`` is the
workspace, API keys in the worker's environment never reach commands, plus the spec's
``sandbox.env``), through :func:`armature_temporal.tools.sandbox.run_process`: in a sandbox it
cannot undo (no capabilities, its own ``/proc``, locked hiding mounts, no network unless
``ctx.network``), killed whole (background children too) when it exits, times out or is
cancelled. A program that fails the way programs without a network fail gets a ``hint`` in its
output saying what the sandbox allows and which grant to add.

Safety rules see both forms whichever the model used (:func:`shell_policy_view`): ``argv``,
the list that will run, and ``cmd``, ``shlex.join(argv)``; and ``_executable``, the resolved
program, which is the file that then runs (``ctx.checked``; see
:func:`armature_temporal.tools._base.resolve_executable`).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from armature_temporal.runtime.policy import EXECUTABLE_FIELD
from armature_temporal.tools._base import (
    ToolArgs,
    ToolImpl,
    builtin_spec,
    resolve_executable,
    typed_run,
)
from armature_temporal.tools._errors import ToolFailure
from armature_temporal.tools._files import resolve_in_workspace
from armature_temporal.tools._models import ToolContext
from armature_temporal.tools.sandbox import (
    ENV_PASSTHROUGH,
    minimal_env,
    network_hint,
    run_process,
    sandbox,
)

__all__ = ["ENV_PASSTHROUGH", "SHELL_TOOL", "ShellArgs", "shell_policy_view", "split_command"]

#: Characters a shell reads as operators when unquoted (pipes, lists, redirects, subshells).
_OPERATOR_CHARS = frozenset("();<>|&")


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def split_command(cmd: str) -> list[str]:
    """``cmd`` split into the argv the shell tool runs, as a POSIX shell splits words.

    Raises:
        ValueError: the quotes do not close, the string is empty, or it uses a shell operator
            (``|``, ``;``, ``&&``, ``>``, ``(`` ...) outside quotes.
    """
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise ValueError(f"cmd {cmd!r} cannot be split into words: {exc}") from None
    if not argv:
        raise ValueError("cmd is empty; name a program to run")
    # Non-POSIX mode keeps quotes on the tokens, so a quoted '|' is a word, not an operator.
    lexer = shlex.shlex(cmd, posix=False, punctuation_chars="".join(sorted(_OPERATOR_CHARS)))
    lexer.whitespace_split = True
    operators = [t for t in lexer if t and set(t) <= _OPERATOR_CHARS]
    if operators:
        raise ValueError(
            f"cmd {cmd!r} uses shell syntax {operators[0]!r}, but the shell tool runs one "
            "program without a shell, so nothing would interpret it; make one call per "
            "program (quote the character if it is meant literally), or, to run a shell on "
            'purpose, argv ["sh", "-c", "..."] (which your safety rules see as such)'
        )
    return argv


class ShellArgs(ToolArgs):
    argv: Annotated[list[str], Field(min_length=1)] | SkipJsonSchema[None] = Field(
        None,
        description='Program and its arguments, e.g. ["ls", "-la"]; no shell syntax. '
        "Give argv or cmd, not both.",
        json_schema_extra=_no_default,
    )
    cmd: Annotated[str, Field(min_length=1)] | SkipJsonSchema[None] = Field(
        None,
        description="The command as one string, e.g. \"ls -la 'my dir'\": split into words "
        "like a shell would, then run without a shell (no pipes, globs or $VARS). "
        "Give argv or cmd, not both.",
        json_schema_extra=_no_default,
    )
    timeout_s: float | None = Field(
        None, gt=0, description="Seconds before the command is killed (capped by the worker)."
    )
    cwd: str = Field(".", min_length=1, description="Working directory, relative to the workspace.")

    @model_validator(mode="after")
    def _one_command(self) -> ShellArgs:
        if self.argv is not None and self.cmd is not None:
            raise ValueError(
                "give the command as argv (a list) or as cmd (a string), not both: they "
                "could disagree about what runs"
            )
        if self.argv is None and self.cmd is None:
            raise ValueError('give the command to run: argv ["ls", "-la"] or cmd "ls -la"')
        if self.cmd is not None:
            split_command(self.cmd)
        return self

    @property
    def command(self) -> list[str]:
        """The argv that runs, whichever form was given."""
        return self.argv if self.argv is not None else split_command(self.cmd or "")


def shell_policy_view(args: BaseModel) -> dict[str, Any]:
    """The fields safety rules see for a shell call: the validated args with both ``argv``
    (the list that will run) and ``cmd`` (``shlex.join`` of it), whichever form was given."""
    if not isinstance(args, ShellArgs):
        raise TypeError(f"expected ShellArgs, got {type(args).__name__}")
    argv = args.command
    view = args.model_dump(mode="json", exclude={"argv", "cmd"})
    return {**view, "argv": argv, "cmd": shlex.join(argv)}


async def _run_shell(args: ShellArgs, ctx: ToolContext) -> dict[str, Any]:
    _, cwd = resolve_in_workspace(ctx, args.cwd)
    if not cwd.is_dir():
        raise ToolFailure("tool_error", f"cwd {args.cwd!r} is not a directory in the workspace")
    timeout = min(args.timeout_s or ctx.timeout_s, ctx.timeout_s)
    env = minimal_env(ctx.workspace, ctx.env)
    argv = args.command
    # Run exactly the program the safety policy checked (_executable); no second PATH lookup.
    checked = ctx.checked
    program = (
        checked.get(EXECUTABLE_FIELD)
        if checked is not None
        else resolve_executable(argv[0], cwd, env.get("PATH"))
    )
    if program is None:
        raise ToolFailure(
            "tool_error", f"command {argv[0]!r} not found on PATH {env.get('PATH', '')!r}"
        )
    try:
        done = await run_process(
            argv,
            executable=program,
            cwd=cwd,
            env=env,
            timeout_s=timeout,
            cap=ctx.output_cap_bytes,
            visible=(ctx.workspace,),
            network=ctx.network,
        )
    except FileNotFoundError:
        raise ToolFailure(
            "tool_error", f"command {argv[0]!r} not found on PATH {env.get('PATH', '')!r}"
        ) from None
    except OSError as exc:
        raise ToolFailure("tool_error", f"cannot run {argv[0]!r}: {exc.strerror or exc}") from exc
    output = {
        "exit_code": done.exit_code,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "truncated": done.truncated,
    }
    if done.exit_code != 0 and (
        hint := network_hint(done.stderr, done.stdout, granted=ctx.network, box=sandbox())
    ):
        output["hint"] = hint
    if done.timed_out:
        raise ToolFailure(
            "timeout", f"command {argv[0]!r} killed after {timeout:g}s", output=output
        )
    return output


SHELL_TOOL = ToolImpl(
    spec=builtin_spec(
        "shell",
        "Run a program with arguments in the workspace, given as argv (a list) or cmd (a "
        "string); no shell: no pipes, globs or $VARS. Returns exit_code, stdout, stderr and "
        "truncated.",
        ShellArgs,
        "none",
    ),
    args_model=ShellArgs,
    run=typed_run(ShellArgs, _run_shell),
    policy_view=shell_policy_view,
)
