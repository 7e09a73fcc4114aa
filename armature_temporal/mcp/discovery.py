"""Asking MCP servers what they offer, once, when a spec is planned.

:func:`discover` connects to every server of a spec (stdio ones in the tools sandbox, see
:mod:`armature_temporal.mcp.transport`), lists its tools (every page) and checks each: a name
a model can call, an input schema that is a JSON Schema object. What it returns is pinned in
the plan; runs never list again (:mod:`armature_temporal.mcp.calls` checks, before a call,
that the tool it calls still has the pinned hash). A listing is reused for
:data:`REUSE_S` seconds in one process, so an improvement round that plans many variants of
a spec starts each server once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from armature_temporal.mcp.transport import McpServerError, Wire, open_client, resolve_refs
from armature_temporal.spec.mcp import McpServer, PlanMcpServer, PlanMcpTool, call_name, tool_hash

__all__ = ["REUSE_S", "discover", "list_tools", "plan_server"]

#: How long one process reuses a server's listing.
REUSE_S = 60.0
#: Pages of tools/list followed before a server is taken to paginate forever.
MAX_PAGES = 100
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")

_cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}
_lock = threading.Lock()


def plan_server(server: McpServer) -> PlanMcpServer:
    """The server's connection as the plan keeps it (no tools yet)."""
    return PlanMcpServer(
        name=server.name,
        transport=server.kind,
        command=server.command,
        args=list(server.args),
        cwd=server.cwd,
        env=dict(server.env),
        url=server.url,
        headers=dict(server.headers),
        timeout_s=server.timeout_s,
        network=server.network,
        local=server.local,
    )


async def list_tools(client: Any) -> list[Any]:
    """Every tool a connected server lists, page after page."""
    tools: list[Any] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise McpServerError(f"the server's tools/list went on past {MAX_PAGES} pages")


def _checked(server: str, tool: Any) -> dict[str, Any]:
    """One listed tool, or McpServerError naming it and what is wrong."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    name = tool.name
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise McpServerError(
            f"MCP server {server!r} lists a tool named {name!r}; Armature calls tools whose "
            "names are 1-128 of letters, digits, _ . - /; fix the server"
        )
    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise McpServerError(
            f"MCP server {server!r}: tool {name!r} has a malformed input schema "
            f"({json.dumps(schema, default=str)[:200]}): MCP tools take a JSON Schema whose "
            "type is object; fix the server's definition of the tool"
        )
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise McpServerError(
            f"MCP server {server!r}: tool {name!r} has a malformed input schema: "
            f"{exc.message} (at {'/'.join(str(p) for p in exc.path) or 'the top'}); fix the "
            "server's definition of the tool"
        ) from None
    annotations = (
        tool.annotations.model_dump(mode="json", exclude_none=True, by_alias=True)
        if tool.annotations is not None
        else {}
    )
    return {
        "name": name,
        "description": tool.description or "",
        "input_schema": schema,
        "annotations": annotations,
    }


def _refused(server: str, exc: Any, wire: Wire) -> McpServerError:
    """The SDK refused a listing: name the tool (from the raw list a stdio server sent)."""
    error = exc.errors()[0]
    loc = list(error.get("loc", ()))
    where = ".".join(str(p) for p in loc[2:]) or "its definition"
    name = f"#{loc[1] + 1} in its list"
    if len(loc) > 1 and isinstance(loc[1], int):
        raw = wire.tools[loc[1]] if wire.tools and loc[1] < len(wire.tools) else None
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            name = repr(raw["name"])
    kind = "input schema" if "inputSchema" in str(loc) else "definition"
    return McpServerError(
        f"MCP server {server!r}: tool {name} has a malformed {kind}: {where}: "
        f"{error.get('msg')}; MCP tools take a JSON Schema whose type is object — fix the "
        "server's definition of the tool"
    )


async def _listing(server: PlanMcpServer, workspace: Path, env: Mapping[str, str]) -> Any:
    from pydantic import ValidationError

    wire = Wire()
    async with open_client(server, workspace, env, wire) as client:
        try:
            tools = await list_tools(client)
        except McpServerError as exc:
            raise McpServerError(f"MCP server {server.name!r}: {exc}") from None
        except ValidationError as exc:
            raise _refused(server.name, exc, wire) from None
        except Exception as exc:
            raise McpServerError(
                f"MCP server {server.name!r} started but listing its tools failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    return [_checked(server.name, t) for t in tools]


async def _all(
    servers: Sequence[PlanMcpServer], workspace: Path, env: Mapping[str, str]
) -> list[list[dict[str, Any]] | BaseException]:
    found: list[list[dict[str, Any]] | BaseException] = await asyncio.gather(
        *(_listing(s, workspace, env) for s in servers), return_exceptions=True
    )
    return found


def _key(server: PlanMcpServer, workspace: Path, env: Mapping[str, str]) -> str:
    """What a listing depends on: the connection, the workspace, the sandbox's variables and
    what the ``${NAME}`` references read now (hashed: a changed variable is a new listing)."""
    import hashlib

    try:
        read = [
            resolve_refs(server.env, "env", server.name),
            resolve_refs(server.headers, "header", server.name),
        ]
    except McpServerError:
        read = []  # unset: never a hit (the listing says what is missing)
    seen = hashlib.sha256(json.dumps(read, sort_keys=True).encode()).hexdigest()
    return json.dumps([server.connection(), str(workspace), dict(env), seen], sort_keys=True)


def discover(
    servers: Sequence[McpServer],
    *,
    workspace: Path,
    sandbox_env: Mapping[str, str] | None = None,
    builtin_names: Sequence[str] = (),
) -> tuple[list[PlanMcpServer], dict[int, str]]:
    """Each server with the tools it lists now, and the problems found by server index.

    Call names (what a model calls a tool by) are the bare tool name where no other server's
    tool and no name in ``builtin_names`` has it, else ``<server>__<tool>``. Blocks; safe to
    call from inside a running event loop (it runs its own in a thread).
    """
    env = dict(sandbox_env or {})
    plans = [plan_server(s) for s in servers]
    now = time.monotonic()
    found: dict[int, list[dict[str, Any]] | BaseException] = {}
    todo: list[int] = []
    with _lock:
        for i, p in enumerate(plans):
            hit = _cache.get(_key(p, workspace, env))
            if hit is not None and now - hit[0] < REUSE_S:
                found[i] = hit[1]
            else:
                todo.append(i)
    if todo:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fresh = pool.submit(
                asyncio.run, _all([plans[i] for i in todo], workspace, env)
            ).result()
        for i, result in zip(todo, fresh, strict=True):
            found[i] = result
            if not isinstance(result, BaseException):
                with _lock:
                    _cache[_key(plans[i], workspace, env)] = (time.monotonic(), result)
    problems: dict[int, str] = {}
    for i, result in found.items():
        if isinstance(result, BaseException):
            problems[i] = (
                str(result)
                if isinstance(result, McpServerError)
                else f"MCP server {plans[i].name!r}: {type(result).__name__}: {result}"
            )
    counts: dict[str, int] = {}
    for result in found.values():
        if not isinstance(result, BaseException):
            for tool in result:
                counts[tool["name"]] = counts.get(tool["name"], 0) + 1
    taken = set(builtin_names)
    out: list[PlanMcpServer] = []
    for i, p in enumerate(plans):
        result = found[i]
        tools = [] if isinstance(result, BaseException) else result
        pinned = [
            PlanMcpTool(
                server=p.name,
                call_name=call_name(
                    p.name, t["name"], counts[t["name"]] == 1 and t["name"] not in taken
                ),
                hash=tool_hash(t["name"], t["description"], t["input_schema"]),
                **t,
            )
            for t in tools
        ]
        out.append(p.model_copy(update={"tools": pinned}))
    return out, problems


def forget() -> None:
    """Drop every reused listing (tests; a user who just changed a server)."""
    with _lock:
        _cache.clear()
