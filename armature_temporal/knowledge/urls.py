"""Web pages as knowledge sources, fetched only through the spec's HTTP policy.

A ``knowledge.sources`` entry that is an ``http(s)://`` URL is fetched when the spec's
documents are indexed (``armature submit``, an enrichment round's trial): its host must be on
the spec's ``http_allow_hosts`` (as for the ``http_request`` tool), and the address it resolves
to must be one a granted tool program may reach (no loopback, link-local, private network
unless ``ARMATURE_EGRESS_ALLOW_PRIVATE`` lists it, none of Armature's own services). Every
redirect hop is checked the same way; the body is read up to :data:`MAX_BYTES` and must be
text (HTML is reduced to its text). A page that fails any of this is reported with the reason,
like an unreadable file, and the rest are indexed. The page's name in references is its URL.

The connection itself goes through a transport that resolves the name once more, checks
every address again and connects to one of those same addresses
(:mod:`armature_temporal.tools._pinned`): a name whose answer changes between the check above
and the connection (DNS rebinding) is refused, never reached.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Sequence
from typing import Any

import httpx

from armature_temporal.knowledge.chunking import html_text
from armature_temporal.knowledge.sources import Document, Unreadable

__all__ = ["MAX_BYTES", "MAX_REDIRECTS", "TIMEOUT_S", "fetch_page", "is_url"]

MAX_BYTES = 5_000_000
MAX_REDIRECTS = 5
TIMEOUT_S = 20.0
_TEXT_TYPES = ("text/", "application/xhtml+xml", "application/xml", "application/json")


def is_url(source: str) -> bool:
    """Whether a source names a web page rather than a file."""
    return source.lower().startswith(("http://", "https://"))


def _address_refusal(host: str, port: int, addresses: set[Any], policy: Any) -> str | None:
    from armature_temporal.tools._egress import refusal

    why = refusal(host, port, addresses, policy)
    if why is None:
        return None
    return why.replace("tool programs never reach it", "knowledge is never fetched from it")


def _refused(url: httpx.URL, allow_hosts: Sequence[str], policy: Any) -> str | None:
    from armature_temporal.tools._http import host_allowed

    if url.scheme not in ("http", "https") or not url.host:
        return "only http and https URLs with a host can be indexed"
    if not allow_hosts or not host_allowed(url.host, tuple(allow_hosts)):
        return (
            f"host {url.host!r} is not in the spec's http_allow_hosts {list(allow_hosts)}; "
            "list it there to index pages from it"
        )
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses: set[Any] = set()
    with contextlib.suppress(OSError, UnicodeError):
        addresses = {
            ipaddress.ip_address(str(info[4][0]).split("%")[0])
            for info in socket.getaddrinfo(url.host, port, type=socket.SOCK_STREAM)
        }
    if not addresses:
        return f"host {url.host!r} does not resolve"
    return _address_refusal(url.host, port, addresses, policy)


def fetch_page(
    source: str,
    allow_hosts: Sequence[str],
    *,
    policy: Any = None,
    transport: httpx.BaseTransport | None = None,
) -> Document | Unreadable:
    """The page's text, or why it cannot be indexed. ``policy``: the egress policy (default:
    the environment's, as for tool programs). ``transport``: for tests; by default every
    connection is checked again as it is made (see the module's docstring)."""
    from armature_temporal.tools._egress import EgressPolicy
    from armature_temporal.tools._pinned import transport as pinned

    policy = policy or EgressPolicy.from_environment()
    if transport is None:
        transport = pinned(lambda host, port, found: _address_refusal(host, port, found, policy))
    try:
        url = httpx.URL(source)
    except httpx.InvalidURL as exc:
        return Unreadable(source, f"not a valid URL: {exc}")
    with httpx.Client(
        timeout=TIMEOUT_S, follow_redirects=False, transport=transport, trust_env=False
    ) as client:
        for _ in range(MAX_REDIRECTS + 1):
            if (why := _refused(url, allow_hosts, policy)) is not None:
                return Unreadable(source, why if str(url) == source else f"redirected: {why}")
            try:
                headers = {"Accept": "text/*", "Accept-Encoding": "identity"}  # no bombs
                with client.stream("GET", url, headers=headers) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = url.join(response.headers["location"])
                        continue
                    return _read(source, response)
            except httpx.HTTPError as exc:
                return Unreadable(source, f"fetch failed: {type(exc).__name__}: {exc}")
    return Unreadable(source, f"more than {MAX_REDIRECTS} redirects")


def _read(source: str, response: httpx.Response) -> Document | Unreadable:
    if response.status_code != 200:
        return Unreadable(source, f"HTTP {response.status_code}")
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding not in ("", "identity"):  # asked for identity: a compressed body is refused
        return Unreadable(source, f"content-encoding {coding!r}; only identity is read")
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind and not kind.startswith(_TEXT_TYPES):
        return Unreadable(source, f"content-type {kind!r}, not text")
    body = bytearray()
    for piece in response.iter_raw():  # as sent: nothing decompressed past the bound
        body += piece
        if len(body) > MAX_BYTES:
            return Unreadable(source, f"more than {MAX_BYTES:,} bytes")
    try:
        text = bytes(body).decode(response.encoding or "utf-8")
    except (UnicodeDecodeError, LookupError) as exc:
        return Unreadable(source, f"not text in its declared encoding ({exc})")
    if kind in ("text/html", "application/xhtml+xml") or "<html" in text[:1000].lower():
        text = html_text(text)
    if not text.strip():
        return Unreadable(source, "empty")
    return Document(source, text)
