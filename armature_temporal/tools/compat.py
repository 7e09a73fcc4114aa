"""Drop-in names for armature-agents 0.7.0 tool modules.

A 0.7.0 tool module imports from ``armature.registry.registry`` and
``armature.permissions.permissions``; import the same names from here and it runs unchanged::

    from armature_temporal.tools.compat import PermissionLevel, ToolDescriptor, ToolRegistry


    async def _search(args: dict) -> dict:
        return {"results": [args["query"]]}


    def register(registry: ToolRegistry) -> None:
        registry.register(ToolDescriptor(
            name="search",
            description="Search the knowledge base",
            permission=PermissionLevel.NETWORK,
            handler=_search,
            parameters={"query": {"type": "string", "description": "Search query"}},
        ))

List the module under the spec's ``tools: [{module: my_pkg.search_tools}]``; the worker loads it
once per process before the first tool call that needs it. Descriptors made with the 0.7.0
package itself (when it is installed) are accepted too.
"""

from __future__ import annotations

from armature_temporal.tools._legacy import PermissionLevel, ToolDescriptor
from armature_temporal.tools._legacy import ReversibilityLevel as Reversibility
from armature_temporal.tools._registry import ToolRegistry

__all__ = ["PermissionLevel", "Reversibility", "ToolDescriptor", "ToolRegistry"]
