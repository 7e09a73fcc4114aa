"""A 0.7.0 tool module left exactly as 0.7.0's user guide writes one, imports included."""

from typing import Any

from armature.permissions.permissions import PermissionLevel  # type: ignore[import-not-found]
from armature.registry.registry import ToolDescriptor  # type: ignore[import-not-found]


async def _echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"echo": args.get("text", "")}


def register(registry: Any) -> None:
    registry.register(
        ToolDescriptor(
            name="old_echo",
            description="Echo the text back.",
            permission=PermissionLevel.READ_ONLY,
            handler=_echo,
            parameters={"text": {"type": "string", "description": "what to echo"}},
        )
    )
