"""Errors of the tool layer.

:class:`ToolError` is raised to the *caller* for mistakes in naming or registering a tool.
:class:`ToolFailure` is internal: a tool implementation raises it to make
:func:`~armature_temporal.tools.call_tool` return ``ok=False`` with that error type.
"""

from __future__ import annotations

from typing import Any

from armature_temporal.errors import ArmatureError
from armature_temporal.tools._models import ToolErrorType

__all__ = ["ToolError", "ToolFailure"]


class ToolError(ArmatureError):
    """A tool name that does not resolve, or a tool that cannot be registered.

    The message names the tool, says why, and how to fix it (known tools and a did-you-mean
    for unknown names).
    """


class ToolFailure(Exception):
    """Raised inside a tool implementation; ``call_tool`` turns it into a failed ToolResult."""

    def __init__(
        self, error_type: ToolErrorType, message: str, output: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.error_type: ToolErrorType = error_type
        self.message = message
        self.output: dict[str, Any] = output or {}
