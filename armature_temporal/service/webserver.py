"""The HTTP server under ``armature serve`` and ``armature watch``: uvicorn with deadlines.

uvicorn alone waits as long as a client likes for a request's headers (it has no header
timeout) and an app reads a body as slowly as it is sent, so a few slow clients ("slow
loris") hold connections open for good. Here:

- a connection must deliver a request's headers within ``request_timeout_s`` of opening (or
  of its previous response), or it is closed; the app then gives the body the same time
  (``webhooks.create_app``'s ``body_timeout_s``) and answers 408;
- requests are admitted by class (:mod:`~armature_temporal.service.admission`): at most
  ``max_concurrency`` ordinary requests at once (503 ``busy`` beyond), ``reserved`` more for
  health, gate decisions and the inbox's login, and the event streams on their own budget
  (``max_streams``, capped by the route), so one kind of traffic never takes another's;
- the connections are capped at the sum of those budgets (503 beyond); a new connection that
  finds the server full closes idle keep-alive connections first, so idle clients hold no
  capacity;
- idle keep-alive connections close after ``keep_alive_s``; headers are capped at 16 KiB.

Needs the ``serve`` extra (uvicorn); imported only by the commands that serve.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from armature_temporal.service.admission import DEFAULT_MAX_STREAMS, DEFAULT_RESERVED, Admission

__all__ = ["ServerLimits", "server_config"]

#: The largest request head (request line and headers) a client may send.
MAX_HEADER_BYTES = 16 * 1024


@dataclass(frozen=True)
class ServerLimits:
    """How long and how many: the server's defences against slow or numerous clients.

    ``max_concurrency`` ordinary requests, ``reserved`` more for the priority ones and
    ``max_streams`` event streams: :attr:`max_connections` is their sum."""

    request_timeout_s: float = 10.0
    max_concurrency: int = 64
    keep_alive_s: int = 5
    max_streams: int = DEFAULT_MAX_STREAMS
    reserved: int = DEFAULT_RESERVED

    @property
    def max_connections(self) -> int:
        return self.max_concurrency + self.reserved + self.max_streams


class _HeaderDeadline(H11Protocol):
    """h11 with a deadline for each request's headers (``request_timeout_s`` on the class)."""

    request_timeout_s: float = ServerLimits.request_timeout_s
    #: Past this many connections, a new one closes idle keep-alive connections first.
    reclaim_above: int = ServerLimits().max_concurrency + ServerLimits().max_streams
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        if len(self.connections) > self.reclaim_above:
            self._reclaim_idle(len(self.connections) - self.reclaim_above)

    def _reclaim_idle(self, wanted: int) -> None:
        """Close up to ``wanted`` keep-alive connections that wait between requests (their
        last answer sent, no new request begun): idle clients must not hold the capacity a
        new request needs. uvicorn's ``shutdown`` closes only a connection that is idle."""
        for other in list(self.connections):
            if wanted <= 0:
                return
            if (
                other is not self
                and isinstance(other, H11Protocol)
                and other.cycle is not None
                and other.cycle.response_complete
                and other.conn.their_state is h11.IDLE
            ):
                other.shutdown()
                wanted -= 1

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the request's head is in
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's head gets the same time

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.request_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.warning(
                "closed a connection whose request headers took over %.1f s",
                self.request_timeout_s,
            )
            self.transport.close()


def server_config(app: Any, limits: ServerLimits, **options: Any) -> uvicorn.Config:
    """A uvicorn config serving ``app`` under ``limits`` (behind :class:`Admission`);
    ``options`` go to uvicorn as they are (host, port, log_level, lifespan, ...)."""
    protocol = type(
        "HeaderDeadlineH11",
        (_HeaderDeadline,),
        {
            "request_timeout_s": limits.request_timeout_s,
            "reclaim_above": limits.max_concurrency + limits.max_streams,
        },
    )
    admitted = Admission(app, max_concurrency=limits.max_concurrency, reserved=limits.reserved)
    return uvicorn.Config(
        admitted,
        http=protocol,
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        **options,
    )
