"""Who is asking: a :class:`Principal` (a named API token, or the open loopback server) and
the scopes a token may hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, get_args

if TYPE_CHECKING:
    from collections.abc import Collection

    from starlette.requests import Request

__all__ = ["LOOPBACK", "SCOPES", "Authorizer", "Principal", "Scope"]

#: ``read``: specs, runs, events, gates. ``run``: start and cancel runs. ``approve``: decide
#: gates. ``admin``: everything.
Scope = Literal["read", "run", "approve", "admin"]
SCOPES: tuple[str, ...] = get_args(Scope)


@dataclass(frozen=True)
class Principal:
    """The caller a request was authenticated as. ``name`` is what decisions record (the
    token's name, or ``loopback`` on a server that has no tokens yet)."""

    name: str
    scopes: frozenset[str]
    via: Literal["token", "loopback"] = "token"

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes


#: The caller on a loopback server while no token exists: every scope, with a warning at start.
LOOPBACK = Principal("loopback", frozenset(SCOPES), via="loopback")


class Authorizer(Protocol):
    """What the routes check a request against (``service.api.auth`` implements it over the
    token store; tests use a ``fake_*`` one)."""

    def authenticate(self, request: Request) -> Principal:
        """The caller of ``request`` (``Authorization: Bearer <token>``, or :data:`LOOPBACK`
        on an open loopback server). Raises :class:`~.errors.ApiError` (401) otherwise."""
        ...

    def from_token(self, token: str) -> Principal | None:
        """The principal a plain token stands for; None when unknown or revoked."""
        ...

    @property
    def open(self) -> bool:
        """True while requests need no token (loopback, and no token exists)."""
        ...

    def still_valid(self, credentials: Collection[str | None]) -> set[str | None]:
        """Of ``credentials`` (tokens, or None for a request let in by the open server),
        those that would be let in now, checked afresh (no cache): what ends a revoked
        token's open event streams within a second."""
        ...
