"""The approval inbox's browser sessions: who a ``/ui`` cookie stands for, and the CSRF token
every form posts back.

A session is a random id in an ``HttpOnly``, ``SameSite=Strict`` cookie; the server keeps
what it stands for (the token logged in with, re-checked against the authorizer on every
request, so a revoked token logs its sessions out). The CSRF token is an HMAC of the session id
under a key made when the server starts: a form from another site cannot know it, and it dies
with the session. Sessions live in the server's memory: a restart logs everyone out, which
is the safe direction.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from armature_temporal.service.api.principal import LOOPBACK, Authorizer, Principal

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["COOKIE", "UiSession", "UiSessions", "same_origin"]

#: The session cookie's name (path ``/ui``).
COOKIE = "armature_ui"


@dataclass(frozen=True)
class UiSession:
    """``anonymous``: a login form's session (it may post only the login); ``token``: logged
    in with ``token``; ``open``: a browser on an open loopback server (no token exists)."""

    sid: str
    kind: Literal["anonymous", "token", "open"]
    token: str | None
    created: float


class UiSessions:
    """The sessions of one server. ``max_sessions`` bounds memory (the oldest go first: each
    visit to the login page without a cookie makes one)."""

    def __init__(
        self,
        *,
        key: bytes | None = None,
        max_age_s: float = 12 * 3600,
        max_sessions: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._key = key or secrets.token_bytes(32)
        self._max_age_s = max_age_s
        self._max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, UiSession] = OrderedDict()
        self._notes: dict[str, str] = {}

    def new(
        self, kind: Literal["anonymous", "token", "open"], token: str | None = None
    ) -> UiSession:
        session = UiSession(secrets.token_urlsafe(32), kind, token, self._clock())
        self._sessions[session.sid] = session
        while len(self._sessions) > self._max_sessions:
            self.drop(next(iter(self._sessions)))
        return session

    def get(self, sid: str | None) -> UiSession | None:
        """The live session ``sid`` names; None when unknown or expired."""
        if not sid:
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        if self._clock() - session.created > self._max_age_s:
            del self._sessions[sid]
            return None
        return session

    def of(self, request: Request) -> UiSession | None:
        return self.get(request.cookies.get(COOKIE))

    def drop(self, sid: str) -> None:
        self._sessions.pop(sid, None)
        self._notes.pop(sid, None)

    def note(self, session: UiSession, text: str) -> None:
        """A line for the session's next page ("RUN approve_reply: approved"), kept here rather
        than in the redirect's URL so a link cannot put words on the inbox."""
        self._notes[session.sid] = text

    def take_note(self, session: UiSession) -> str | None:
        return self._notes.pop(session.sid, None)

    def csrf(self, session: UiSession) -> str:
        """The CSRF token of ``session``'s forms."""
        return hmac.new(self._key, f"csrf:{session.sid}".encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: UiSession, value: str | None) -> bool:
        return bool(value) and hmac.compare_digest(self.csrf(session), value or "")

    @staticmethod
    def principal(session: UiSession, auth: Authorizer) -> Principal | None:
        """Who ``session`` acts as now: its token's principal (None once revoked), or
        :data:`LOOPBACK` while the server is still open; None for a login form's session."""
        if session.kind == "token" and session.token is not None:
            return auth.from_token(session.token)
        if session.kind == "open":
            return LOOPBACK if auth.open else None
        return None


def same_origin(request: Request) -> bool:
    """False when the request names another site in ``Origin`` (or, without it, ``Referer``);
    True when it names this one or neither header is sent (the CSRF token still decides)."""
    own = f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}".lower()
    origin = request.headers.get("origin")
    if origin is not None:
        return origin.lower().rstrip("/") == own
    referer = request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}".lower() == own
    return True
