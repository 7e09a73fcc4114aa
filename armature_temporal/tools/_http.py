"""The ``http_request`` tool: one HTTP request to a host the context allows.

The allow-list (:attr:`ToolContext.http_allow_hosts`) holds host names, matched exactly and
case-insensitively on any port, or ``*.example.com`` for the subdomains of example.com. An
empty list allows nothing. Redirects are followed by hand (at most :data:`MAX_REDIRECTS`), each
target checked against the allow-list before it is contacted. The allow-list is checked on
names, not addresses: a name that resolves to an internal address is reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Literal

import httpx
from pydantic import Field

from armature_temporal.tools._base import ToolArgs, ToolImpl, builtin_spec, typed_run
from armature_temporal.tools._errors import ToolFailure
from armature_temporal.tools._models import Reversibility, ToolContext

__all__ = ["HTTP_TOOL", "MAX_REDIRECTS", "SAFE_METHODS", "host_allowed"]

MAX_REDIRECTS = 5
#: Methods that change nothing on the server (RFC 9110): their calls are fully reversible.
SAFE_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS"})

Method = Literal["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"]


class HttpRequestArgs(ToolArgs):
    url: str = Field(..., min_length=1, description="http(s) URL on an allowed host.")
    method: Method = Field("GET", description="HTTP method.")
    headers: dict[str, str] = Field(default_factory=dict, description="Request headers.")
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


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > cap:
            return bytes(data[:cap]), True
    return bytes(data), False


async def _send(args: HttpRequestArgs, ctx: ToolContext, timeout: float) -> dict[str, Any]:
    try:
        url = httpx.URL(args.url)
    except httpx.InvalidURL as exc:
        raise ToolFailure("invalid_args", f"invalid URL {args.url!r}: {exc}") from exc
    _check_url(url, ctx)
    body: dict[str, Any] = (
        {"content": args.body}
        if isinstance(args.body, str)
        else {}
        if args.body is None
        else {"json": args.body}
    )
    async with httpx.AsyncClient(follow_redirects=False, timeout=timeout) as client:
        request = client.build_request(args.method, url, headers=args.headers, **body)
        for _ in range(MAX_REDIRECTS + 1):
            response = await client.send(request, stream=True)
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


def _reversibility(args: Mapping[str, Any]) -> Reversibility:
    method = args.get("method", "GET")
    return "full" if isinstance(method, str) and method.upper() in SAFE_METHODS else "partial"


HTTP_TOOL = ToolImpl(
    spec=builtin_spec(
        "http_request",
        "Make an HTTP request to an allowed host. Returns status_code, url, headers, body "
        "(capped, see truncated).",
        HttpRequestArgs,
        "partial",
    ),
    args_model=HttpRequestArgs,
    run=typed_run(HttpRequestArgs, _run_http),
    reversibility_of=_reversibility,
)
