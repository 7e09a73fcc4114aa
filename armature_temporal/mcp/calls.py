"""Calling a pinned MCP tool from the tools worker, over a connection the worker keeps.

A worker process starts each server once (per spec workspace and connection settings) and
reuses it for every call; a server that died (its connection closed) is started again on the
next call, and :func:`close_all` stops every one when the worker stops (a worker killed
outright closes their stdin, on which a stdio server ends; the sandbox kills what is left).

Before a call, the tool's pinned hash is compared with what the server lists now (listed once
per connection): a tool that changed or went away since the run's plan was made is refused
(:class:`McpDrift`), never called with arguments planned for something else. The call carries
``_meta["armature/idempotency_key"]`` (the same for every retry of one call), so a server
that acts can do it once. Its timeout is the server's ``timeout_s``; a timeout or a cancelled
activity sends the server ``notifications/cancelled`` (the SDK does), so work it started
stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from armature_temporal.errors import ArmatureError
from armature_temporal.mcp.discovery import list_tools
from armature_temporal.mcp.transport import McpServerError, open_client
from armature_temporal.spec.mcp import PlanMcpServer, PlanMcpTool, tool_hash
from armature_temporal.tools import ToolResult

__all__ = ["IDEMPOTENCY_KEY", "McpDrift", "McpLost", "call_mcp", "close_all"]

IDEMPOTENCY_KEY = "armature/idempotency_key"
log = logging.getLogger(__name__)


class McpDrift(ArmatureError):
    """The server's tool is not the one the plan pinned."""


class McpLost(ArmatureError):
    """The connection to the server ended (it died or was stopped) during a call."""


class _Live:
    """One server connection, held open by its own task (the SDK's client must be entered
    and left in one task)."""

    def __init__(self, server: PlanMcpServer, workspace: Path, env: Mapping[str, str]) -> None:
        self.server = server
        self.workspace = workspace
        self.env = dict(env)
        self.client: Any = None
        self.listed: dict[str, str] = {}
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.failure: BaseException | None = None
        self.task = asyncio.ensure_future(self._hold())

    async def _hold(self) -> None:
        try:
            async with open_client(self.server, self.workspace, self.env) as client:
                self.listed = {
                    t.name: tool_hash(t.name, t.description or "", t.input_schema)
                    for t in await list_tools(client)
                }
                self.client = client
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:  # kept for the callers waiting on ready
            self.failure = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.client = None
            self.ready.set()

    @property
    def alive(self) -> bool:
        return not self.task.done() and not self.stop.is_set()

    async def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(self.task), 10)
        if not self.task.done():
            self.task.cancel()


_pools: dict[int, dict[str, _Live]] = {}


def _pool() -> dict[str, _Live]:
    return _pools.setdefault(id(asyncio.get_running_loop()), {})


async def _connection(server: PlanMcpServer, workspace: Path, env: Mapping[str, str]) -> _Live:
    key = json.dumps([server.connection(), str(workspace), dict(env)], sort_keys=True)
    pool = _pool()
    live = pool.get(key)
    if live is None or not live.alive:
        if live is not None:
            log.warning("MCP server %r ended; starting it again", server.name)
        live = pool[key] = _Live(server, workspace, env)
    await live.ready.wait()
    if live.client is None:
        pool.pop(key, None)
        failure = live.failure
        if isinstance(failure, McpServerError):
            raise failure
        raise McpServerError(
            f"MCP server {server.name!r} did not start: {type(failure).__name__}: {failure}"
        )
    return live


def _drift(live: _Live, tool: PlanMcpTool) -> None:
    now = live.listed.get(tool.name)
    if now == tool.hash:
        return
    change = (
        "no longer lists it"
        if now is None
        else f"changed it (pinned {tool.hash[:12]}, now {now[:12]})"
    )
    raise McpDrift(
        f"MCP server {tool.server!r} {change} since this run's plan was made: tool {tool.name!r} "
        "is not called with arguments planned for another; submit the spec again to plan "
        "against the server as it is now (armature plan shows what it lists)"
    )


def _text(content: list[Any]) -> str:
    parts = []
    for item in content:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            parts.append(
                f"[{kind} {getattr(item, 'mime_type', '')}, {len(item.data)} base64 chars]"
            )
        elif kind == "resource_link":
            parts.append(f"[resource {item.uri}]")
        elif kind == "resource":
            res = item.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        else:
            parts.append(f"[{kind or type(item).__name__}]")
    return "\n".join(parts)


async def call_mcp(
    server: PlanMcpServer,
    tool: PlanMcpTool,
    args: dict[str, Any],
    *,
    workspace: Path,
    sandbox_env: Mapping[str, str] | None = None,
    key: str,
    cap: int,
) -> ToolResult:
    """Call ``tool`` with ``args``; the server's own error is a failed result.

    Raises:
        McpServerError: the server would not start (retry: it may come back).
        McpDrift: the tool changed since the plan (do not retry).
        McpLost: the connection ended during the call (retry: the server is started again).
    """
    from mcp.shared.exceptions import MCPError

    live = await _connection(server, workspace, sandbox_env or {})
    _drift(live, tool)
    try:
        result = await live.client.call_tool(
            tool.name,
            args,
            read_timeout_seconds=server.timeout_s,
            meta={IDEMPOTENCY_KEY: key},
        )
    except MCPError as exc:
        if not live.alive or "closed" in str(exc).lower():
            await live.close()
            raise McpLost(
                f"MCP server {server.name!r} went away during the call of {tool.name!r}: {exc}"
            ) from exc
        if exc.code == -32001 or "timed out" in str(exc):  # REQUEST_TIMEOUT
            return ToolResult.failure(
                "timeout",
                f"MCP tool {tool.canonical!r} gave no answer within {server.timeout_s:g}s "
                "(the server was told to cancel it); raise the server's timeout_s if it needs "
                "longer",
            )
        return ToolResult.failure(
            "invalid_args" if exc.code == -32602 else "tool_error",
            f"MCP tool {tool.canonical!r}: {exc}",
        )
    except anyio_closed_errors() as exc:
        await live.close()
        raise McpLost(
            f"MCP server {server.name!r} went away during the call of {tool.name!r}: "
            f"{type(exc).__name__}"
        ) from exc
    text = _text(result.content)
    if len(text) > cap:
        text = text[:cap] + f"\n[cut at {cap:,} characters]"
    output: dict[str, Any] = {"output": text, "server": server.name, "tool": tool.name}
    if result.structured_content is not None:
        output["structured"] = result.structured_content
    if result.is_error:
        return ToolResult.failure("tool_error", text or "the tool reported an error", output)
    return ToolResult.success(output)


def anyio_closed_errors() -> tuple[type[BaseException], ...]:
    import anyio

    return (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


async def close_all() -> None:
    """Stop every server this event loop's worker started."""
    pool = _pools.pop(id(asyncio.get_running_loop()), {})
    await asyncio.gather(*(live.close() for live in pool.values()), return_exceptions=True)
