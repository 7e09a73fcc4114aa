"""Tools an agent can call: built-in file, shell and HTTP tools, Python functions, and yours.

``call_tool(name, args, ctx)`` validates the arguments against the tool's JSON Schema, runs the
tool inside the :class:`ToolContext` sandbox and returns a :class:`ToolResult`; it never raises
for a failing tool. Built-ins: ``file_read``, ``file_write``, ``file_list`` (confined to the
workspace), ``shell`` (``argv`` or ``cmd``, never through a shell), ``http_request``
(allow-listed hosts only); :func:`tool_arg_fields` names their arguments. Any
``module:function`` is a tool too; :func:`register_tool` adds a name, a reversibility (default
``none``: irreversible) and a postcondition; :func:`load_tool_modules` loads armature-agents
0.7.0 tool modules (see :mod:`armature_temporal.tools.compat`). Safety rules are checked by
:mod:`armature_temporal.runtime.policy` before the call, on :func:`policy_args` and the
pseudo-fields of :func:`resolved_fields` (what will run: shell's ``_executable``, the file
tools' ``_resolved_path``), which the call then gets as ``ctx.checked``.

This package does I/O; it never imports temporalio.
"""

from armature_temporal.tools._call import call_tool
from armature_temporal.tools._errors import ToolError
from armature_temporal.tools._models import (
    Reversibility,
    ToolContext,
    ToolErrorType,
    ToolResult,
    ToolSpec,
)
from armature_temporal.tools._registry import (
    ToolRegistry,
    get_tool_spec,
    load_tool_modules,
    policy_args,
    register_tool,
    resolved_fields,
    tool_arg_fields,
    tool_pseudo_fields,
    tool_reversibility,
)
from armature_temporal.tools._shell import split_command

__all__ = [
    "Reversibility",
    "ToolContext",
    "ToolError",
    "ToolErrorType",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "call_tool",
    "get_tool_spec",
    "load_tool_modules",
    "policy_args",
    "register_tool",
    "resolved_fields",
    "split_command",
    "tool_arg_fields",
    "tool_pseudo_fields",
    "tool_reversibility",
]
