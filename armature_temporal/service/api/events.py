"""``GET /run/{run_id}/events``: a run's events as server-sent events.

Each event is ``id: <seq>``, ``event: <type>``, ``data: <RunEvent JSON>`` and a blank line;
``: keepalive`` comments every :data:`KEEPALIVE_S` seconds keep proxies from closing a quiet
stream; the stream ends after ``run_complete`` or ``run_failed``. A client that reconnects
with ``Last-Event-ID: <seq>`` (or ``?after=<seq>``) gets exactly the events after that one,
also from another server process: the ``seq`` numbers belong to the run, not to the server.
Readers of one run in this process share one follower (:class:`~..events.EventHub`).

Streams are capped per token and overall (:mod:`.streams`: 429 ``too_many_streams``); a
stream whose token is revoked ends within a second with an ``error`` event
(``token_revoked``). Only runs of the served specs can be followed (:mod:`.scope`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from temporalio.client import Client
from temporalio.service import RPCError

from armature_temporal.errors import ArmatureError
from armature_temporal.service.api.auth import bearer_token
from armature_temporal.service.api.deps import require, service_state, temporal
from armature_temporal.service.api.errors import ApiError, error_body
from armature_temporal.service.api.principal import Principal
from armature_temporal.service.api.scope import answering, served_run, unreachable
from armature_temporal.service.api.streams import StreamLease
from armature_temporal.service.events import EventHub

if TYPE_CHECKING:
    from armature_temporal.runtime.models import RunEvent

__all__ = ["KEEPALIVE_S", "event_hub", "router", "sse_event"]

#: Seconds between ``: keepalive`` comments on a quiet stream.
KEEPALIVE_S = 15.0
#: Where the hub lives on ``ServiceState.extra``.
HUB_KEY = "event_hub"

router = APIRouter(tags=["events"])


def event_hub(request: Request, client: Client) -> EventHub:
    """This server's :class:`EventHub` (made on first use, kept on the service state)."""
    extra = service_state(request).extra
    hub = extra.get(HUB_KEY)
    if not isinstance(hub, EventHub):
        hub = extra[HUB_KEY] = EventHub(client)
    return hub


def sse_event(event: RunEvent) -> str:
    """One event in the text/event-stream format (its JSON is one line)."""
    return f"id: {event.seq}\nevent: {event.type}\ndata: {event.model_dump_json()}\n\n"


def _resume_point(last_event_id: str | None, after: int | None) -> int:
    if last_event_id is not None and last_event_id.strip():
        try:
            seq = int(last_event_id.strip())
        except ValueError:
            seq = -1
        if seq < 0:
            raise ApiError(
                400,
                "invalid_last_event_id",
                f"Last-Event-ID {last_event_id!r} is not an event seq (a whole number >= 0)",
                "send the `id:` of the last event received, or leave the header out to start "
                "from the first event",
            )
        return seq
    return after or 0


@router.get(
    "/run/{run_id}/events",
    summary="Follow a run's events (server-sent events)",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def run_events(
    run_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require("read"))],
    client: Annotated[Client, Depends(temporal)],
    after: Annotated[
        int | None, Query(ge=0, description="Resume after this event seq (as Last-Event-ID).")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """The run's events from the first (or after ``Last-Event-ID`` / ``?after``) until it
    ends: stage_start, stage_complete, gate_waiting, gate_decided, run_complete, run_failed.
    404 ``unknown_run`` for a run this server does not have or does not serve; 429
    ``too_many_streams`` past the caps."""
    start = _resume_point(last_event_id, after)
    state = service_state(request)
    credential = bearer_token(request) if principal.via == "token" else None
    # The slot is taken before anything is asked of Temporal, and the response frees it.
    held = state.streams.acquire(principal, credential, state.auth)
    try:
        with answering(state, run_id):
            await served_run(state, client, run_id)
        hub = event_hub(request, client)
    except BaseException:
        state.streams.release(held)
        raise
    return _LeasedStream(
        _stream(hub, run_id, start, held),
        release=lambda: state.streams.release(held),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _LeasedStream(StreamingResponse):
    """A streaming response that frees its stream slot when it is over, however it ends (the
    run's end, a revoked token, the client gone before the first event)."""

    def __init__(self, content: AsyncIterator[str], *, release: Callable[[], None], **kw: Any):
        super().__init__(content, **kw)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def _stream(hub: EventHub, run_id: str, after: int, held: StreamLease) -> AsyncIterator[str]:
    events = hub.subscribe(run_id, after=after)
    pending: asyncio.Future[RunEvent] | None = None
    ended = asyncio.ensure_future(held.ended.wait())
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            waiting: set[asyncio.Future[Any]] = {pending, ended}
            done, _ = await asyncio.wait(
                waiting, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
            )
            if ended in done:
                yield _revoked_event(run_id, held)
                return
            if not done:
                yield ": keepalive\n\n"
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            except (ArmatureError, RPCError) as exc:
                # The headers are sent: the refusal travels as the stream's last event.
                yield _error_event(run_id, exc)
                return
            finally:
                pending = None
            yield sse_event(event)
    finally:
        ended.cancel()
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})  # a cancelled anext must end before aclose
            if not pending.cancelled():
                pending.exception()  # retrieved: the stream is over either way
        await events.aclose()


def _revoked_event(run_id: str, held: StreamLease) -> str:
    body = error_body(
        "token_revoked",
        f"the event stream of run {run_id} ended: {held.why}",
        "reconnect with a valid token (and Last-Event-ID, to miss nothing)",
    )
    return f"event: error\ndata: {json.dumps(body)}\n\n"


def _error_event(run_id: str, exc: Exception) -> str:
    if isinstance(exc, RPCError):
        code = "temporal_unreachable" if unreachable(exc) else "temporal_error"
        fix = "check the Temporal server (`armature doctor`) and reconnect"
    else:
        code, fix = "events_unavailable", "see the message; reconnect with Last-Event-ID after"
    body = error_body(code, f"run {run_id}: {exc}", fix)
    return f"event: error\ndata: {json.dumps(body)}\n\n"
