"""Lifecycle hooks: Python functions that see every stage and every tool call and may allow,
block, modify, or require a person's approval — enforced by the engine, not asked of the model.

Four hook points: ``pre_stage`` (before a model call; may modify the rendered messages),
``post_stage`` (after it; may modify or block the output), ``pre_tool`` (before a tool call; may
modify its args) and ``post_tool`` (after it; may modify or block the result). Hooks run in the
activity that does the work, in every safety mode; the spec's safety rules are the built-in
first ``pre_tool`` hook, and run again on args a ``pre_tool`` hook modified, so a hook can
narrow a call but never steer it past a rule. Register hooks in the worker's process::

    from armature_temporal import HookContext, HookResult, register_hook

    @register_hook("pre_tool")
    def no_prod_hosts(ctx: HookContext) -> HookResult | None:
        if "prod" in str(ctx.args.get("url", "")):
            return HookResult(action="block", reason="production hosts are off limits")
        return None  # None means allow

Order: registration order; the first ``block`` wins; ``modify`` results chain (each hook sees
the previous one's args or output); any ``require_approval`` makes the call wait for a person.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.errors import ArmatureError

__all__ = [
    "HookContext",
    "HookError",
    "HookOutcome",
    "HookPoint",
    "HookRegistry",
    "HookResult",
    "register_hook",
    "run_hooks",
]

HookPoint = Literal["pre_stage", "post_stage", "pre_tool", "post_tool"]
HOOK_POINTS: tuple[HookPoint, ...] = ("pre_stage", "post_stage", "pre_tool", "post_tool")


class HookError(ArmatureError):
    """A hook was registered wrongly or raised."""


class HookContext(BaseModel):
    """What a hook sees."""

    model_config = ConfigDict(frozen=True)

    point: HookPoint
    run_id: str
    spec_name: str
    stage_id: str
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    output: Any = None


class HookResult(BaseModel):
    """A hook's decision. ``modify`` carries the new ``args``, ``messages`` or ``output``."""

    model_config = ConfigDict(frozen=True)

    action: Literal["allow", "block", "modify", "require_approval"] = "allow"
    reason: str = ""
    args: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    output: Any = None


class HookOutcome(BaseModel):
    """The combined decision of every hook at one point."""

    action: Literal["allow", "block", "require_approval"] = "allow"
    reason: str = ""
    hook: str | None = None
    args: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    output: Any = None
    modified_by: list[str] = Field(default_factory=list)
    ran: list[str] = Field(default_factory=list)


Hook = Callable[[HookContext], "HookResult | Awaitable[HookResult | None] | None"]


class HookRegistry:
    """Hooks by point, in registration order."""

    _default: HookRegistry | None = None

    def __init__(self) -> None:
        self._hooks: dict[str, list[tuple[str, Hook]]] = {p: [] for p in HOOK_POINTS}

    @classmethod
    def default(cls) -> HookRegistry:
        """The process-wide registry that :func:`register_hook` adds to."""
        if cls._default is None:
            cls._default = HookRegistry()
        return cls._default

    def add(self, point: str, fn: Hook, name: str | None = None) -> None:
        if point not in self._hooks:
            raise HookError(f"unknown hook point {point!r}; use one of {list(HOOK_POINTS)}")
        label = name or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)}"
        self._hooks[point].append((label, fn))

    def hooks(self, point: str) -> list[tuple[str, Hook]]:
        return list(self._hooks.get(point, []))

    def clear(self) -> None:
        for hooks in self._hooks.values():
            hooks.clear()


def register_hook(
    point: HookPoint,
    fn: Hook | None = None,
    *,
    name: str | None = None,
    registry: HookRegistry | None = None,
) -> Any:
    """Register ``fn`` at ``point``; usable as ``@register_hook("pre_tool")``."""
    target = registry or HookRegistry.default()

    def decorate(func: Hook) -> Hook:
        target.add(point, func, name)
        return func

    return decorate(fn) if fn is not None else decorate


async def run_hooks(ctx: HookContext, registry: HookRegistry | None = None) -> HookOutcome:
    """Run every hook at ``ctx.point`` and combine their decisions.

    A hook that raises blocks the call (fail closed) with the exception named in the reason.
    """
    outcome = HookOutcome()
    current = ctx
    approval: tuple[str, str] | None = None
    for name, fn in (registry or HookRegistry.default()).hooks(ctx.point):
        outcome.ran.append(name)
        try:
            result = fn(current)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # a user's hook: any failure blocks the call, named
            return outcome.model_copy(
                update={
                    "action": "block",
                    "hook": name,
                    "reason": f"hook {name} raised {type(exc).__name__}: {exc}",
                }
            )
        if result is None or result.action == "allow":
            continue
        if result.action == "block":
            return outcome.model_copy(
                update={
                    "action": "block",
                    "hook": name,
                    "reason": result.reason or f"blocked by {name}",
                }
            )
        if result.action == "require_approval" and approval is None:
            approval = (name, result.reason or f"{name} asks for approval")
        if result.action == "modify":
            update: dict[str, Any] = {}
            if result.args is not None:
                update["args"] = result.args
            if result.messages is not None:
                update["messages"] = result.messages
            if result.output is not None:
                update["output"] = result.output
            current = current.model_copy(update=update)
            outcome.modified_by.append(name)
    if outcome.modified_by:
        outcome = outcome.model_copy(
            update={"args": current.args, "messages": current.messages, "output": current.output}
        )
    if approval is not None:
        outcome = outcome.model_copy(
            update={"action": "require_approval", "hook": approval[0], "reason": approval[1]}
        )
    return outcome
