"""Tools that armature-agents 0.7.0 tool modules register: ``ToolDescriptor`` and its handler.

A 0.7.0 tool module defines ``register(registry)`` and calls
``registry.register(ToolDescriptor(name=..., description=..., permission=..., handler=...,
parameters={...}))``. :func:`descriptor_tool` turns such a descriptor — this module's, or the
0.7.0 package's own when it is installed, read by attribute — into a :class:`ToolImpl` with the
meaning 0.7.0 gave it:

- ``handler(args: dict)`` (async, or sync: run in a thread) receives the arguments as given,
  unchecked, as 0.7.0 passed them; ``parameters`` (``{"name": {"type": ..., "optional": true}}``,
  or a whole object schema) is what the model is shown, every parameter not marked
  ``optional`` listed as required;
- ``reversibility`` (default ``full``, as in 0.7.0) is what ``_tool_reversibility`` sees;
- ``permission`` ``destructive`` makes every call wait for a person's approval (0.7.0 refused
  such calls unless something approved them); verification runs call only ``read_only`` tools;
- ``postcondition(args, output) -> bool`` is checked after each successful call.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, cast, get_args

from jsonschema import Draft202012Validator, SchemaError
from pydantic import BaseModel, ConfigDict, RootModel

from armature_temporal.tools._base import Postcondition, ToolImpl
from armature_temporal.tools._errors import ToolError
from armature_temporal.tools._models import Permission, Reversibility, ToolContext, ToolSpec
from armature_temporal.tools._python import capped_output

__all__ = [
    "PermissionLevel",
    "ReversibilityLevel",
    "ToolDescriptor",
    "descriptor_tool",
    "is_descriptor",
]


class PermissionLevel(StrEnum):
    """What a 0.7.0 tool may touch. ``DESTRUCTIVE`` calls wait for a person's approval."""

    READ_ONLY = "read_only"
    WORKSPACE = "workspace"
    NETWORK = "network"
    DESTRUCTIVE = "destructive"


class ReversibilityLevel(StrEnum):
    """0.7.0's reversibility enum; plain strings ``full``, ``partial``, ``none`` work too."""

    FULL = "full"
    PARTIAL = "partial"
    NONE = "none"


class ToolDescriptor(BaseModel):
    """A tool as a 0.7.0 tool module registers it (the same fields and defaults)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    description: str
    permission: PermissionLevel
    handler: Callable[..., Any]
    parameters: dict[str, Any] = {}
    reversibility: ReversibilityLevel = ReversibilityLevel.FULL
    postcondition: Callable[[dict[str, Any], Any], bool] | None = None


class _AnyArgs(RootModel[dict[str, Any]]):
    """A 0.7.0 handler's args: any object, passed on as given."""


def is_descriptor(value: object) -> bool:
    """Whether ``value`` looks like a 0.7.0 ToolDescriptor (ours, or the 0.7.0 package's)."""
    return isinstance(getattr(value, "name", None), str) and callable(
        getattr(value, "handler", None)
    )


def _level(value: Any, allowed: tuple[str, ...], what: str, name: str) -> str:
    raw = getattr(value, "value", value)  # an Enum member, or a plain string
    if not isinstance(raw, str) or raw.lower() not in allowed:
        raise ToolError(f"tool {name!r}: {what} {value!r} is not one of {list(allowed)}")
    return raw.lower()


def _schema(name: str, parameters: Any) -> dict[str, Any]:
    """The object schema the model sees, from 0.7.0's ``{param: {...}}`` mapping."""
    if not isinstance(parameters, Mapping):
        raise ToolError(
            f"tool {name!r}: parameters must be a mapping of parameter name to JSON Schema, "
            f"got {parameters!r}"
        )
    if parameters.get("type") == "object" and isinstance(parameters.get("properties"), Mapping):
        schema = dict(parameters)  # already a whole object schema
    else:
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param, sub in parameters.items():
            if not isinstance(sub, Mapping):
                raise ToolError(
                    f"tool {name!r}: parameter {param!r} must be a JSON Schema mapping such as "
                    f'{{"type": "string"}}, got {sub!r}'
                )
            properties[str(param)] = {k: v for k, v in sub.items() if k != "optional"}
            if not sub.get("optional"):
                required.append(str(param))
        schema = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ToolError(
            f"tool {name!r}: parameters are not a valid JSON Schema: {exc.message}"
        ) from exc
    return schema


def descriptor_tool(descriptor: Any) -> ToolImpl:
    """A ToolImpl for a 0.7.0 ToolDescriptor (see the module docstring for its meaning).

    Raises:
        ToolError: a field is missing or not what 0.7.0 accepted.
    """
    name = getattr(descriptor, "name", None)
    handler = getattr(descriptor, "handler", None)
    if not isinstance(name, str) or not name:
        raise ToolError(f"a tool descriptor needs a name, got {descriptor!r}")
    if not callable(handler):
        raise ToolError(
            f"tool {name!r}: handler must be a function of (args: dict), got {handler!r}"
        )
    permission = cast(
        Permission,
        _level(
            getattr(descriptor, "permission", "workspace"),
            get_args(Permission),
            "permission",
            name,
        ),
    )
    reversibility = cast(
        Reversibility,
        _level(
            getattr(descriptor, "reversibility", None) or "full",
            get_args(Reversibility),
            "reversibility",
            name,
        ),
    )
    postcondition = getattr(descriptor, "postcondition", None)
    if postcondition is not None and not callable(postcondition):
        raise ToolError(f"tool {name!r}: postcondition must be a function, got {postcondition!r}")
    is_async = inspect.iscoroutinefunction(handler)

    async def run(args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        call_args = cast(_AnyArgs, args).root
        async with asyncio.timeout(ctx.timeout_s):
            if is_async:
                result = await handler(call_args)
            else:
                result = await asyncio.to_thread(functools.partial(handler, call_args))
                if inspect.isawaitable(result):
                    result = await result
        return capped_output(result, ctx)

    spec = ToolSpec(
        name=name,
        description=str(getattr(descriptor, "description", "") or ""),
        parameters=_schema(name, getattr(descriptor, "parameters", None) or {}),
        reversibility=reversibility,
        permission=permission,
    )
    return ToolImpl(
        spec=spec,
        args_model=_AnyArgs,
        run=run,
        postcondition=cast(Postcondition | None, postcondition),
        check_schema=False,
    )
