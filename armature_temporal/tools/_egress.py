"""The egress proxy: the only way out of a tool program's network namespace, for the calls the
spec grants network to.

A granted program's namespace has its own loopback and no route anywhere; its
``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` name a forwarder on that loopback, which passes
each connection through a unix socket bound into the sandbox to this proxy, running in the
tools worker (one per process, in a thread of its own). It speaks HTTP proxy: ``CONNECT
host:port`` (HTTPS and any other TCP protocol a client tunnels) and absolute-URI plain HTTP
(``GET http://host/path``, sent on as one request with ``Connection: close``).

Each destination is resolved once, here, and every address it resolves to is checked
(:func:`refusal`) before one of those same addresses is connected to (no second lookup a DNS
rebinding could answer differently). Refused, always: loopback, link-local (cloud metadata at
169.254.169.254), unspecified, multicast and reserved addresses, any address of the worker's own
machine, and the worker's services (the hosts of ``TEMPORAL_ADDRESS``, ``ARMATURE_DB_URL`` and
``ARMATURE_SERVICE_HOSTS``, by name and by address). Refused unless listed in
``ARMATURE_EGRESS_ALLOW_PRIVATE`` (comma-separated networks, e.g. ``10.2.0.0/16``): every other
address that is not globally routable (private networks, carrier-grade NAT, unique-local IPv6),
where a cluster's other services (a Temporal Web UI, the run API) live. A refusal answers
``403`` with the reason in the body.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import ipaddress
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from armature_temporal.tools._box import Sandbox

__all__ = [
    "EgressPolicy",
    "EgressProxy",
    "egress_proxy",
    "network_hint",
    "refusal",
    "service_hosts",
]

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_HEAD_LIMIT = 65_536
_HEAD_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 15.0
_MAX_CLIENTS = 256


def _host_of(value: str) -> str | None:
    """The host of ``host:port``, ``[v6]:port`` or a URL, lower-case; None when there is none."""
    value = value.strip()
    if not value:
        return None
    parsed = urlsplit(value if "://" in value else f"//{value}")
    try:
        host = parsed.hostname
    except ValueError:
        return None
    return host.lower().rstrip(".") if host else None


def service_hosts(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The worker's own services, by host: ``TEMPORAL_ADDRESS``, ``ARMATURE_DB_URL``,
    ``ARMATURE_BANDIT_URL`` and ``ARMATURE_REDIS_URL`` (no credentials are read) and the
    comma-separated ``ARMATURE_SERVICE_HOSTS``."""
    environ = os.environ if environ is None else environ
    hosts = {
        _host_of(environ.get(name, ""))
        for name in (
            "TEMPORAL_ADDRESS",
            "ARMATURE_DB_URL",
            "ARMATURE_BANDIT_URL",
            "ARMATURE_REDIS_URL",
        )
    }
    hosts |= {_host_of(h) for h in environ.get("ARMATURE_SERVICE_HOSTS", "").split(",")}
    return frozenset(h for h in hosts if h)


def _networks(raw: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    found = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            found.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            log.warning("ARMATURE_EGRESS_ALLOW_PRIVATE: %r is not a network; ignored", part)
    return tuple(found)


def _is_local(address: IPAddress) -> bool:
    """Whether ``address`` is one of this machine's own (it can be bound to)."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class EgressPolicy:
    """Where granted programs may not connect (the module docstring)."""

    services: frozenset[str] = frozenset()
    service_addresses: frozenset[IPAddress] = frozenset()
    allow_private: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    #: Tests only: (address, port) pairs let through whatever they are (a fake internet).
    open_ports: frozenset[tuple[str, int]] = field(default=frozenset())

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EgressPolicy:
        environ = os.environ if environ is None else environ
        services = service_hosts(environ)
        addresses: set[IPAddress] = set()
        for host in services:
            with contextlib.suppress(OSError, UnicodeError):
                for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM):
                    addresses.add(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
        return cls(
            services=services,
            service_addresses=frozenset(addresses),
            allow_private=_networks(environ.get("ARMATURE_EGRESS_ALLOW_PRIVATE", "")),
        )


def refusal(
    host: str, port: int, addresses: Iterable[IPAddress], policy: EgressPolicy
) -> str | None:
    """Why a granted program may not connect to ``host`` (resolved to ``addresses``), or None."""
    name = host.lower().rstrip(".")
    if name in policy.services or name == "localhost" or name.endswith(".localhost"):
        return f"{host} is the worker's own service or machine; tool programs never reach it"
    for found in addresses:
        address = getattr(found, "ipv4_mapped", None) or found
        if (str(address), port) in policy.open_ports:
            continue
        why = None
        if address.is_loopback or address.is_unspecified:
            why = "a loopback address: the worker's machine"
        elif address.is_link_local:
            why = "link-local (cloud metadata and the local link)"
        elif address.is_multicast or address.is_reserved:
            why = "not a unicast address"
        elif address in policy.service_addresses:
            why = "an address of the worker's services (Temporal, the store)"
        elif _is_local(address):
            why = "an address of the worker's own machine"
        elif not address.is_global and not any(address in n for n in policy.allow_private):
            why = (
                "a private address (list its network in ARMATURE_EGRESS_ALLOW_PRIVATE on the "
                "tools worker to allow it)"
            )
        if why is not None:
            return f"{host} resolves to {address}, {why}; tool programs never reach it"
    return None


_PREFIX = "armature-egress-"


def _sweep_stale() -> None:
    """Remove the socket directories of proxies whose process is gone (killed before its
    exit handler ran): each is named after its pid."""
    for stale in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        pid = stale.name.removeprefix(_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or stale.stat().st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except PermissionError:
            continue


class EgressProxy:
    """The proxy of one process: an asyncio unix-socket server in a thread of its own."""

    def __init__(self, policy: EgressPolicy | None = None) -> None:
        self.policy = policy or EgressPolicy.from_environment()
        _sweep_stale()
        self._dir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, self._dir, True)
        self.path = self._dir / "egress.sock"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._slots = asyncio.Semaphore(_MAX_CLIENTS)
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="armature-egress", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._failed is not None or not self.path.exists():
            raise OSError(f"the egress proxy did not start at {self.path}: {self._failed}")

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.path.exists()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            server = self._loop.run_until_complete(
                asyncio.start_unix_server(self._serve, path=str(self.path), limit=_HEAD_LIMIT)
            )
            os.chmod(self.path, 0o600)
        except OSError as exc:
            self._failed = exc
            self._ready.set()
            return
        self._ready.set()
        with contextlib.suppress(asyncio.CancelledError):
            self._loop.run_until_complete(server.serve_forever())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._slots:
            try:
                await self._handle(reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                pass
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(_HEAD_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        line, _, rest = head.partition(b"\r\n")
        parts = line.decode("latin-1").split()
        if len(parts) != 3:
            return await _answer(writer, 400, "not an HTTP proxy request")
        method, target, version = parts
        if method.upper() == "CONNECT":
            host = _host_of(target)
            port = urlsplit(f"//{target}").port if host else None
            if not host or port is None:
                return await _answer(writer, 400, f"CONNECT {target!r}: give host:port")
            upstream = await self._open(writer, host, port)
            if upstream is None:
                return None
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            return await _splice(reader, writer, *upstream)
        url = urlsplit(target)
        if url.scheme.lower() != "http" or not url.hostname:
            return await _answer(
                writer,
                400,
                f"{target!r}: plain HTTP takes an absolute http:// URL; HTTPS "
                "goes through CONNECT (set HTTPS_PROXY)",
            )
        upstream = await self._open(writer, url.hostname, url.port or 80)
        if upstream is None:
            return None
        path = url.path or "/"
        path += f"?{url.query}" if url.query else ""
        headers = [
            h
            for h in rest.split(b"\r\n")
            if h and not h.lower().startswith((b"proxy-", b"connection:", b"keep-alive:"))
        ]
        upstream[1].write(
            f"{method} {path} {version}\r\n".encode("latin-1")
            + b"".join(h + b"\r\n" for h in headers)
            + b"Connection: close\r\n\r\n"
        )
        return await _splice(reader, writer, *upstream)

    async def _open(
        self, writer: asyncio.StreamWriter, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            await _answer(writer, 502, f"cannot resolve {host}: {exc}")
            return None
        addresses = list(
            dict.fromkeys(ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos)
        )
        why = await asyncio.to_thread(refusal, host, port, addresses, self.policy)
        if why is not None:
            log.info("egress refused: %s:%s: %s", host, port, why)
            await _answer(writer, 403, why)
            return None
        last: OSError | None = None
        for address in addresses:  # the addresses just checked, never a second lookup
            try:
                async with asyncio.timeout(_CONNECT_TIMEOUT_S):
                    return await asyncio.open_connection(str(address), port)
            except (OSError, TimeoutError) as exc:
                last = exc if isinstance(exc, OSError) else OSError(str(exc) or "timed out")
        await _answer(writer, 502, f"cannot connect to {host}:{port}: {last}")
        return None


async def _answer(writer: asyncio.StreamWriter, code: int, why: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[code]
    body = f"armature egress proxy: {why}\n".encode()
    writer.write(
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while chunk := await src.read(65_536):
            dst.write(chunk)
            await dst.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()


async def _splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        up_writer.close()


_starting = threading.Lock()


@functools.cache
def _the_proxy() -> EgressProxy:
    return EgressProxy()


def egress_proxy() -> EgressProxy:
    """This process's egress proxy, started on first use (its policy read from the
    environment then); its socket's directory is removed when the process exits."""
    with _starting:
        return _the_proxy()


#: What programs print when they cannot resolve a name or reach an address.
_NETWORK_TROUBLE = re.compile(
    r"could not resolve|temporary failure in name resolution|name or service not known|"
    r"nodename nor servname|getaddrinfo|network is unreachable|no route to host|"
    r"connection refused|failed to connect|unable to connect|could not connect|"
    r"cannot connect|connect(ion)? timed out|name resolution|no address associated|"
    r"proxy|tunnel failed|\b403\b.*forbidden",
    re.IGNORECASE,
)


def network_hint(stderr: str, stdout: str, *, granted: bool, box: Sandbox) -> str | None:
    """A hint for a program that failed the way programs without a network fail, or None."""
    if not box.isolated or not _NETWORK_TROUBLE.search(f"{stderr}\n{stdout}"):
        return None
    loopback = (
        "the worker's loopback and its services (Temporal, the store, the run API) are never "
        "reachable from a tool program: its 127.0.0.1 is its own; to call an HTTP service use "
        "the http_request tool with http_allow_hosts"
    )
    if granted:
        return (
            "this call has network only through the egress proxy (HTTP_PROXY/HTTPS_PROXY are "
            "set; raw sockets, UDP and the program's own DNS lookups do not get out), which "
            f"refuses loopback, link-local and private addresses; {loopback}"
        )
    return (
        "tool programs have no network unless the spec grants it: `sandbox: {allow_network: "
        "true}` for the whole spec, or `network: true` on this stage; " + loopback
    )
