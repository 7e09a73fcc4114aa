"""The run API's open event streams: how many, whose, and ending them when their token is
revoked.

A stream is long-lived by design, so it is capped twice: at most ``per_token`` open at once
for one caller (a token's name; every caller of an open loopback server is ``loopback``),
and ``max_streams`` for the whole server. One more is refused at once, 429 ``too_many_streams``
naming the cap and how to raise it, and its connection closes. Capacity for everything else is
kept apart (:mod:`~armature_temporal.service.admission`), so a full set of streams never
keeps anyone from ``/health``, a gate decision or the inbox's login.

While any stream is open, a watcher asks the authorizer every :data:`RECHECK_S` seconds —
afresh, not from its cache — whether the credentials each stream was opened with still hold,
and ends the streams of a revoked token (or, on an open server, of the loopback callers once
the first token exists): within a second of ``armature tokens revoke``, from any process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from armature_temporal.service.admission import DEFAULT_MAX_STREAMS, DEFAULT_STREAMS_PER_TOKEN
from armature_temporal.service.api.errors import ApiError
from armature_temporal.service.api.principal import Authorizer, Principal

__all__ = ["RECHECK_S", "StreamLease", "StreamSlots"]

#: How often the credentials of open streams are checked again, in seconds.
RECHECK_S = 0.25

_log = logging.getLogger(__name__)


@dataclass(eq=False)
class StreamLease:
    """One open stream: whose, with which credentials, and the event set when it must end."""

    principal: Principal
    credential: str | None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    why: str = ""


class StreamSlots:
    """The open streams of one server (kept on its ``ServiceState``)."""

    def __init__(
        self,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        per_token: int = DEFAULT_STREAMS_PER_TOKEN,
    ) -> None:
        self.max_streams = max_streams
        self.per_token = per_token
        self._open: list[StreamLease] = []
        self._watcher: asyncio.Task[None] | None = None

    def open_count(self, name: str | None = None) -> int:
        """Streams open now (all, or ``name``'s)."""
        return sum(1 for lease in self._open if name is None or lease.principal.name == name)

    def acquire(
        self, principal: Principal, credential: str | None, auth: Authorizer
    ) -> StreamLease:
        """A slot for one stream of ``principal`` (opened with ``credential``: its token,
        or None on an open server), held until :meth:`release`.

        Raises:
            ApiError: 429 ``too_many_streams`` when ``principal`` or the server is at its cap.
        """
        mine = self.open_count(principal.name)
        if mine >= self.per_token:
            raise _too_many(
                f"token {principal.name!r} has {mine} event streams open, the most one token "
                f"may hold ({self.per_token})",
                "close a stream you no longer read, or raise the cap: `armature serve "
                "--max-streams-per-token N`",
            )
        if len(self._open) >= self.max_streams:
            raise _too_many(
                f"this server has {len(self._open)} event streams open, the most it holds "
                f"({self.max_streams})",
                "retry in a while, or raise the cap: `armature serve --max-streams N`",
            )
        held = StreamLease(principal, credential)
        self._open.append(held)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(
                self._watch(auth), name="stream credentials"
            )
        return held

    def release(self, held: StreamLease) -> None:
        """Free ``held``'s slot (again is harmless)."""
        with contextlib.suppress(ValueError):
            self._open.remove(held)

    async def _watch(self, auth: Authorizer) -> None:
        """End the streams whose credentials no longer hold; stops when none is open."""
        while self._open:
            await asyncio.sleep(RECHECK_S)
            leases = [lease for lease in self._open if not lease.ended.is_set()]
            if not leases:
                continue
            try:  # the store's query in a thread: the event loop keeps serving
                valid = await asyncio.to_thread(
                    auth.still_valid, {lease.credential for lease in leases}
                )
            except Exception as exc:  # the store is down: nobody can revoke either; retry
                _log.warning("could not re-check the event streams' tokens: %s", exc)
                continue
            for lease in leases:
                if lease.credential not in valid:
                    lease.why = (
                        f"the token {lease.principal.name!r} was revoked"
                        if lease.credential is not None
                        else "this server now requires a token (one was created)"
                    )
                    lease.ended.set()


def _too_many(message: str, fix: str) -> ApiError:
    return ApiError(
        429,
        "too_many_streams",
        message,
        fix,
        headers={"Retry-After": "5", "Connection": "close"},
    )
