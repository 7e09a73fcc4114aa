"""The ``run_adapter`` activity: a spec's adapter (``adapters:`` + a stage's ``adapter:``) — a
script or a Python function — rendered, passed through the safety policy, and run.

- ``script``: each argv part is a Jinja template (the sandboxed environment of
  :mod:`armature_temporal.spec.templating`), rendered with the stage's variables, so a value is
  always one argument: ``"; rm -rf /"`` in an input reaches the program as that one string.
  The program is executed directly, never through a shell — unless the adapter says
  ``shell: true``; then its one command string runs under ``/bin/sh -c``, and every
  ``{{ value }}`` in it is shell-quoted, so data still cannot become shell syntax. It runs like
  the built-in ``shell`` tool, through :func:`armature_temporal.tools.sandbox.run_process`: in
  the spec's workspace, stdin closed, the small environment of
  :data:`~armature_temporal.tools.sandbox.ENV_PASSTHROUGH` (no provider keys), in a
  PID-namespace sandbox where the kernel allows one and its own process group (killed whole
  when it exits, times out or is cancelled), output capped; plus ``ARMATURE_CONTEXT``, the
  stage's variables as JSON, as armature-agents 0.7.0 gave scripts their context (when that is
  over :data:`CONTEXT_ENV_MAX` bytes, ``ARMATURE_CONTEXT_FILE`` names a file holding it). The
  output is ``{stdout, stderr, exit_code, truncated}``; with ``parse: json`` the JSON object
  the script printed, and exiting non-zero or printing anything else fails the call.
- ``python``: ``fn`` (``module:function`` or ``module.function``) is imported in the worker
  and called with the rendered ``args`` as keyword arguments (a string that is one
  ``{{ expression }}`` keeps its type); a coroutine is awaited. Its JSON-safe return value is
  the output. It runs in the worker's process, with the worker's rights: it is your code.

Before anything runs, the call passes the run's safety policy as a tool call named after the
adapter, with what will run as its args — ``{cmd, argv}`` (``cmd`` = ``shlex.join(argv)``, or
the shell string) or ``{fn, **args}`` — and then the ``pre_tool`` hooks, exactly as tool calls
do. An adapter's effects are unknown to Armature, so its reversibility is ``none``: a
verification run of the improvement loop never runs one.

A failure the adapter caused is a result (``ok`` False, with ``error_type`` ``tool_error``,
``timeout`` or ``policy_blocked`` and a message naming the adapter), not an exception, so
Temporal retries only what the infrastructure broke.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import shlex
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, cast

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic_core import PydanticSerializationError, to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.tools import render_args, strictest
from armature_temporal.runtime.hooks import HookContext, run_hooks
from armature_temporal.runtime.models import AdapterCallInput, AdapterCallResult, PolicySet
from armature_temporal.runtime.payloads import MAX_STAGE_OUTPUT
from armature_temporal.runtime.policy import PolicyDecision, evaluate_policy
from armature_temporal.runtime.prompts import ALWAYS_SENT
from armature_temporal.settings import tool_output_cap, workspace_root
from armature_temporal.spec.compiler import PlanAdapter
from armature_temporal.spec.models import SafetyRule
from armature_temporal.spec.templating import environment, render
from armature_temporal.tools.sandbox import minimal_env, network_hint, run_process, sandbox

__all__ = ["CONTEXT_ENV_MAX", "run_adapter", "script_argv"]

#: ``ARMATURE_CONTEXT`` larger than this goes to a file (``ARMATURE_CONTEXT_FILE``) instead:
#: Linux refuses to start a program with an environment string over 128 KiB.
CONTEXT_ENV_MAX = 100_000
SHELL = "/bin/sh"


class _Refused(Exception):
    """The adapter cannot run or failed: becomes a failed result."""

    def __init__(self, error_type: str, message: str, output: Any = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.output = output


# --- what will run ------------------------------------------------------------------------


def _shell_quoted(value: Any) -> str:
    return shlex.quote(value if isinstance(value, str) else str(value))


@lru_cache(maxsize=1)
def _shell_environment() -> ImmutableSandboxedEnvironment:
    """The templating environment with every ``{{ value }}`` shell-quoted (``shell: true``)."""
    env = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, autoescape=False, finalize=_shell_quoted
    )
    env.filters.update(environment().filters)
    return env


def script_argv(adapter: PlanAdapter, variables: dict[str, Any]) -> tuple[list[str], str]:
    """The argv a script adapter runs, and its ``cmd`` as the safety policy sees it.

    Raises:
        jinja2.TemplateError: a part does not render (an undefined name, a syntax error).
    """
    if adapter.shell:
        source = " ".join(adapter.argv)
        cmd = _shell_environment().from_string(source).render(variables)
        return [SHELL, "-c", cmd], cmd
    argv = [render(part, variables) if "{" in part else part for part in adapter.argv]
    return argv, shlex.join(argv)


def _context(variables: dict[str, Any]) -> str:
    """The stage's variables as ``ARMATURE_CONTEXT`` (the retry bookkeeping left out)."""
    context = {k: v for k, v in variables.items() if k not in ALWAYS_SENT}
    return json.dumps(context, ensure_ascii=False, default=str)


# --- running it -----------------------------------------------------------------------------


async def _run_script(
    name: str,
    argv: list[str],
    context: str,
    workspace: Path,
    adapter: PlanAdapter,
    *,
    network: bool = False,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``argv`` as the ``shell`` tool runs a command, with ``ARMATURE_CONTEXT``."""
    env = minimal_env(workspace, extra_env)
    readable: list[Path] = []
    with ExitStack() as stack:
        if len(context.encode()) <= CONTEXT_ENV_MAX:
            env["ARMATURE_CONTEXT"] = context
        else:
            handle = stack.enter_context(
                tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8")
            )
            handle.write(context)
            handle.flush()
            env["ARMATURE_CONTEXT_FILE"] = handle.name
            readable.append(Path(handle.name))  # in the worker's /tmp: bound in, read-only
        try:
            done = await run_process(
                argv,
                cwd=workspace,
                env=env,
                timeout_s=adapter.timeout_s,
                cap=tool_output_cap(),
                readable=readable,
                network=network,
            )
        except OSError as exc:
            raise _Refused(
                "tool_error",
                f"adapter {name!r}: cannot run {argv[0]!r}: {exc.strerror or exc} "
                f"(PATH {env.get('PATH', '')!r}, working directory {str(workspace)!r})",
            ) from exc
    output = {
        "stdout": done.stdout,
        "stderr": done.stderr,
        "exit_code": done.exit_code,
        "truncated": done.truncated,
    }
    if done.exit_code != 0 and (
        hint := network_hint(done.stderr, done.stdout, granted=network, box=sandbox())
    ):
        output["hint"] = hint
    if done.timed_out:
        raise _Refused(
            "timeout", f"adapter {name!r}: killed after {adapter.timeout_s:g}s (timeout)", output
        )
    return _parsed(name, output) if adapter.parse == "json" else output


def _parsed(name: str, output: dict[str, Any]) -> dict[str, Any]:
    """``parse: json``: the object the script printed on stdout, or why there is none."""
    if output["exit_code"] != 0:
        raise _Refused(
            "tool_error",
            f"adapter {name!r} exited {output['exit_code']} (parse: json): "
            f"{output['stderr'].strip()[:500]}"
            + (f" (hint: {output['hint']})" if "hint" in output else ""),
            output,
        )
    try:
        parsed = json.loads(output["stdout"])
    except json.JSONDecodeError as exc:
        cut = " (stdout was truncated at the output cap)" if output["truncated"] else ""
        raise _Refused(
            "tool_error",
            f"adapter {name!r} has parse: json but its stdout is not JSON{cut}: {exc}",
            output,
        ) from None
    if not isinstance(parsed, dict):
        raise _Refused(
            "tool_error",
            f"adapter {name!r} has parse: json and must print one JSON object, got "
            f"{type(parsed).__name__}",
            output,
        )
    return parsed


def _import(name: str, target: str) -> Callable[..., Any]:
    """``module:function`` or ``module.function`` (blocking: imports)."""
    module, _, attr = target.partition(":") if ":" in target else target.rpartition(".")
    try:
        found: Any = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise _Refused(
            "tool_error",
            f"adapter {name!r}: cannot import fn {target!r}: {type(exc).__name__}: {exc}; "
            "it must be importable by the worker (module:function)",
        ) from None
    if not callable(found):
        raise _Refused("tool_error", f"adapter {name!r}: fn {target!r} is not callable")
    return cast(Callable[..., Any], found)


async def _call_python(name: str, adapter: PlanAdapter, kwargs: dict[str, Any]) -> Any:
    assert adapter.fn is not None
    fn = await asyncio.to_thread(_import, name, adapter.fn)
    try:
        async with asyncio.timeout(adapter.timeout_s):
            if inspect.iscoroutinefunction(fn):
                value = await fn(**kwargs)
            else:
                value = await asyncio.to_thread(partial(fn, **kwargs))
                if inspect.isawaitable(value):
                    value = await value
    except TimeoutError:
        raise _Refused(
            "timeout",
            f"adapter {name!r}: {adapter.fn} did not return within {adapter.timeout_s:g}s "
            "(a sync function is abandoned, not stopped)",
        ) from None
    except Exception as exc:  # the user's function failed: the stage fails, saying how
        raise _Refused(
            "tool_error", f"adapter {name!r}: {adapter.fn} raised {type(exc).__name__}: {exc}"
        ) from exc
    try:
        data = to_jsonable_python(value)
        json.dumps(data, allow_nan=False)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise _Refused(
            "tool_error",
            f"adapter {name!r}: {adapter.fn} returned {type(value).__name__}, which is not "
            f"JSON-safe: {exc}",
        ) from None
    return data


# --- the activity ---------------------------------------------------------------------------


@activity.defn(name="run_adapter")
async def run_adapter(inp: AdapterCallInput) -> AdapterCallResult:
    """Run one adapter call under the spec's safety policy."""
    adapter, name = inp.adapter, inp.adapter.name
    argv: list[str] = []
    kwargs: dict[str, Any] = {}
    try:
        if adapter.type == "script":
            argv, cmd = script_argv(adapter, inp.variables)
            seen: dict[str, Any] = {"cmd": cmd, "argv": argv}
        else:
            kwargs = render_args(adapter.args, inp.variables)
            seen = {"fn": adapter.fn, **kwargs}
    except TemplateError as exc:
        raise ApplicationError(
            f"stage {inp.stage_id!r}: adapter {name!r}: its "
            f"{'cmd' if adapter.type == 'script' else 'args'} failed to render: {exc}",
            type="template_error",
            non_retryable=True,
        ) from exc

    def decide(seen: dict[str, Any]) -> PolicyDecision:
        return strictest(
            evaluate_policy(
                rules=[SafetyRule.model_validate(r) for r in level.safety_rules],
                mode=level.safety_mode,
                tool=name,
                args=seen,
                reversibility="none",
            )
            for level in [
                *inp.outer_policies,
                PolicySet(safety_mode=inp.safety_mode, safety_rules=inp.safety_rules),
            ]
        )

    decision = decide(seen)
    result = AdapterCallResult(
        ok=False,
        seen=seen,
        policy_action=decision.action,
        policy_rule=decision.rule_index,
        policy_message=decision.message,
    )

    def refused(error_type: str, error: str, **update: Any) -> AdapterCallResult:
        return result.model_copy(update={"error_type": error_type, "error": error, **update})

    if decision.action == "block":
        return refused(
            "policy_blocked", f"adapter {name!r} blocked by the safety policy: {decision.message}"
        )
    if inp.verification:
        return refused(
            "policy_blocked",
            f"adapter {name!r} not run in a verification run: Armature cannot know what an "
            "adapter changes (reversibility none), and verification runs only make calls that "
            "are fully reversible",
            policy_action="block",
            policy_message="verification run",
        )
    hook_ctx = HookContext(
        point="pre_tool",
        run_id=inp.run_id,
        spec_name=inp.spec_name,
        stage_id=inp.stage_id,
        tool=name,
        args=seen,
    )
    pre = await run_hooks(hook_ctx)
    if pre.action == "block":
        return refused(
            "policy_blocked", f"adapter {name!r} blocked by hook {pre.hook}: {pre.reason}"
        )
    if pre.args is not None:  # a hook modified the call: the policy decides again
        seen = pre.args
        if adapter.type == "script":
            argv = [str(a) for a in seen.get("argv", argv)]
            # The rules see what runs: argv, and cmd as it stands for that argv.
            shown = argv[2] if adapter.shell and argv[:2] == [SHELL, "-c"] else shlex.join(argv)
            seen = {**seen, "argv": argv, "cmd": shown}
        else:
            kwargs = {k: v for k, v in seen.items() if k != "fn"}
        decision = decide(seen)
        if decision.action == "block":
            return refused(
                "policy_blocked",
                f"adapter {name!r}: after hook {', '.join(pre.modified_by)} modified the call: "
                f"blocked by the safety policy: {decision.message}",
                policy_action=decision.action,
                policy_rule=decision.rule_index,
                policy_message=decision.message,
                seen=seen,
            )
    if (decision.action == "require_approval" or pre.action == "require_approval") and not (
        inp.approved
    ):
        reason = decision.message if decision.action == "require_approval" else pre.reason
        return refused(
            "policy_blocked",
            "waiting for approval",
            policy_action="require_approval",
            policy_message=reason,
        )
    if decision.action in ("warn", "log"):
        activity.logger.warning(
            "stage %s adapter %s: policy %s: %s",
            inp.stage_id,
            name,
            decision.action,
            decision.message,
        )
    try:
        async with heartbeating():
            if adapter.type == "script":
                workspace = workspace_root(inp.spec_name or "default")
                workspace.mkdir(parents=True, exist_ok=True)
                output = await _run_script(
                    name,
                    argv,
                    _context(inp.variables),
                    workspace,
                    adapter,
                    network=inp.network,
                    extra_env=inp.sandbox_env,
                )
            else:
                output = await _call_python(name, adapter, kwargs)
    except _Refused as exc:
        return refused(exc.error_type, str(exc), output=exc.output, seen=seen)
    post = await run_hooks(
        hook_ctx.model_copy(update={"point": "post_tool", "args": seen, "output": output})
    )
    if post.action == "block":
        return refused(
            "policy_blocked", f"adapter {name!r}: result blocked by hook {post.hook}: {post.reason}"
        )
    if post.output is not None:
        output = post.output
    size = len(json.dumps(output, default=str))
    if size > MAX_STAGE_OUTPUT:
        raise ApplicationError(
            f"stage {inp.stage_id!r}: adapter {name!r} returned {size:,} bytes, more than the "
            f"{MAX_STAGE_OUTPUT:,} Armature carries; make it return less (or a file path)",
            type="payload_too_large",
            non_retryable=True,
        )
    return result.model_copy(update={"ok": True, "output": output, "seen": seen})
