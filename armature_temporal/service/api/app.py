"""The ASGI app ``armature serve`` runs: the run API, its OpenAPI schema, docs and Prometheus
metrics behind the ``read`` scope, and the specs' webhooks (mounted last, so their paths work
as before).

A request body for the API is read within ``body_timeout_s`` of the request's headers
(else 408) and up to :data:`MAX_BODY_BYTES` (else 413), before any route sees it; a JSON
body nested deeper than 64 levels or holding a lone surrogate escape is refused there, 400
``too_deep`` / ``lone_surrogate`` naming the place (:mod:`~armature_temporal.service.json_body`;
the inbox's forms check their own fields). The webhook paths keep their own limits
(:mod:`~armature_temporal.service.webhooks`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from armature_temporal.service.api.deps import ServiceState, require
from armature_temporal.service.api.errors import error_body, install_error_handlers

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["API_PREFIXES", "MAX_BODY_BYTES", "create_service_app", "reserved_path"]

#: The paths the run API owns; a webhook trigger may not claim one (``reserved_path``).
API_PREFIXES = (
    "/health",
    "/run",
    "/workflows",
    "/gates",
    "/ui",
    "/openapi.json",
    "/docs",
    "/metrics",
)
#: Bodies larger than this are refused (413): run inputs are not bulk uploads.
MAX_BODY_BYTES = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def reserved_path(path: str) -> bool:
    """True when ``path`` is (under) one of the run API's paths, :data:`API_PREFIXES`."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in API_PREFIXES)


def create_service_app(
    state: ServiceState,
    *,
    webhooks: FastAPI | None = None,
    body_timeout_s: float = 10.0,
) -> FastAPI:
    """The run API over ``state`` (``app.state.armature``), with ``webhooks`` (the app of
    :func:`~armature_temporal.service.webhooks.create_app`) mounted under it when given.

    FastAPI's public ``/openapi.json`` and ``/docs`` are off; the same paths answer behind
    the ``read`` scope.
    """
    from fastapi import Depends, FastAPI
    from fastapi.responses import JSONResponse

    from armature_temporal.service.api import events, runs, ui, ui_reports
    from armature_temporal.service.api.docs import install_docs
    from armature_temporal.service.api.observe import RequestMetrics, install_metrics

    app = FastAPI(
        title="Armature run API",
        description=(
            "Start, follow and decide runs of the specs this server serves. Send "
            "`Authorization: Bearer <token>` (`armature tokens create NAME --scope ...`)."
        ),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.armature = state
    install_error_handlers(app)
    app.include_router(runs.router)
    app.include_router(events.router)  # GET /run/{id}/events (server-sent events)
    app.include_router(ui.router)  # /ui, the approval inbox
    app.include_router(ui_reports.router)  # /ui/specs/.../dashboard, /ui/runs/.../report
    # Every route is above the webhook mount below, which would otherwise hide them.

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require("read"))])
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    install_docs(app)  # GET /docs, its assets served from here (no CDN)
    install_metrics(app)  # GET /metrics for Prometheus

    if webhooks is not None:
        app.mount("/", webhooks)
    app.add_middleware(_BodyLimits, max_bytes=MAX_BODY_BYTES, timeout_s=body_timeout_s)
    app.add_middleware(RequestMetrics)  # outermost: counts the limits' refusals too
    return app


class _BodyLimits:
    """Reads an API request's body whole, within the deadline and the cap, then hands it on."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in ("GET", "HEAD", "OPTIONS")
            or not reserved_path(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        declared = headers.get("content-length", "")
        too_big = (
            f"{scope['method']} {scope['path']}: body over {self.max_bytes} bytes",
            "send run inputs, not files (store large data elsewhere and pass a reference)",
        )
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _answer(send, 413, "body_too_large", *too_big)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":  # the client went away
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        await _answer(send, 413, "body_too_large", *too_big)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _answer(
                send,
                408,
                "body_timeout",
                f"the body took over {self.timeout_s:g} s to arrive ({size} bytes by then)",
                "send the whole request at once",
            )
            return
        body = b"".join(chunks)
        if not scope["path"].startswith("/ui"):  # the inbox posts forms, not JSON
            refused = _json_refusal(scope, body)
            if refused is not None:
                await _answer(send, 400, *refused)
                return
            scope = _as_json(scope, headers.get("content-type"), body)
        handed = False

        async def replay() -> Message:
            nonlocal handed
            if not handed:
                handed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


#: Content types a JSON body arrives under by accident: none, or what `curl -d` sends.
_NOT_SAID = ("", "application/x-www-form-urlencoded", "text/plain")


def _as_json(scope: Scope, content_type: str | None, body: bytes) -> Scope:
    """The request as JSON when its body is a JSON object or list that came without saying so
    (`curl -d '{...}'` sends it as a form): the API takes it, as the webhooks do, instead of
    answering 422 to the README's own example."""
    declared = (content_type or "").split(";")[0].strip().lower()
    if declared not in _NOT_SAID or body.lstrip()[:1] not in (b"{", b"["):
        return scope
    try:
        json.loads(body)
    except ValueError:
        return scope
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


def _json_refusal(scope: Scope, body: bytes) -> tuple[str, str, str] | None:
    """(code, message, fix) for a JSON body the API refuses, or None."""
    from armature_temporal.service.json_body import MAX_JSON_DEPTH, json_problem

    problem = json_problem(body)
    if problem is None:
        return None
    kind, where = problem
    request = f"{scope['method']} {scope['path']}"
    if kind == "deep":
        return (
            "too_deep",
            f"{request}: the JSON body is nested deeper than {MAX_JSON_DEPTH} levels (at "
            f"{where}); nothing was done",
            f"send inputs nested at most {MAX_JSON_DEPTH} levels deep",
        )
    return (
        "lone_surrogate",
        f"{request}: the JSON body has a lone surrogate escape at {where} (such as "
        '"\\ud800", half of a UTF-16 pair): it is not text; nothing was done',
        'send valid Unicode: both halves of a pair ("\\ud83d\\ude00") or the character itself',
    )


async def _answer(send: Send, status: int, code: str, message: str, fix: str) -> None:
    payload = json.dumps(error_body(code, message, fix)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
