"""Connecting to an MCP server: a stdio server started inside the tools sandbox, or an HTTP one.

A stdio server is started the way the ``shell`` tool starts a program
(:mod:`armature_temporal.tools.sandbox`): its own namespaces, no capability, every mount
read-only but the spec's workspace (and the server's ``cwd``), ``$ARMATURE_HOME`` and the
worker's credential files hidden, no network unless the server's ``network: true`` grants it
(then HTTP(S) through the egress proxy), and an environment of ``PATH``, ``LANG``, ``LC_*``,
``TZ``, ``HOME`` (the workspace), the spec's ``sandbox.env`` and the server's own ``env``:
nothing else of the worker's. The SDK's own stdio transport cannot start a program that way
(the sandbox's launcher reports on a pipe the SDK cannot pass), so this module carries the
newline-delimited JSON-RPC itself, as the MCP specification's stdio transport defines it, and
hands the SDK's :class:`mcp.Client` the two streams.

Closing a connection closes the server's stdin, waits briefly, then kills its whole process
group (in the sandbox, its namespace goes with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio

from armature_temporal.errors import ArmatureError
from armature_temporal.spec.mcp import ENV_REF, PlanMcpServer

__all__ = ["McpServerError", "Wire", "open_client", "resolve_refs", "server_cwd"]

#: How long a server may take to start and answer ``initialize``.
START_TIMEOUT_S = 30.0
#: Bytes of a server's stderr kept, for the error when it fails.
STDERR_KEEP = 8_192
#: After its stdin closes, how long a server has to exit before it is killed.
EXIT_GRACE_S = 2.0


class McpServerError(ArmatureError):
    """An MCP server could not be started, reached or used."""


def resolve_refs(values: Mapping[str, str], what: str, server: str) -> dict[str, str]:
    """``values`` with every ``${NAME}`` read from this process's environment.

    Raises:
        McpServerError: a named variable is not set.
    """
    out: dict[str, str] = {}
    for key, value in values.items():

        def read(m: Any, key: str = key) -> str:
            name = m.group(1)
            found = os.environ.get(name)
            if found is None:
                raise McpServerError(
                    f"MCP server {server!r}: {what} {key!r} reads ${{{name}}}, which is not set "
                    f"in this process's environment; export {name}=... for the worker (and "
                    "for the command that plans the spec)"
                )
            return found

        out[key] = ENV_REF.sub(read, value)
    return out


def server_cwd(server: PlanMcpServer, workspace: Path) -> Path:
    """A stdio server's working directory: ``cwd`` against the workspace."""
    if not server.cwd:
        return workspace
    return (workspace / os.path.expanduser(server.cwd)).resolve()


class Wire:
    """What a stdio server said besides the messages the SDK reads: the last bytes of its
    stderr, and the raw tool list it last sent (to name a tool whose definition the SDK
    refused)."""

    def __init__(self) -> None:
        self.data = b""
        self.tools: list[Any] | None = None

    def saw(self, line: bytes) -> None:
        if b'"tools"' not in line:
            return
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            tools = json.loads(line).get("result", {}).get("tools")
            if isinstance(tools, list):
                self.tools = tools

    async def drain(self, stream: Any) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in stream:
                self.data = (self.data + chunk)[-STDERR_KEEP:]

    def tail(self, lines: int = 8) -> str:
        text = self.data.decode("utf-8", errors="replace").strip()
        return "\n".join(text.splitlines()[-lines:])


def _program(command: str, cwd: Path, env: Mapping[str, str], server: str) -> str:
    if "/" in command:
        path = Path(command) if os.path.isabs(command) else cwd / command
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    elif (found := shutil.which(command, path=env.get("PATH", os.defpath))) is not None:
        return found
    elif (beside := Path(sys.executable).parent / command).is_file() and os.access(beside, os.X_OK):
        return str(beside)  # installed in Armature's own environment (not activated)
    raise McpServerError(
        f"MCP server {server!r}: command {command!r} was not found (or is not executable) on "
        f"the PATH the server gets ({env.get('PATH', '')!r}) nor beside this Python "
        f"({Path(sys.executable).parent}); install it (pip install {command}, if it is a Python "
        "package), or give its absolute path in command:"
    )


@contextlib.asynccontextmanager
async def _stdio(
    server: PlanMcpServer, workspace: Path, sandbox_env: Mapping[str, str], failure: Wire
) -> AsyncIterator[Any]:
    """The (read, write) streams of a stdio server started in the tools sandbox."""
    import mcp_types
    from mcp.shared.message import SessionMessage

    from armature_temporal.tools._hiding import layout
    from armature_temporal.tools._launch import proxied, setup_failure, shimmed, unavailable
    from armature_temporal.tools.sandbox import minimal_env, sandbox

    assert server.command is not None
    workspace.mkdir(parents=True, exist_ok=True)
    cwd = server_cwd(server, workspace)
    if not cwd.is_dir():
        raise McpServerError(
            f"MCP server {server.name!r}: cwd {server.cwd!r} is not a directory "
            f"({cwd}); create it, or give a directory relative to the workspace {workspace}"
        )
    env = minimal_env(workspace, sandbox_env) | resolve_refs(server.env, "env", server.name)
    program = _program(server.command, cwd, env, server.name)
    argv = [server.command, *server.args]
    box = await anyio.to_thread.run_sync(sandbox)
    if box.kind == "unavailable":
        raise unavailable(box)
    status: tuple[int, int] | None = None
    if box.isolated:
        visible = (workspace,) if cwd.is_relative_to(workspace) else (workspace, cwd)
        mounts = await anyio.to_thread.run_sync(layout, visible, ())
        egress = None
        if server.network:
            from armature_temporal.tools._egress import egress_proxy

            egress = str((await anyio.to_thread.run_sync(egress_proxy)).path)
            env = proxied(env)
        status = os.pipe()
        argv = shimmed(
            box,
            argv,
            program,
            cwd,
            env.get("LC_CTYPE"),
            mounts,
            status[1],
            egress,
            die_with_worker=True,
        )
        program = argv[0]
    try:
        process = await anyio.open_process(
            [program, *argv[1:]] if status is None else argv,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=() if status is None else (status[1],),
        )
    except BaseException:
        if status is not None:
            os.close(status[0])
        raise
    finally:
        if status is not None:
            os.close(status[1])
    assert process.stdin and process.stdout and process.stderr
    read_in, read_out = anyio.create_memory_object_stream[Any](0)
    write_in, write_out = anyio.create_memory_object_stream[Any](0)

    async def reader() -> None:
        buffer = b""
        async with read_in:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stdout:  # type: ignore[union-attr]
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        failure.saw(line)
                        try:
                            message: Any = SessionMessage(
                                mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                            )
                        except ValueError as exc:
                            message = exc
                        await read_in.send(message)

    async def writer() -> None:
        async with write_out:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for sent in write_out:
                    text = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(text.encode() + b"\n")  # type: ignore[union-attr]

    try:
        async with _one_error(), anyio.create_task_group() as tasks:
            tasks.start_soon(failure.drain, process.stderr)
            if status is not None:
                said = await _status(status[0])
                problem = setup_failure(said, failure.tail(), box, server.command)
                if problem is not None:
                    raise McpServerError(
                        f"MCP server {server.name!r} could not start in the tools sandbox: "
                        f"{problem}"
                    )
            tasks.start_soon(reader)
            tasks.start_soon(writer)
            try:
                yield read_out, write_in
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(Exception):
                await process.stdin.aclose()
            with anyio.move_on_after(EXIT_GRACE_S):
                await process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.move_on_after(EXIT_GRACE_S):
                await process.wait()
            for stream in (read_in, read_out, write_in, write_out):
                await stream.aclose()


@contextlib.asynccontextmanager
async def _one_error() -> AsyncIterator[None]:
    """A task group wraps what its body raised in an ExceptionGroup: the caller gets the
    body's own exception back when it is the only one."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


async def _status(fd: int) -> bytes:
    """What the sandbox's launcher reported: ``R`` (about to exec; then EOF, or ``E...`` if
    exec failed) or ``F...`` (setup failed)."""
    from armature_temporal.tools.sandbox import _reader

    stream, transport = await _reader(fd)
    said = b""
    try:
        with anyio.move_on_after(START_TIMEOUT_S):
            while chunk := await stream.read(4096):
                said += chunk
    finally:
        transport.close()
    return said


@contextlib.asynccontextmanager
async def open_client(
    server: PlanMcpServer,
    workspace: Path,
    sandbox_env: Mapping[str, str] | None = None,
    wire: Wire | None = None,
) -> AsyncIterator[Any]:
    """A connected, initialised :class:`mcp.Client` for ``server``; closed (and a stdio server
    stopped) on exit.

    Raises:
        McpServerError: it would not start or answer; the message holds the last lines of a
            stdio server's stderr.
    """
    from mcp import Client

    failure = wire if wire is not None else Wire()
    transport: Any
    if server.transport == "stdio":
        transport = _stdio(server, workspace, dict(sandbox_env or {}), failure)
    else:
        transport = _http(server)
    client = Client(
        transport, read_timeout_seconds=server.timeout_s, cache=None, raise_exceptions=True
    )
    entered = False
    try:
        # No timeout scope around entering: the client's tasks outlive it. The handshake is
        # bounded by read_timeout_seconds, the sandbox's start by START_TIMEOUT_S.
        async with client:
            entered = True
            yield client
    except McpServerError:
        raise
    except Exception as exc:
        if entered:
            raise
        raise _start_error(server, exc, failure) from exc


def _start_error(server: PlanMcpServer, exc: BaseException, failure: Wire) -> McpServerError:
    what = f"{server.command} {' '.join(server.args)}".strip() if server.command else server.url
    leaves = _leaves(exc)
    reason = "; ".join(f"{type(e).__name__}: {e}" for e in leaves) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        reason = f"no answer to initialize within {START_TIMEOUT_S:.0f}s"
    tail = failure.tail()
    return McpServerError(
        f"MCP server {server.name!r} ({what}) did not start: {reason}"
        + (f"\nits stderr ended with:\n{tail}" if tail else "")
        + "\nfix: run the command by hand to see it serve, or check the url and headers"
    )


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _own_endpoints() -> list[tuple[str, int]]:
    """(host, port) of Armature's own services here: Temporal's frontend, the dev server's
    Web UI, the trace store's database."""
    from urllib.parse import urlsplit

    from armature_temporal.settings import configured_address, dev_port, dev_ui_port

    found = [("127.0.0.1", dev_port()), ("127.0.0.1", dev_ui_port())]
    address = configured_address()
    if address:
        host, _, port = address.rpartition(":")
        if port.isdigit():
            found.append((host.strip("[]") or "127.0.0.1", int(port)))
    db = os.environ.get("ARMATURE_DB_URL", "")
    with contextlib.suppress(ValueError):
        parts = urlsplit(db)
        if parts.hostname:
            found.append((parts.hostname, parts.port or 5432))
    return found


def _resolve(name: str, at: int) -> set[Any]:
    import ipaddress
    import socket

    with contextlib.suppress(OSError, UnicodeError):
        return {
            ipaddress.ip_address(str(info[4][0]).split("%")[0])
            for info in socket.getaddrinfo(name, at, type=socket.SOCK_STREAM)
        }
    return set()


def address_refusal(server: PlanMcpServer, host: str, port: int, addresses: set[Any]) -> str | None:
    """Why ``server`` may not be reached at ``addresses`` (what ``host`` resolved to), or None:
    an address on this machine or a private network without ``local: true``, or (with it) one
    of Armature's own services. Blocking (it resolves the services' names)."""
    from armature_temporal.tools._egress import EgressPolicy, refusal

    if not server.local:
        why = refusal(host, port, addresses, EgressPolicy.from_environment())
        if why is not None:
            why = why.replace("tool programs never reach it", "not reached without local: true")
            return (
                f"MCP server {server.name!r}: {why}; a server on this machine or a private "
                "network needs local: true on it"
            )
        return None
    for own_host, own_port in _own_endpoints():
        if own_port == port and addresses & _resolve(own_host, own_port):
            return (
                f"MCP server {server.name!r}: {server.url} is Armature's own service "
                f"({own_host}:{own_port}: Temporal, its Web UI or the trace store), which an "
                "MCP connection never reaches, local: true or not"
            )
    return None


def url_refusal(server: PlanMcpServer) -> str | None:
    """:func:`address_refusal` for ``server``'s url as its name resolves now. The connection
    itself checks the addresses it connects to again (:func:`_pinned_client`)."""
    from urllib.parse import urlsplit

    parts = urlsplit(server.url or "")
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return address_refusal(server, host, port, _resolve(host, port))


def _pinned_client(server: PlanMcpServer, **options: Any) -> Any:
    """An httpx2 client whose every connection resolves its host once, passes
    :func:`address_refusal` and goes to a checked address (no DNS rebinding between the check
    and the connection; :mod:`armature_temporal.tools._pinned`)."""
    import httpx2

    from armature_temporal.tools._pinned import httpx2_async_transport

    def check(host: str, port: int, addresses: set[Any]) -> str | None:
        return address_refusal(server, host, port, addresses)

    return httpx2.AsyncClient(transport=httpx2_async_transport(check), **options)


@contextlib.asynccontextmanager
async def _http(server: PlanMcpServer) -> AsyncIterator[Any]:
    """The streams of an HTTP (streamable, or the older SSE) server."""
    headers = resolve_refs(server.headers, "header", server.name)
    assert server.url is not None
    if (why := await anyio.to_thread.run_sync(url_refusal, server)) is not None:
        raise McpServerError(why)
    if server.transport == "sse":
        from mcp.client.sse import sse_client

        def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
            # As the SDK's own factory: its timeouts when given none, redirects off.
            options = {"headers": headers, "timeout": timeout, "auth": auth}
            return _pinned_client(server, **{k: v for k, v in options.items() if v is not None})

        async with sse_client(
            server.url, headers=headers, timeout=server.timeout_s, httpx_client_factory=factory
        ) as streams:
            yield streams
        return
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        _pinned_client(
            server,
            headers=headers,
            timeout=httpx2.Timeout(server.timeout_s, read=max(server.timeout_s, 300)),
        ) as http,
        streamable_http_client(server.url, http_client=http) as streams,
    ):
        yield streams
