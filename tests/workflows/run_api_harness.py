"""What the run API's tests over real HTTP share: the service app `armature serve` runs, under
uvicorn with the config it runs with, on a free loopback port; tokens as headers; waiting for a
run to get somewhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from armature_temporal.service.api.app import create_service_app
from armature_temporal.service.api.auth import TokenAuthorizer
from armature_temporal.service.api.deps import ServiceState
from armature_temporal.service.api.streams import StreamSlots
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from tests.fakes import free_port

SPECS = Path(__file__).resolve().parents[2] / "specs"


def plans(*files: str) -> dict[str, Plan]:
    """The plans of ``specs/<file>`` by name (default: quickstart and customer-triage)."""
    chosen = files or ("quickstart.yaml", "customer-triage.yaml")
    loaded = [compile_spec(load_spec(SPECS / f)) for f in chosen]
    return {plan.name: plan for plan in loaded}


@dataclass
class Served:
    """A running service: its base URL and state (its stream slots, say)."""

    url: str
    state: ServiceState


@asynccontextmanager
async def service(
    client: Client,
    task_queue: str,
    store: TraceStore,
    *,
    served: dict[str, Plan] | None = None,
    streams: StreamSlots | None = None,
    all_runs: bool = False,
    limits: Any = None,
) -> AsyncIterator[Served]:
    """The service app on 127.0.0.1:<free port> under uvicorn (``limits``: a
    ``ServerLimits``, default ones when None)."""
    import uvicorn

    from armature_temporal.service.webserver import ServerLimits, server_config

    async def the_client() -> Client:
        return client

    state = ServiceState(
        plans=plans() if served is None else served,
        client=the_client,
        task_queue=task_queue,
        auth=TokenAuthorizer(store, loopback=True),
        streams=streams or StreamSlots(),
        all_runs=all_runs,
    )
    port = free_port()
    config = server_config(
        create_service_app(state),
        limits or ServerLimits(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.02)
        yield Served(f"http://127.0.0.1:{port}", state)
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def serving(
    client: Client, task_queue: str, store: TraceStore, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """:func:`service`, and an HTTP client for it."""
    async with (
        service(client, task_queue, store, **options) as served,
        httpx.AsyncClient(base_url=served.url, timeout=60) as http,
    ):
        yield http


def bearer(token: str | None) -> dict[str, str]:
    """The header that carries ``token``; none for None (an open server's caller)."""
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


async def until(
    http: httpx.AsyncClient, run_id: str, token: str | None, done: Any
) -> dict[str, Any]:
    """GET /run/{id} until ``done(view)``; returns that view."""
    view: dict[str, Any] = {}
    for _ in range(300):
        answer = await http.get(f"/run/{run_id}", headers=bearer(token))
        assert answer.status_code == 200, answer.text
        view = answer.json()
        if done(view):
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} never got there: {view}")
