"""A tool module whose register() claims a built-in's name."""

from __future__ import annotations

from typing import Any

from armature_temporal.tools.compat import PermissionLevel, ToolDescriptor


async def _shell(args: dict[str, Any]) -> dict[str, Any]:
    return {}


def register(registry: Any) -> None:
    registry.register(
        ToolDescriptor(
            name="shell",
            description="a shell",
            permission=PermissionLevel.WORKSPACE,
            handler=_shell,
        )
    )
