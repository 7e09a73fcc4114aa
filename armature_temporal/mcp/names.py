"""Which MCP tool a name in a spec means.

A spec names an MCP tool ``mcp:<server>/<tool>`` (canonical), ``<server>.<tool>`` (as
armature-agents 0.7.0 registered them), or by its bare name where exactly one server lists
it and no built-in tool has it. In a role's ``tools``, ``mcp:<server>`` (or
``mcp:<server>/*``) offers every tool of the server; a safety rule's ``tool:
mcp:<server>/*`` applies to every tool of the server.
"""

from __future__ import annotations

from collections.abc import Sequence

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.mcp import PlanMcpServer, PlanMcpTool, canonical, split_canonical

__all__ = ["McpNameError", "resolve", "resolve_rule_tool"]


class McpNameError(ValueError):
    """A name that points at MCP tools wrongly: an unknown server or tool, or a bare name two
    servers offer."""


def _server(servers: Sequence[PlanMcpServer], name: str, ref: str) -> PlanMcpServer:
    for server in servers:
        if server.name == name:
            return server
    known = [s.name for s in servers]
    raise McpNameError(
        f"{ref!r} names MCP server {name!r}, which mcp_servers does not declare; declared: "
        f"{known}{did_you_mean(name, known)}"
    )


def _tool(server: PlanMcpServer, name: str, ref: str) -> PlanMcpTool:
    for tool in server.tools:
        if tool.name == name:
            return tool
    known = [t.name for t in server.tools]
    raise McpNameError(
        f"{ref!r}: MCP server {server.name!r} lists no tool {name!r}; it lists {known}"
        f"{did_you_mean(name, known)}"
    )


def resolve(ref: str, servers: Sequence[PlanMcpServer], *, many: bool = False) -> list[str] | None:
    """The canonical names ``ref`` stands for, or None when it is not an MCP name (a built-in,
    ``module:function`` or a registered tool's name).

    Args:
        many: ``mcp:<server>`` (and ``/*``) may stand for all of a server's tools.

    Raises:
        McpNameError: it names MCP tools wrongly.
    """
    if not servers:
        return None
    split = split_canonical(ref)
    if split is not None:
        server = _server(servers, split[0], ref)
        if split[1] == "*":
            if not many:
                raise McpNameError(
                    f"{ref!r} stands for every tool of MCP server {server.name!r}; name one: "
                    f"{[t.canonical for t in server.tools]}"
                )
            return [t.canonical for t in server.tools]
        return [_tool(server, split[1], ref).canonical]
    head, dot, rest = ref.partition(".")
    if dot and ":" not in ref and any(s.name == head for s in servers):
        server = _server(servers, head, ref)
        if any(t.name == rest for t in server.tools):
            return [canonical(server.name, rest)]
    offering = [s for s in servers if any(t.name == ref for t in s.tools)]
    if len(offering) > 1:
        raise McpNameError(
            f"tool {ref!r} is listed by MCP servers {[s.name for s in offering]}; name the one "
            f"you mean: {[canonical(s.name, ref) for s in offering]}"
        )
    if offering:
        return [canonical(offering[0].name, ref)]
    return None


def resolve_rule_tool(ref: str, servers: Sequence[PlanMcpServer]) -> str:
    """A safety rule's ``tool`` as the policy will compare it: canonical for one MCP tool,
    ``mcp:<server>/*`` for all of a server's, unchanged otherwise.

    Raises:
        McpNameError: it names MCP tools wrongly.
    """
    split = split_canonical(ref)
    if split is not None and split[1] == "*":
        return f"mcp:{_server(servers, split[0], ref).name}/*"
    names = resolve(ref, servers)
    return names[0] if names else ref
