"""One tool call: its arguments checked against the tool's schema and model, the tool run in
its context, its postcondition checked; every failure a :class:`ToolResult`, never raised."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from pydantic import ValidationError

from armature_temporal.tools._errors import ToolError, ToolFailure
from armature_temporal.tools._models import ToolContext, ToolResult
from armature_temporal.tools._registry import ToolRegistry

__all__ = ["call_tool"]


def schema_errors(schema: dict[str, Any], args: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``args`` under ``schema`` (its own ``$schema`` draft, else 2020-12),
    one line per error: ``path: message``."""
    validator = validator_for(schema, default=Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.path))
    return [f"{'.'.join(map(str, e.path)) or '(args)'}: {e.message}" for e in errors]


def _pydantic_errors(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(map(str, e['loc'])) or '(args)'}: {e['msg']}" for e in exc.errors()]


async def call_tool(
    name: str,
    args: Mapping[str, Any],
    ctx: ToolContext,
    *,
    registry: ToolRegistry | None = None,
) -> ToolResult:
    """Validate ``args`` against the tool's parameters, run it in ``ctx``, check its
    postcondition.

    Never raises for a failing tool: the result says ``ok=False`` with an ``error_type``
    (``unknown_tool``, ``invalid_args``, ``policy_blocked`` for sandbox refusals, ``timeout``,
    ``tool_error``, ``postcondition_failed``) and a message meant for the model and the trace.
    Safety rules are not checked here; check
    :func:`armature_temporal.runtime.policy.evaluate_policy` first, with
    :func:`resolved_fields`, and pass those fields as ``ctx.checked`` so the tool runs what was
    checked (shell runs the checked ``_executable``, never a program looked up again).
    """
    target = registry or ToolRegistry.default()
    impl = target.cached(name)
    if impl is None:
        try:  # importing a module:function tool's module is blocking I/O
            impl = await asyncio.to_thread(target.resolve, name)
        except ToolError as exc:
            return ToolResult.failure("unknown_tool", str(exc))
    if not isinstance(args, Mapping):
        return ToolResult.failure(
            "invalid_args", f"tool {name!r} takes an object of arguments, got {args!r}"
        )
    problems = schema_errors(impl.spec.parameters, args) if impl.check_schema else []
    if problems:
        return _invalid(name, problems)
    try:
        parsed = impl.args_model.model_validate(dict(args))
    except ValidationError as exc:
        return _invalid(name, _pydantic_errors(exc))
    try:
        output = await impl.run(parsed, ctx)
    except ToolFailure as failure:
        return ToolResult.failure(failure.error_type, failure.message, failure.output)
    except TimeoutError:
        return ToolResult.failure(
            "timeout", f"tool {name!r} did not finish within {ctx.timeout_s:g}s"
        )
    except Exception as exc:  # the tool's own failure: reported, not raised (see docstring)
        return ToolResult.failure("tool_error", f"tool {name!r} raised {type(exc).__name__}: {exc}")
    if impl.postcondition is not None:
        call_args = parsed.model_dump(mode="json", by_alias=True)
        try:
            held = bool(impl.postcondition(call_args, output))
        except Exception as exc:
            return ToolResult.failure(
                "postcondition_failed",
                f"tool {name!r}: postcondition raised {type(exc).__name__}: {exc}",
                output,
            )
        if not held:
            return ToolResult.failure(
                "postcondition_failed",
                f"tool {name!r}: postcondition {_describe(impl.postcondition)} does not hold "
                "for this output",
                output,
            )
    return ToolResult.success(output)


def _invalid(name: str, problems: list[str]) -> ToolResult:
    return ToolResult.failure(
        "invalid_args", f"invalid arguments for tool {name!r}: {'; '.join(problems)}"
    )


def _describe(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None)
    return repr(name) if name and name != "<lambda>" else "(a lambda)"


#: The 0.7.0 modules a tool module imports its names from, and what stands in for them here.
