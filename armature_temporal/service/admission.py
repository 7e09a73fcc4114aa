"""Who gets served when the server is busy: every request falls in one class, and each class
has its own budget, so that one kind of traffic cannot take the capacity of another.

(Before, uvicorn's ``limit_concurrency`` was the only limit: it counts every open connection
against one ceiling, so 64 event streams from one read token — each holds its connection for
as long as the run lasts — left nothing, and ``/health``, approvers and ``/ui/login`` got 503.
No thread pool, lock or Temporal client limit was involved: streams hold none.)

- ``stream``: ``GET /run/{id}/events``. Long-lived by design, so they are not counted here:
  the route caps them per token and overall (:mod:`~armature_temporal.service.api.streams`),
  and a stream holds no worker thread and no shared lock while it waits.
- ``priority``: what must keep working while everything else is busy — ``GET /health`` and
  ``/healthz``, gate decisions (``POST /run/{id}/gates/{stage}``), the approval inbox
  (``GET /ui``) and its login and decisions. They may use ``max_concurrency`` and the
  ``reserved`` slots above it.
- ``ordinary``: everything else; at most ``max_concurrency`` at once, 503 ``busy`` beyond.

The HTTP server's own connection ceiling (:mod:`~armature_temporal.service.webserver`) is the
sum of the three budgets, so the streams and the ordinary requests together can never leave
the priority requests without a connection. Pure ASGI; no FastAPI needed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Literal

__all__ = [
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_RESERVED",
    "DEFAULT_STREAMS_PER_TOKEN",
    "Admission",
    "RequestClass",
    "request_class",
]

#: Open event streams (``GET /run/{id}/events``) at once, all tokens together, and per token.
DEFAULT_MAX_STREAMS = 32
DEFAULT_STREAMS_PER_TOKEN = 8
#: Requests kept for health, gate decisions and the inbox above ``max_concurrency``.
DEFAULT_RESERVED = 8

RequestClass = Literal["stream", "priority", "ordinary"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_STREAM = re.compile(r"/run/[^/]+/events/?")
_PRIORITY: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = (
    (frozenset({"GET", "HEAD"}), re.compile(r"/health/?|/healthz/?")),
    (frozenset({"POST"}), re.compile(r"/run/[^/]+/gates/[^/]+/?")),
    (frozenset({"GET", "HEAD"}), re.compile(r"/ui/?")),
    (frozenset({"GET", "HEAD", "POST"}), re.compile(r"/ui/login/?")),
    (frozenset({"POST"}), re.compile(r"/ui/runs/[^/]+/gates/[^/]+/?")),
)


def request_class(method: str, path: str) -> RequestClass:
    """The class of a request, from its method and path alone (before anything is read)."""
    if method in ("GET", "HEAD") and _STREAM.fullmatch(path):
        return "stream"
    for methods, pattern in _PRIORITY:
        if method in methods and pattern.fullmatch(path):
            return "priority"
    return "ordinary"


class Admission:
    """ASGI middleware: admits a request when its class has room, else answers 503 ``busy``
    (JSON ``{"error": {"code", "message", "fix"}}``, ``Retry-After``) without calling the app.

    ``max_concurrency`` ordinary requests at once; priority requests up to ``max_concurrency
    + reserved``; streams are the route's to count.
    """

    def __init__(self, app: ASGIApp, *, max_concurrency: int, reserved: int) -> None:
        self.app = app
        self.max_concurrency = max_concurrency
        self.reserved = reserved
        #: Requests in progress per class (tests and benchmarks read it).
        self.in_flight: dict[RequestClass, int] = {"stream": 0, "priority": 0, "ordinary": 0}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind = request_class(scope["method"], scope["path"])
        if kind == "stream":
            await self.app(scope, receive, send)
            return
        busy = self.in_flight["ordinary"] + self.in_flight["priority"]
        room = self.max_concurrency + (self.reserved if kind == "priority" else 0)
        if busy >= room:
            await _busy(send, scope, kind, self.max_concurrency, self.reserved)
            return
        self.in_flight[kind] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[kind] -= 1


async def _busy(send: Send, scope: Scope, kind: RequestClass, limit: int, reserved: int) -> None:
    if kind == "priority":
        what = f"{limit} requests and the {reserved} kept for health, gate decisions and login"
    else:
        what = f"{limit} requests (--max-concurrency)"
    body = {
        "error": {
            "code": "busy",
            "message": f"{scope['method']} {scope['path']}: the server is serving {what} "
            "already; nothing was done",
            "fix": "retry after a moment; a server that is often this busy needs a higher "
            "`armature serve --max-concurrency`, or more servers",
        }
    }
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
