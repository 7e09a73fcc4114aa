"""``GET /run/{run_id}/events``: a run's events as server-sent events.

Each event is ``id: <seq>``, ``event: <type>``, ``data: <RunEvent JSON>`` and a blank line;
``: keepalive`` comments every :data:`KEEPALIVE_S` seconds keep proxies from closing a quiet
stream; the stream ends after ``run_complete`` or ``run_failed``. A client that reconnects
with ``Last-Event-ID: <seq>`` (or ``?after=<seq>``) gets exactly the events after that one,
also from another server process: the ``seq`` numbers belong to the run, not to the server.
Readers of one run in this process share one follower (:class:`~..events.EventHub`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from temporalio.client import Client
from temporalio.service import RPCError

from armature_temporal.errors import ArmatureError
from armature_temporal.service.api.deps import require, service_state, temporal
from armature_temporal.service.api.errors import ApiError, error_body
from armature_temporal.service.api.principal import Principal
from armature_temporal.service.client import RunNotFound, describe_run
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
    404 ``unknown_run`` for a run this server's Temporal does not have."""
    start = _resume_point(last_event_id, after)
    try:
        await describe_run(client, run_id)
    except RunNotFound as exc:
        raise ApiError(
            404, "unknown_run", str(exc), "check the run id (GET /run/{id}, `armature runs list`)"
        ) from None
    hub = event_hub(request, client)
    return StreamingResponse(
        _stream(hub, run_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(hub: EventHub, run_id: str, after: int) -> AsyncIterator[str]:
    events = hub.subscribe(run_id, after=after)
    pending: asyncio.Future[RunEvent] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_S)
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
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})  # a cancelled anext must end before aclose
            if not pending.cancelled():
                pending.exception()  # retrieved: the stream is over either way
        await events.aclose()


def _error_event(run_id: str, exc: Exception) -> str:
    if isinstance(exc, RPCError):
        code, fix = "temporal_error", "check the Temporal server (`armature doctor`) and reconnect"
    else:
        code, fix = "events_unavailable", "see the message; reconnect with Last-Event-ID after"
    body = error_body(code, f"run {run_id}: {exc}", fix)
    return f"event: error\ndata: {json.dumps(body)}\n\n"
