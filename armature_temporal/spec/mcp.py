"""The spec's ``mcp_servers:`` section (armature-agents 0.7.0's shape, extended) and what the
plan pins of it.

A server is a program Armature starts (``transport: stdio``: ``command``, ``args``, ``cwd``,
``env``) or a URL it connects to (``transport: http``, MCP's streamable HTTP; ``sse`` for
servers that still speak the older transport): ``url`` and ``headers``. Values of ``env`` and
``headers`` may name variables of the worker's environment as ``${NAME}``, so a secret lives
in the worker, never in the spec, the plan or the run's history; a stdio server gets nothing
else from the worker's environment but ``PATH``, ``LANG``, ``LC_*`` and ``TZ``.

Its tools are listed when the spec is planned (:mod:`armature_temporal.mcp.discovery`) and
pinned in the plan (:class:`PlanMcpTool`: name, description, input schema and their hash),
so a run never asks a server what it has; a call whose tool changed since is refused.
Tools are named ``mcp:<server>/<tool>`` (canonical), ``<server>.<tool>`` (as 0.7.0 named
them), or by the bare tool name where one server alone offers it; ``mcp:<server>`` in a
role's ``tools`` offers every tool of the server.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from armature_temporal.spec.fields import _Model

__all__ = [
    "MCP_PREFIX",
    "McpServer",
    "PlanMcpServer",
    "PlanMcpTool",
    "call_name",
    "canonical",
    "env_refs",
    "offered",
    "split_canonical",
    "tool_definitions",
    "tool_hash",
]

MCP_PREFIX = "mcp:"
SERVER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
#: ``${NAME}`` in an env or header value: the worker's variable NAME.
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: What a model provider accepts as a function's name.
_CALL_NAME = re.compile(r"[^A-Za-z0-9_-]")


class McpServer(_Model):
    """One MCP server whose tools stages may use."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        ...,
        description="The server's name in tool names (mcp:<name>/<tool>) and safety rules.",
    )
    transport: Literal["stdio", "http", "sse"] | None = Field(
        None,
        description="stdio (Armature starts command in the tools sandbox), http (streamable "
        "HTTP at url) or sse (the older HTTP transport); default: stdio with command, http "
        "with url.",
    )
    command: str | None = Field(None, description="stdio: the program that serves.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    cwd: str | None = Field(
        None,
        description="stdio: its working directory, relative to the spec's workspace (default: "
        "the workspace); it stays writable to the server.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: variables it gets; ${NAME} in a value reads the worker's NAME. "
        "Nothing else of the worker's environment reaches it.",
    )
    url: str | None = Field(None, description="http/sse: the server's endpoint.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="http/sse: request headers; ${NAME} in a value reads the worker's NAME "
        "(Authorization: Bearer ${GITHUB_TOKEN}).",
    )
    timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Seconds one call (and listing its tools) may take."
    )
    network: bool = Field(
        False,
        description="stdio: the server's program gets network (through the egress proxy), as "
        "a stage's network: grants it; without it, none.",
    )
    local: bool = Field(
        False,
        description="http/sse: the url may be on this machine or a private network (loopback, "
        "private and link-local addresses are refused without it); Armature's own services "
        "(Temporal, the trace store's database, the dev server's Web UI) stay refused.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not SERVER_NAME.match(name):
            raise ValueError(
                f"MCP server name {name!r} must start with a letter and hold only letters, "
                "digits, _ and - (at most 64): it is part of tool names (mcp:<name>/<tool>)"
            )
        return name

    @model_validator(mode="after")
    def _shape(self) -> McpServer:
        kind = self.kind
        if kind == "stdio":
            if not self.command:
                raise ValueError(
                    f"MCP server {self.name!r} (stdio) needs command: the program to start, "
                    "e.g. command: mcp-server-time"
                )
            if self.url or self.headers or self.local:
                raise ValueError(
                    f"MCP server {self.name!r} is stdio (it has a command); url, headers and "
                    "local are for http servers: drop them or drop command"
                )
        else:
            if not self.url or not self.url.startswith(("http://", "https://")):
                raise ValueError(
                    f"MCP server {self.name!r} ({kind}) needs url: an http(s):// address, "
                    f"got {self.url!r}"
                )
            if self.command or self.args or self.cwd or self.env or self.network:
                raise ValueError(
                    f"MCP server {self.name!r} is {kind} (it has a url); command, args, cwd, "
                    "env and network are for stdio servers"
                )
        return self

    @property
    def kind(self) -> Literal["stdio", "http", "sse"]:
        """The transport, the default filled in."""
        if self.transport is not None:
            return self.transport
        return "http" if self.url and not self.command else "stdio"


class PlanMcpTool(_Model):
    """A tool as the server listed it when the spec was planned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: str
    name: str
    #: The function name a model calls it by: the bare name where no other tool of the plan
    #: has it, else ``<server>__<name>``.
    call_name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    #: The server's hints (readOnlyHint, destructiveHint, ...), shown, never trusted.
    annotations: dict[str, Any] = Field(default_factory=dict)
    #: sha256 over name, description and input schema: what a call checks is unchanged.
    hash: str

    @property
    def canonical(self) -> str:
        return canonical(self.server, self.name)


class PlanMcpServer(_Model):
    """A server and the tools pinned from it (env and header values keep their ``${NAME}``
    references: they are read in the process that connects)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    transport: Literal["stdio", "http", "sse"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = 30.0
    network: bool = False
    local: bool = False
    tools: list[PlanMcpTool] = Field(default_factory=list)

    def tool(self, name: str) -> PlanMcpTool:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(
            f"MCP server {self.name!r} listed no tool {name!r} when the spec was planned; "
            f"its tools: {[t.name for t in self.tools]}"
        )

    def connection(self) -> dict[str, Any]:
        """What identifies a live connection to it (its tools aside)."""
        return self.model_dump(mode="json", exclude={"tools"})


def canonical(server: str, tool: str) -> str:
    return f"{MCP_PREFIX}{server}/{tool}"


def split_canonical(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of ``mcp:<server>/<tool>``; ``(server, "*")`` of ``mcp:<server>``
    and ``mcp:<server>/*``; None for any other name."""
    if not name.startswith(MCP_PREFIX):
        return None
    server, _, tool = name[len(MCP_PREFIX) :].partition("/")
    return server, tool or "*"


def call_name(server: str, tool: str, unique: bool) -> str:
    """The function name a model calls an MCP tool by (at most 64 characters of
    ``[A-Za-z0-9_-]``, as providers require)."""
    raw = tool if unique else f"{server}__{tool}"
    name = _CALL_NAME.sub("_", raw)
    if len(name) > 64:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name


def tool_hash(name: str, description: str, input_schema: dict[str, Any]) -> str:
    blob = json.dumps(
        {"name": name, "description": description, "input_schema": input_schema},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def env_refs(values: dict[str, str]) -> list[str]:
    """The worker variables ``${NAME}`` that these values read."""
    return sorted({m.group(1) for v in values.values() for m in ENV_REF.finditer(v)})


def offered(servers: list[PlanMcpServer], tools: list[str]) -> dict[str, str]:
    """A role's tools by the name a model calls each: the tool's own name, or for an MCP
    tool (``mcp:<server>/<tool>`` in ``tools``) its pinned call name."""
    pinned = {t.canonical: t for s in servers for t in s.tools}
    return {(pinned[n].call_name if n in pinned else n): n for n in tools}


def tool_definitions(servers: list[PlanMcpServer], tools: list[str]) -> list[dict[str, Any]]:
    """The MCP tools among ``tools`` as a model is shown them: call name, description (which
    names the server) and input schema, as pinned."""
    pinned = {t.canonical: t for s in servers for t in s.tools}
    return [
        {
            "name": tool.call_name,
            "description": f"{tool.description} (MCP server {tool.server}, tool {tool.name})"
            if tool.description
            else f"MCP server {tool.server}, tool {tool.name}",
            "parameters": tool.input_schema or {"type": "object"},
        }
        for name in tools
        if (tool := pinned.get(name)) is not None
    ]
