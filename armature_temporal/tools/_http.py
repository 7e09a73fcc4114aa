"""The ``http_request`` tool: one HTTP request to a host the context allows.

The allow-list (:attr:`ToolContext.http_allow_hosts`) holds host names, matched exactly and
case-insensitively on any port, or ``*.example.com`` for the subdomains of example.com. An
empty list allows nothing. Redirects are followed by hand (at most :data:`MAX_REDIRECTS`), each
target checked against the allow-list before it is contacted.

Addresses are checked too, as for a granted tool program's network
(:func:`~armature_temporal.tools._egress.refusal`): a name, or a name matched by a ``*.``
entry, that resolves to a loopback, link-local (cloud metadata), private or reserved address,
to this machine or to one of the worker's services is refused, unless its network is listed in
``ARMATURE_EGRESS_ALLOW_PRIVATE`` (private networks only; loopback, link-local and the services
never). What the spec writes as an address (``127.0.0.1``, ``10.0.0.5``, ``[::1]``) or as
``localhost`` is reached as written: the spec's author named that machine. Each connection
resolves its name once and connects to an address it checked
(:mod:`~armature_temporal.tools._pinned`), so a name whose DNS answer changes after a check
(DNS rebinding) cannot reach what the check refused. No proxy from the environment is used.

An outbound request is an action: it can change something where it lands, and any request,
a GET too, carries data out in its URL. So a call's reversibility is ``none`` unless the spec
marks its host and method safe (``http_safe``, :attr:`ToolContext.http_safe`; see
:func:`marked_safe`): then ``full``, and a verification run may make it. A redirect of such a
call must land on a host and method marked safe too, or it is refused.

The model may not set the headers that decide where a request goes or how it is framed
(:data:`FORBIDDEN_HEADERS`, and every ``Proxy-*``): ``Host`` would reach another virtual host
behind an allowed name, the framing ones smuggle requests, a method override turns a GET
marked safe into a DELETE. A redirect to another origin (scheme, host
or port) carries only :data:`CROSS_ORIGIN_HEADERS` of the model's headers, so an ``X-Api-Key``
meant for one service never reaches another. The body is decoded (gzip or deflate, the codings
the tool asks for) a bounded piece at a time and never past the output cap, so a small
compressed body cannot expand into memory; ``truncated`` says the cap was reached.
"""

from __future__ import annotations

import asyncio
import ipaddress
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

import httpx
from pydantic import Field

from armature_temporal.tools._base import ToolArgs, ToolImpl, builtin_spec, typed_run
from armature_temporal.tools._errors import ToolFailure
from armature_temporal.tools._models import Reversibility, ToolContext

__all__ = [
    "CROSS_ORIGIN_HEADERS",
    "FORBIDDEN_HEADERS",
    "HTTP_TOOL",
    "MAX_REDIRECTS",
    "host_allowed",
    "marked_safe",
]

MAX_REDIRECTS = 5

_HOP_BY_HOP = "hop-by-hop (it is about this one connection, which the tool manages)"
_FRAMING = "the tool frames the request from its body; a second framing smuggles requests"
_PROXY = (
    "it speaks for a proxy, and can change how one in front of the server routes or trusts the "
    "request"
)
_REWRITE = "it rewrites the path some servers route on, past the URL given"
_OVERRIDE = (
    "it changes the method the server acts on (a GET acting as a DELETE), which safety rules "
    "judge by the method given"
)
#: Headers the model may not set, each with why (every ``Proxy-*`` header too).
FORBIDDEN_HEADERS: Mapping[str, str] = {
    "host": "the host comes from the URL, which is what the allow-list checks",
    "connection": _HOP_BY_HOP,
    "keep-alive": _HOP_BY_HOP,
    "te": _HOP_BY_HOP,
    "trailer": _HOP_BY_HOP,
    "upgrade": _HOP_BY_HOP,
    "transfer-encoding": _FRAMING,
    "content-length": _FRAMING,
    "expect": _FRAMING,
    "accept-encoding": "the tool asks for the codings it can decode within its output cap",
    "forwarded": _PROXY,
    "x-forwarded-for": _PROXY,
    "x-forwarded-host": _PROXY,
    "x-forwarded-proto": _PROXY,
    "x-real-ip": _PROXY,
    "x-original-url": _REWRITE,
    "x-rewrite-url": _REWRITE,
    "x-http-method-override": _OVERRIDE,
    "x-http-method": _OVERRIDE,
    "x-method-override": _OVERRIDE,
}
#: The model's headers a redirect to another origin keeps: they describe the content wanted or
#: sent, never who is asking. Authorization, cookies and API-key headers stay behind.
CROSS_ORIGIN_HEADERS: frozenset[str] = frozenset(
    {
        "accept",
        "accept-language",
        "cache-control",
        "content-language",
        "content-type",
        "pragma",
        "user-agent",
    }
)
#: Headers the client itself sets on every request (the model cannot: see FORBIDDEN_HEADERS).
_CLIENT_HEADERS = frozenset(
    {"host", "accept-encoding", "connection", "content-length", "transfer-encoding"}
)
#: The codings the tool asks for and decodes with a bound.
_CODINGS = "gzip, deflate"

Method = Literal["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"]


class HttpRequestArgs(ToolArgs):
    url: str = Field(..., min_length=1, description="http(s) URL on an allowed host.")
    method: Method = Field("GET", description="HTTP method.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Request headers. Host, Connection, Content-Length, Transfer-Encoding, "
        "Accept-Encoding, Proxy-* and other routing headers are refused (the tool sets them); "
        "a redirect to another origin keeps only Accept, Content-Type and the like.",
    )
    body: str | dict[str, Any] | list[Any] | None = Field(
        None, description="Request body: a string is sent as is, an object or array as JSON."
    )
    timeout_s: float | None = Field(
        None, gt=0, description="Seconds for the whole request (capped by the worker)."
    )


def host_allowed(host: str, allow: tuple[str, ...]) -> bool:
    """Whether ``host`` is on the allow-list (exact names, or ``*.domain`` for subdomains)."""
    host = host.lower().rstrip(".")
    for entry in allow:
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and host != entry[2:]:
                return True
        elif host == entry:
            return True
    return False


def marked_safe(method: str, url: str, safe: tuple[tuple[str, tuple[str, ...]], ...]) -> bool:
    """Whether the spec marks a ``method`` request to ``url``'s host safe (``safe``: its
    ``(host, methods)`` pairs; hosts match as in :func:`host_allowed`)."""
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL:
        return False
    method = method.upper()
    return bool(host) and any(
        method in methods and host_allowed(host, (entry,)) for entry, methods in safe
    )


def _check_url(url: httpx.URL, ctx: ToolContext) -> None:
    if url.scheme not in ("http", "https"):
        raise ToolFailure("invalid_args", f"URL {str(url)!r}: only http and https are allowed")
    if not url.host:
        raise ToolFailure("invalid_args", f"URL {str(url)!r} has no host")
    if not ctx.http_allow_hosts:
        raise ToolFailure(
            "policy_blocked",
            f"host {url.host!r} is not allowed: this worker allows no hosts; add it to the "
            "tool context's http_allow_hosts",
        )
    if not host_allowed(url.host, ctx.http_allow_hosts):
        raise ToolFailure(
            "policy_blocked",
            f"host {url.host!r} is not allowed; allowed hosts: {list(ctx.http_allow_hosts)}",
        )


def _named_literally(host: str, allow: tuple[str, ...]) -> bool:
    """Whether the allow-list names ``host`` as an address or as ``localhost``, exactly."""
    name = host.strip("[]").lower().rstrip(".")
    if name != "localhost":
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
    return any(entry.strip("[]").lower().rstrip(".") == name for entry in allow)


def _address_check(
    ctx: ToolContext, refused: list[str]
) -> Callable[[str, int, set[Any]], str | None]:
    """The check every connection of a call passes (see the module's docstring); each refusal's
    reason is appended to ``refused``."""
    from armature_temporal.tools._egress import EgressPolicy, refusal

    policies: list[EgressPolicy] = []

    def check(host: str, port: int, addresses: set[Any]) -> str | None:
        if _named_literally(host, ctx.http_allow_hosts):
            return None
        if not policies:  # here, in the connection's thread: it resolves the services' names
            policies.append(EgressPolicy.from_environment())
        why = refusal(host, port, addresses, policies[0])
        if why is None:
            return None
        why = why.replace("tool programs never reach it", "http_request never reaches it")
        refused.append(
            f"{why}; to reach a machine of your own, list its address in http_allow_hosts"
        )
        return refused[-1]

    return check


def _check_headers(headers: Mapping[str, str]) -> None:
    for name in headers:
        key = name.strip().lower()
        why = FORBIDDEN_HEADERS.get(key)
        if why is None and key.startswith("proxy-"):
            why = "it is meant for a proxy, and this tool uses none"
        if why is not None:
            raise ToolFailure(
                "policy_blocked", f"header {name!r} is not allowed: {why}; remove it from headers"
            )


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default


def _strip_for_other_origin(request: httpx.Request) -> None:
    """Keep only the client's own headers and the content-describing ones."""
    for name in {key.lower() for key in request.headers}:
        if name not in CROSS_ORIGIN_HEADERS and name not in _CLIENT_HEADERS:
            del request.headers[name]


class _BoundedDecoder:
    """Decodes a gzip or deflate body a piece at a time, never past ``limit + 1`` bytes.

    ``zlib``'s ``max_length`` bounds each step's output, so what the body expands to is never
    held beyond the limit, whatever the compression ratio.
    """

    def __init__(self, coding: Literal["gzip", "deflate"], limit: int) -> None:
        self.coding = coding
        self.limit = limit
        self.out = bytearray()
        self._z = self._new()
        self._fresh = True  # the current decompressor has been given nothing that decoded
        self._members = 0  # gzip members (or the deflate stream) decoded to their end
        self._done = False  # what follows the end is ignored

    def _new(self, wbits: int | None = None) -> zlib._Decompress:
        if wbits is None:
            wbits = zlib.MAX_WBITS | 16 if self.coding == "gzip" else zlib.MAX_WBITS
        return zlib.decompressobj(wbits)

    @property
    def over(self) -> bool:
        return len(self.out) > self.limit

    def feed(self, data: bytes) -> None:
        """Decode ``data`` (stops early once over the limit; see :attr:`over`).

        Raises:
            zlib.error: the body is not what its Content-Encoding says.
        """
        while data and not self.over and not self._done:
            try:
                piece = self._z.decompress(data, self.limit + 1 - len(self.out))
            except zlib.error:
                if not self._fresh:
                    raise
                if self._members:  # bytes after the last gzip member: ignored, as by gzip
                    self._done = True
                    return
                if self.coding != "deflate":
                    raise
                self._z = self._new(-zlib.MAX_WBITS)  # deflate sent without its zlib header
                self._fresh = False  # and if that fails too, the body is not deflate
                continue
            self._fresh = False
            self.out += piece
            if self._z.eof:
                self._members += 1
                self._done = self.coding == "deflate"
                data = self._z.unused_data
                self._z, self._fresh = self._new(), True  # another gzip member may follow
            else:
                data = self._z.unconsumed_tail  # non-empty only when over the limit


def _decoder(response: httpx.Response, cap: int) -> _BoundedDecoder | None:
    codings = [
        c.strip().lower()
        for c in response.headers.get("content-encoding", "").split(",")
        if c.strip() and c.strip().lower() != "identity"
    ]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in ("gzip", "x-gzip", "deflate"):
        return _BoundedDecoder("deflate" if codings[0] == "deflate" else "gzip", cap)
    raise ToolFailure(
        "tool_error",
        f"the response from {str(response.url)!r} has Content-Encoding "
        f"{response.headers['content-encoding']!r}; http_request asked for {_CODINGS!r} and "
        "decodes only those (one layer), so it can cap the decoded size",
    )


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """The body, decoded, at most ``cap`` bytes, and whether there was more."""
    decoder = _decoder(response, cap)
    data = bytearray()
    try:
        async for chunk in response.aiter_raw():
            if decoder is not None:
                decoder.feed(chunk)
                if decoder.over:
                    return bytes(decoder.out[:cap]), True
                continue
            data += chunk
            if len(data) > cap:
                return bytes(data[:cap]), True
    except zlib.error as exc:
        raise ToolFailure(
            "tool_error", f"the response body from {str(response.url)!r} does not decode: {exc}"
        ) from exc
    return bytes(decoder.out if decoder is not None else data), False


async def _send(args: HttpRequestArgs, ctx: ToolContext, timeout: float) -> dict[str, Any]:
    try:
        url = httpx.URL(args.url)
    except httpx.InvalidURL as exc:
        raise ToolFailure("invalid_args", f"invalid URL {args.url!r}: {exc}") from exc
    _check_url(url, ctx)
    _check_headers(args.headers)
    body: dict[str, Any] = (
        {"content": args.body}
        if isinstance(args.body, str)
        else {}
        if args.body is None
        else {"json": args.body}
    )
    headers = {**args.headers, "Accept-Encoding": _CODINGS}
    safe = marked_safe(args.method, str(url), ctx.http_safe)
    from armature_temporal.tools._pinned import async_transport

    refused: list[str] = []
    pinned = async_transport(_address_check(ctx, refused))
    async with httpx.AsyncClient(
        follow_redirects=False, timeout=timeout, transport=pinned, trust_env=False
    ) as client:
        request = client.build_request(args.method, url, headers=headers, **body)
        for _ in range(MAX_REDIRECTS + 1):
            try:
                response = await client.send(request, stream=True)
            except httpx.ConnectError:
                if refused:
                    raise ToolFailure(
                        "policy_blocked", f"{request.method} {str(request.url)!r}: {refused[-1]}"
                    ) from None
                raise
            try:
                nxt = response.next_request
                if nxt is None:
                    data, truncated = await _read_capped(response, ctx.output_cap_bytes)
                    return {
                        "status_code": response.status_code,
                        "url": str(response.url),
                        "headers": dict(response.headers),
                        "body": data.decode(response.charset_encoding or "utf-8", "replace"),
                        "truncated": truncated,
                    }
            finally:
                await response.aclose()
            try:
                _check_url(nxt.url, ctx)
            except ToolFailure as exc:
                raise ToolFailure(
                    exc.error_type, f"redirect from {str(response.url)!r} refused: {exc.message}"
                ) from None
            if safe and not marked_safe(nxt.method, str(nxt.url), ctx.http_safe):
                # Let through as safe, it may not become a request nobody marked safe.
                raise ToolFailure(
                    "policy_blocked",
                    f"redirect from {str(response.url)!r} to {nxt.method} {str(nxt.url)!r} "
                    f"refused: the request ran as one http_safe marks safe, and {nxt.url.host!r} "
                    f"with {nxt.method} is not marked safe; add it to http_safe if it is",
                )
            if _origin(nxt.url) != _origin(request.url):
                _strip_for_other_origin(nxt)
            request = nxt
    raise ToolFailure("tool_error", f"more than {MAX_REDIRECTS} redirects from {args.url!r}")


async def _run_http(args: HttpRequestArgs, ctx: ToolContext) -> dict[str, Any]:
    timeout = min(args.timeout_s or ctx.timeout_s, ctx.timeout_s)
    try:
        async with asyncio.timeout(timeout):
            return await _send(args, ctx, timeout)
    except (TimeoutError, httpx.TimeoutException):
        raise ToolFailure(
            "timeout", f"{args.method} {args.url!r} took longer than {timeout:g}s"
        ) from None
    except httpx.HTTPError as exc:
        raise ToolFailure(
            "tool_error", f"{args.method} {args.url!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _reversibility(args: Mapping[str, Any], ctx: ToolContext | None) -> Reversibility:
    """``none``: an outbound request acts; ``full`` where the spec marks it safe."""
    method, url = args.get("method", "GET"), args.get("url")
    if ctx is None or not isinstance(method, str) or not isinstance(url, str):
        return "none"
    return "full" if marked_safe(method, url, ctx.http_safe) else "none"


HTTP_TOOL = ToolImpl(
    spec=builtin_spec(
        "http_request",
        "Make an HTTP request to an allowed host. Returns status_code, url, headers, body "
        "(capped, see truncated).",
        HttpRequestArgs,
        "none",
    ),
    args_model=HttpRequestArgs,
    run=typed_run(HttpRequestArgs, _run_http),
    reversibility_of=_reversibility,
)
