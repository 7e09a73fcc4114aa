"""What every tool implementation is made of, built-in or Python function."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from armature_temporal.tools._models import Reversibility, ToolContext, ToolSpec

__all__ = [
    "PolicyView",
    "Postcondition",
    "RunFn",
    "ToolArgs",
    "ToolImpl",
    "builtin_spec",
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


class ToolArgs(BaseModel):
    """Base of the built-in tools' argument models: unknown arguments are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class ToolImpl:
    """A resolved tool: its spec, how to validate its args, and how to run it.

    ``run`` returns the JSON-safe output or raises ``ToolFailure``; it enforces its own time
    limit from the context. ``policy_view`` turns validated args into what safety rules see
    (default: the args as given), so a rule matches what will run, e.g. shell's ``cmd`` and
    ``argv`` both. ``check_schema`` False skips the JSON Schema check before the call (tools
    of 0.7.0 tool modules, whose handlers took their args unchecked).
    """

    spec: ToolSpec
    args_model: type[BaseModel]
    run: RunFn
    postcondition: Postcondition | None = None
    reversibility_of: Callable[[Mapping[str, Any]], Reversibility] | None = None
    policy_view: PolicyView | None = None
    check_schema: bool = True

    def renamed(self, name: str) -> ToolImpl:
        """The same tool under another name (a registered tool reached as module:function)."""
        spec = self.spec.model_copy(update={"name": name})
        return dataclasses.replace(self, spec=spec)

    def reversibility(self, args: Mapping[str, Any]) -> Reversibility:
        """How far this particular call can be undone."""
        if self.reversibility_of is not None:
            return self.reversibility_of(args)
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
