"""``GET /run/{id}/events`` over real HTTP (uvicorn on a free port) against a real dev server:
read half a run's events, drop the connection, reconnect with ``Last-Event-ID``, and the union
is the whole log with no repeats. The app is a tiny FastAPI one with the events router and a
``fake_authorizer`` (the real token authorizer is the run API's)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI
from starlette.requests import Request
from temporalio.client import Client

from armature_temporal.service.api import events as events_api
from armature_temporal.service.api.deps import ServiceState
from armature_temporal.service.api.errors import ApiError, install_error_handlers
from armature_temporal.service.api.principal import Principal
from armature_temporal.service.client import decide_gate
from armature_temporal.service.events import follow_events
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, free_port, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

READER = "arm_" + "r" * 43
APPROVER = "arm_" + "a" * 43


class fake_authorizer:
    """Two tokens: ``reader`` (read) and ``approver`` (approve only); no open mode."""

    def __init__(self) -> None:
        self.tokens = {
            READER: Principal("reader", frozenset({"read"})),
            APPROVER: Principal("approver", frozenset({"approve"})),
        }

    def authenticate(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        principal = self.from_token(header.removeprefix("Bearer ").strip())
        if principal is None:
            raise ApiError(401, "unauthorized", "no valid token", "send Authorization: Bearer")
        return principal

    def from_token(self, token: str) -> Principal | None:
        return self.tokens.get(token)

    @property
    def open(self) -> bool:
        return False

    def still_valid(self, credentials: Collection[str | None]) -> set[str | None]:
        return {c for c in credentials if c in self.tokens}


@pytest_asyncio.fixture(loop_scope="session")
async def served(client: Client, task_queue: str) -> AsyncIterator[tuple[str, FastAPI]]:
    async def connected() -> Client:
        return client

    def make_app() -> FastAPI:
        app = FastAPI()
        install_error_handlers(app)
        app.include_router(events_api.router)
        # The runs of the specs it serves are what it follows: the triage spec's here.
        triage = load_plan(SPECS / "customer-triage.yaml")
        app.state.armature = ServiceState(
            plans={triage.name: triage},
            client=connected,
            task_queue=task_queue,
            auth=fake_authorizer(),
        )
        return app

    port = free_port()
    app = make_app()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    yield f"http://127.0.0.1:{port}", app
    server.should_exit = True
    await asyncio.wait_for(task, 10)


async def _read(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    *,
    until: str | None = None,
    comments: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The SSE events of ``url`` (id, event, data parsed), stopping after ``until``."""
    got: list[dict[str, Any]] = []
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        async for line in response.aiter_lines():
            if line.startswith(":"):
                if comments is not None:
                    comments.append(line)
                continue
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if not fields:
                continue
            event = {"id": int(fields["id"]), "event": fields["event"]}
            event["data"] = json.loads(fields["data"])
            got.append(event)
            fields = {}
            if event["event"] == until:
                break  # leaves the block: the connection is dropped mid-stream
    return got


async def test_a_reader_that_drops_and_reconnects_with_last_event_id_misses_nothing(
    client: Client, task_queue: str, served: tuple[str, FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_api, "KEEPALIVE_S", 0.2)
    base, app = served
    plan = load_plan(SPECS / "customer-triage.yaml")
    auth = {"Authorization": f"Bearer {READER}"}
    async with build_worker(client, task_queue), httpx.AsyncClient(timeout=30) as http:
        handle = await start(client, plan, task_queue)
        url = f"{base}/run/{handle.id}/events"
        first = await asyncio.wait_for(_read(http, url, auth, until="gate_waiting"), 30)
        # The dropped reader was the run's only one: the server stops following it.
        hub = app.state.armature.extra[events_api.HUB_KEY]
        for _ in range(200):
            if hub.followers() == 0:
                break
            await asyncio.sleep(0.05)
        assert hub.followers() == 0 and hub.followers_started == 1
        # While the run waits on its gate, the stream stays open with keepalive comments.
        comments: list[str] = []
        waiting = asyncio.create_task(
            _read(http, url, {**auth, "Last-Event-ID": str(first[-1]["id"])}, comments=comments)
        )
        while not comments:
            await asyncio.sleep(0.05)
        await decide_gate(client, handle.id, "approve_reply", "approve", by="ann")
        rest = await asyncio.wait_for(waiting, 30)
        whole = [e.model_dump(mode="json") async for e in follow_events(client, handle.id)]
        again = await _read(http, f"{url}?after=3", auth)
    assert comments[0] == ": keepalive"
    union = first + rest
    assert [e["id"] for e in union] == list(range(1, len(whole) + 1))  # no gap, no repeat
    assert [e["data"] for e in union] == whole
    assert [e["event"] for e in union] == [e["type"] for e in whole]
    assert union[-1]["event"] == "run_complete"
    assert [e["data"] for e in again] == whole[3:]


async def test_the_events_route_refuses_without_read_and_names_unknown_runs(
    client: Client, served: tuple[str, FastAPI]
) -> None:
    served_at = served[0]
    async with httpx.AsyncClient(timeout=10) as http:
        none = await http.get(f"{served_at}/run/whatever/events")
        approver = await http.get(
            f"{served_at}/run/whatever/events", headers={"Authorization": f"Bearer {APPROVER}"}
        )
        unknown = await http.get(
            f"{served_at}/run/nope-1/events", headers={"Authorization": f"Bearer {READER}"}
        )
        bad_id = await http.get(
            f"{served_at}/run/nope-1/events",
            headers={"Authorization": f"Bearer {READER}", "Last-Event-ID": "x"},
        )
    assert none.status_code == 401 and none.json()["error"]["code"] == "unauthorized"
    assert approver.status_code == 403 and approver.json()["error"]["code"] == "forbidden"
    assert "'read'" in approver.json()["error"]["message"]
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_run"
    assert bad_id.status_code == 400
    assert bad_id.json()["error"]["code"] == "invalid_last_event_id"
