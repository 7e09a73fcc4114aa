"""The run API's authorizer over the token store: ``Authorization: Bearer <token>``.

The server is *open* — every request is the :data:`~.principal.LOOPBACK` principal — only when
it listens on loopback and no active token exists. That is re-checked at most every
:data:`OPEN_RECHECK_S` seconds, so creating the first token (``armature tokens create``)
closes a running server within about a second, without a restart; revoking the last one opens
it again. Once closed, a request without a valid token is 401 and one whose token lacks the
scope is 403 (``deps.require``).

Token look-ups are cached for :data:`TOKEN_CACHE_S` seconds per token, so a revoked token is
refused within that time; the store reads are single indexed rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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

    def authenticate(self, request: Request) -> Principal:
        token = bearer_token(request)
        if token is None:
            if self.open:
                return LOOPBACK
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
