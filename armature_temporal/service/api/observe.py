"""The run API's Prometheus view: ``GET /metrics`` (read scope) and the middleware that
counts every request by method, route template and status
(:func:`~armature_temporal.telemetry.metrics.observe_request`).

The route label is the template a request matched (``/run/{run_id}``, a webhook's path), or
``unmatched``: never the raw path, which would hold run ids.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["RequestMetrics", "install_metrics"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def install_metrics(app: FastAPI) -> None:
    """Add ``GET /metrics`` (read scope): this process's metrics, Temporal's and Armature's,
    in Prometheus' text format."""
    import asyncio

    from fastapi import Depends
    from fastapi.responses import Response
    from prometheus_client import CONTENT_TYPE_LATEST

    from armature_temporal.service.api.deps import require
    from armature_temporal.telemetry.metrics import exposition

    @app.get("/metrics", include_in_schema=False, dependencies=[Depends(require("read"))])
    async def metrics() -> Response:
        # A scrape reads the SDK core's metrics over HTTP: off the event loop.
        return Response(await asyncio.to_thread(exposition), media_type=CONTENT_TYPE_LATEST)


class RequestMetrics:
    """Times each HTTP request to the end of its answer and counts it once answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from armature_temporal.telemetry.metrics import observe_request

        started = time.perf_counter()
        status = 500  # what the server answers when the app raises before starting one

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            observe_request(scope["method"], _route(scope), status, time.perf_counter() - started)


def _route(scope: Scope) -> str:
    """The path template the request matched (the webhooks are mounted at ``/``: their
    routes' paths are whole), or ``unmatched``."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else "unmatched"
