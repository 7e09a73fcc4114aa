"""HTTP transports that connect only to addresses they checked: one lookup per connection.

A client that resolves a name to check its addresses, then lets its transport resolve the name
again to connect, can be steered by a DNS answer that changes in between (DNS rebinding): the
check sees a public address, the connection goes to ``127.0.0.1`` or the cloud metadata
address. The transports here give httpcore a network backend that resolves each name once,
hands every address to a check, and connects to the first of those same addresses; TLS still
verifies the certificate for the name, which httpcore sends as the server name.

Three callers use them, each with its own check: the ``http_request`` tool
(:mod:`armature_temporal.tools._http`), web pages indexed as knowledge
(:mod:`armature_temporal.knowledge.urls`) and MCP servers over HTTP
(:mod:`armature_temporal.mcp.transport`, on ``httpx2``, the client the MCP SDK takes). A refused
connection raises the library's ``ConnectError`` with the check's reason, so callers that
handle connection failures report it as one.

These transports never use a proxy: a proxy would resolve the name itself, past the check.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

import anyio.to_thread
import httpcore
import httpx

__all__ = ["Check", "async_transport", "httpx2_async_transport", "resolve_checked", "transport"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``(host, port, addresses)`` → why the connection is refused, or None to allow it.
Check = Callable[[str, int, set[IPAddress]], str | None]


def resolve_checked(host: str, port: int, check: Check, error: type[Exception]) -> str:
    """The address to connect to for ``host``: resolved once, every address checked.

    Raises:
        error: the name does not resolve, or ``check`` refuses one of its addresses.
    """
    name = host.strip("[]")
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise error(f"{host} does not resolve: {exc}") from None
    ordered: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in ordered:
            ordered.append(address)
    if not ordered:
        raise error(f"{host} does not resolve")
    why = check(name, port, set(ordered))
    if why is not None:
        raise error(why)
    return str(ordered[0])


class _Backend(httpcore.NetworkBackend):
    def __init__(self, check: Check) -> None:
        self._check = check
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        address = resolve_checked(host, port, self._check, httpcore.ConnectError)
        return self._inner.connect_tcp(address, port, timeout, local_address, socket_options)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError(f"unix socket {path}: these transports reach TCP hosts only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _async_backend(core: Any, check: Check) -> Any:
    """An async network backend of httpcore module ``core`` (httpcore or httpcore2)."""

    class _AsyncBackend(core.AsyncNetworkBackend):  # type: ignore[misc]
        def __init__(self) -> None:
            self._inner = core.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> Any:
            address = await anyio.to_thread.run_sync(
                resolve_checked, host, port, check, core.ConnectError
            )
            return await self._inner.connect_tcp(
                address, port, timeout, local_address, socket_options
            )

        async def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Any = None
        ) -> Any:
            raise core.ConnectError(f"unix socket {path}: these transports reach TCP hosts only")

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return _AsyncBackend()


def _context() -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=False)


def transport(check: Check) -> httpx.HTTPTransport:
    """A synchronous httpx transport whose every connection passes ``check``."""
    made = httpx.HTTPTransport(trust_env=False)
    made._pool = httpcore.ConnectionPool(ssl_context=_context(), network_backend=_Backend(check))
    return made


def _async_transport(client: Any, core: Any, check: Check) -> Any:
    made = client.AsyncHTTPTransport(trust_env=False)
    made._pool = core.AsyncConnectionPool(
        ssl_context=client.create_ssl_context(trust_env=False),
        network_backend=_async_backend(core, check),
    )
    return made


def async_transport(check: Check) -> httpx.AsyncHTTPTransport:
    """An asynchronous httpx transport whose every connection passes ``check``."""
    made: httpx.AsyncHTTPTransport = _async_transport(httpx, httpcore, check)
    return made


def httpx2_async_transport(check: Check) -> Any:
    """The same for ``httpx2`` (on ``httpcore2``), the HTTP client of the MCP SDK."""
    import httpcore2
    import httpx2

    return _async_transport(httpx2, httpcore2, check)
