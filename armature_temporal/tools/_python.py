"""Python functions as tools: the arguments' JSON Schema from the signature, validated calls.

A function's parameters become an object schema (pydantic, from the type hints; defaults make
a parameter optional; ``Annotated[int, Field(ge=0)]`` constraints are kept). Parameter
descriptions come from a Google-style ``Args:`` section of the docstring, the tool description
from the docstring's first paragraph. A parameter annotated ``ToolContext`` is not an argument:
the call's context is passed to it. ``*args`` and ``**kwargs`` are not supported.

The return value becomes the output: a mapping with string keys as is, anything else as
``{"result": value}``, made JSON-safe by pydantic. Sync functions run in a worker thread;
a sync function that overruns the timeout is abandoned, not stopped (Python cannot stop a
thread), so long-running sync tools should watch their own time.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PydanticSchemaGenerationError, create_model
from pydantic_core import PydanticSerializationError, PydanticUndefined, to_jsonable_python

from armature_temporal.tools._base import Postcondition, ToolImpl
from armature_temporal.tools._errors import ToolError, ToolFailure
from armature_temporal.tools._models import Reversibility, ToolContext, ToolSpec

__all__ = ["capped_output", "function_tool", "to_output"]

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class _Param:
    field: str  # the field's name in the args model (aliased to the parameter's name)
    name: str
    positional_only: bool


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (first paragraph before any section) and the ``Args:`` descriptions."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    entry_indent: int | None = None  # indent of the entries of the current Args section
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if match := _SECTION.match(stripped):
            section, entry_indent, current = match.group(1), None, None
            continue
        if section is None:
            summary.append(stripped)
            continue
        if section not in ("Args", "Arguments", "Parameters") or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        arg = _ARG_LINE.match(stripped)
        if arg and indent == entry_indent:
            current = arg.group(1).lstrip("*")
            args[current] = arg.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    paragraph = "\n".join(summary).strip().split("\n\n")[0]
    return " ".join(paragraph.split()), args


def _args_model(
    fn: Callable[..., Any], name: str, docs: dict[str, str]
) -> tuple[type[BaseModel], list[_Param], str | None]:
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ToolError(f"tool {name!r}: cannot read the signature of {fn!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    params: list[_Param] = []
    ctx_param: str | None = None
    for i, param in enumerate(signature.parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(
                f"tool {name!r}: parameter {param.name!r} is *args or **kwargs, which a tool "
                "cannot take; list the parameters the model may pass"
            )
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            ctx_param = param.name
            continue
        default = PydanticUndefined if param.default is param.empty else param.default
        fields[f"p{i}"] = (
            annotation,
            Field(default, alias=param.name, description=docs.get(param.name)),
        )
        params.append(_Param(f"p{i}", param.name, param.kind is param.POSITIONAL_ONLY))
    try:
        model = create_model(
            f"{getattr(fn, '__name__', 'tool')}_args",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        model.model_json_schema()
    except (PydanticSchemaGenerationError, TypeError, ValueError) as exc:
        raise ToolError(
            f"tool {name!r}: cannot build a JSON Schema for the parameters of {fn!r}: {exc}; "
            "annotate them with JSON-friendly types (str, int, list[str], pydantic models, ...)"
        ) from exc
    return typing.cast(type[BaseModel], model), params, ctx_param


def to_output(value: Any) -> dict[str, Any]:
    """A function's return value as a JSON-safe output dict."""
    try:
        data = to_jsonable_python(value)
        json.dumps(data, allow_nan=False)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise ToolFailure(
            "tool_error", f"the tool returned {type(value).__name__}, which is not JSON-safe: {exc}"
        ) from exc
    if isinstance(data, dict) and all(isinstance(k, str) for k in data):
        return data
    return {"result": data}


def capped_output(value: Any, ctx: ToolContext) -> dict[str, Any]:
    """A function's return value as its output; over the context's cap it is a tool error."""
    output = to_output(value)
    size = len(json.dumps(output).encode())
    if size > ctx.output_cap_bytes:
        raise ToolFailure(
            "tool_error",
            f"output is {size} bytes of JSON, over the {ctx.output_cap_bytes}-byte cap; "
            "return less, or write it to a file and return the path",
        )
    return output


def function_tool(
    fn: Callable[..., Any],
    *,
    name: str,
    description: str | None = None,
    reversibility: Reversibility = "full",
    postcondition: Postcondition | None = None,
) -> ToolImpl:
    """A ToolImpl that validates arguments against ``fn``'s signature and calls it."""
    summary, docs = parse_docstring(inspect.getdoc(fn) or "")
    model, params, ctx_param = _args_model(fn, name, docs)
    schema = model.model_json_schema()
    schema.pop("title", None)
    is_async = inspect.iscoroutinefunction(fn)

    async def run(args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        positional = [getattr(args, p.field) for p in params if p.positional_only]
        keywords = {p.name: getattr(args, p.field) for p in params if not p.positional_only}
        if ctx_param is not None:
            keywords[ctx_param] = ctx
        async with asyncio.timeout(ctx.timeout_s):
            if is_async:
                result = await fn(*positional, **keywords)
            else:
                result = await asyncio.to_thread(functools.partial(fn, *positional, **keywords))
                if inspect.isawaitable(result):
                    result = await result
        return capped_output(result, ctx)

    spec = ToolSpec(
        name=name,
        description=description if description is not None else summary,
        parameters=schema,
        reversibility=reversibility,
    )
    return ToolImpl(spec=spec, args_model=model, run=run, postcondition=postcondition)
