"""A 0.7.0 tool module, as the 0.7.0 user guide writes one; only the imports name
armature_temporal.tools.compat instead of armature.registry.registry and
armature.permissions.permissions."""

from __future__ import annotations

from typing import Any

from armature_temporal.tools.compat import (
    PermissionLevel,
    Reversibility,
    ToolDescriptor,
    ToolRegistry,
)

#: How many times register() ran in this process (the loader calls it once per registry).
REGISTER_CALLS: list[int] = []


async def _search(args: dict[str, Any]) -> dict[str, Any]:
    query = args["query"]
    return {"results": [f"{query} #{i}" for i in range(int(args.get("limit", 2)))]}


def _send(args: dict[str, Any]) -> str:  # a sync handler returning a non-mapping
    return f"sent to {args['to']}"


async def _weather(args: dict[str, Any]) -> dict[str, Any]:
    return {"city": args["city"], "sky": "clear"}


async def _wipe(args: dict[str, Any]) -> dict[str, Any]:
    return {"wiped": args.get("target", "")}


def register(registry: ToolRegistry) -> None:
    REGISTER_CALLS.append(1)
    registry.register(
        ToolDescriptor(
            name="search",
            description="Search the knowledge base",
            permission=PermissionLevel.READ_ONLY,
            handler=_search,
            parameters={
                "query": {"type": "string", "description": "Search query"},
                "limit": {"type": "integer", "optional": True},
            },
        )
    )
    registry.register(
        ToolDescriptor(
            name="mail.send",
            description="Send a message",
            permission=PermissionLevel.NETWORK,
            reversibility=Reversibility.NONE,
            handler=_send,
            parameters={"to": {"type": "string"}},
            postcondition=lambda args, out: "@" in args["to"],
        )
    )
    registry.register(
        ToolDescriptor(  # reversibility left at 0.7.0's default, full
            name="weather",
            description="Today's weather",
            permission=PermissionLevel.NETWORK,
            handler=_weather,
            parameters={"city": {"type": "string"}},
        )
    )
    registry.register(
        ToolDescriptor(
            name="wipe",
            description="Wipe a target",
            permission=PermissionLevel.DESTRUCTIVE,
            handler=_wipe,
            parameters={"target": {"type": "string"}},
        )
    )
