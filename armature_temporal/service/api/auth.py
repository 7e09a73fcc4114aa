"""The run API's authorizer over the token store: ``Authorization: Bearer <token>``.

The server is *open* — every request is the :data:`~.principal.LOOPBACK` principal — only when
it listens on loopback and no active token exists. That is re-checked at most every
:data:`OPEN_RECHECK_S` seconds, so creating the first token (``armature tokens create``)
closes a running server within about a second, without a restart; revoking the last one opens
it again. Once closed, a request without a valid token is 401 and one whose token lacks the
scope is 403 (``deps.require``).

An open server still refuses what a web page could send it from elsewhere: a request whose
``Host`` is not a loopback name (DNS rebinding: a page on ``evil.example`` whose name now
resolves to 127.0.0.1 sends ``Host: evil.example``) or whose ``Origin`` is not a loopback
origin (a page on another site posting to ``http://127.0.0.1:8787``) is 403 ``cross_site``:
without a token, only programs and pages on this machine are answered.

Token look-ups are cached for :data:`TOKEN_CACHE_S` seconds per token, so a revoked token is
refused within that time; the store reads are single indexed rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from armature_temporal.service.api.errors import ApiError
from armature_temporal.service.api.principal import LOOPBACK, Principal

if TYPE_CHECKING:
    from starlette.requests import Request

    from armature_temporal.store.tokens import TokenStore

__all__ = [
    "OPEN_RECHECK_S",
    "TOKEN_CACHE_S",
    "TokenAuthorizer",
    "bearer_token",
    "cross_site",
    "is_loopback_host",
]

#: How long the "no active token" answer (open or closed) is trusted.
OPEN_RECHECK_S = 1.0
#: How long one token's principal (or its refusal) is trusted.
TOKEN_CACHE_S = 1.0
_MAX_CACHED = 1024

_HOW = (
    "send `Authorization: Bearer <token>`; create a token with `armature tokens create NAME "
    "--scope read --scope run` (it is shown once)"
)


def is_loopback_host(host: str) -> bool:
    """True when listening on ``host`` reaches this machine only (``localhost``, 127/8, ::1)."""
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_name(hostport: str) -> bool:
    """Whether a ``Host`` value (``name[:port]``, ``[v6]:port``) names this machine."""
    host = hostport.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host == "localhost" or host.endswith(".localhost") or is_loopback_host(host)


def cross_site(request: Request) -> str | None:
    """Why a token-less request may come from a page elsewhere (its Host or Origin is not
    this machine), or None when both are loopback (or absent, as from a non-browser)."""
    host = request.headers.get("host")
    if host is not None and not _loopback_name(host):
        return f"its Host header is {host!r}, not this machine's loopback name"
    origin = request.headers.get("origin")
    if origin is not None:
        from urllib.parse import urlsplit

        where = urlsplit(origin).netloc
        if origin == "null" or not where or not _loopback_name(where):
            return f"it comes from a page at {origin!r}, not from this machine"
    return None


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class TokenAuthorizer:
    """:class:`~.principal.Authorizer` over ``store``'s tokens. ``loopback``: the server
    listens on loopback only (an open server is possible); ``clock`` is for tests."""

    def __init__(
        self,
        store: TokenStore,
        *,
        loopback: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._loopback = loopback
        self._clock = clock
        self._open: tuple[float, bool] | None = None
        self._tokens: dict[str, tuple[float, Principal | None]] = {}

    @property
    def open(self) -> bool:
        """True while requests need no token: loopback, and no active token exists."""
        if not self._loopback:
            return False
        now = self._clock()
        if self._open is None or now - self._open[0] >= OPEN_RECHECK_S:
            self._open = (now, self._store.active_token_count() == 0)
        return self._open[1]

    def from_token(self, token: str) -> Principal | None:
        now = self._clock()
        cached = self._tokens.get(token)
        if cached is not None and now - cached[0] < TOKEN_CACHE_S:
            return cached[1]
        principal = self._store.principal_for(token)
        if len(self._tokens) >= _MAX_CACHED:
            self._tokens.clear()
        self._tokens[token] = (now, principal)
        return principal

    def still_valid(self, credentials: Collection[str | None]) -> set[str | None]:
        """Those of ``credentials`` that are let in now, from the store (one query for the
        tokens, one count for the open server); the caches learn the answer too."""
        tokens = [c for c in credentials if c is not None]
        valid: set[str | None] = set(self._store.active_tokens(tokens)) if tokens else set()
        now = self._clock()
        for token in tokens:
            if token not in valid:
                self._tokens[token] = (now, None)
        if None in credentials:
            self._open = None  # re-read below
            if self.open:
                valid.add(None)
        return valid

    def authenticate(self, request: Request) -> Principal:
        token = bearer_token(request)
        if token is None:
            if self.open:
                why = cross_site(request)
                if why is None:
                    return LOOPBACK
                raise ApiError(
                    403,
                    "cross_site",
                    f"{request.method} {request.url.path} came without a token and {why}; an "
                    "open loopback server answers only programs and pages on this machine",
                    f"open it as http://127.0.0.1:<port>, or {_HOW}",
                )
            raise ApiError(
                401,
                "unauthorized",
                f"{request.method} {request.url.path} needs an API token and the request "
                "carries none",
                _HOW,
                headers={"WWW-Authenticate": "Bearer"},
            )
        principal = self.from_token(token)
        if principal is None:
            shown = token[:8] + "..." if len(token) > 8 else "(short)"
            raise ApiError(
                401,
                "unauthorized",
                f"the API token {shown} is unknown, revoked or malformed (tokens look like "
                "arm_ and 43 URL-safe characters)",
                "check the token, or create a new one with `armature tokens create NAME "
                "--scope ...`; `armature tokens list` shows which exist and which are revoked",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return principal
