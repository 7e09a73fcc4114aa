"""The run API's event streams attacked over real HTTP (#25): 64 streams from one read token
took every connection, and `/health`, approvers and `/ui/login` got 503; a revoked token's
open streams went on. Now streams are capped per token and overall (429), the rest of the
server keeps its capacity, and revoking a token — from another process, with `armature tokens
revoke` — ends its streams within a second."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from armature_temporal.service.admission import DEFAULT_STREAMS_PER_TOKEN
from armature_temporal.service.api.streams import StreamSlots
from armature_temporal.store import TraceStore
from tests.fakes import run_armature
from tests.workflows.run_api_harness import bearer, service, until
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")

TRIAGE = {"spec": "customer-triage", "inputs": {"ticket": "My invoice is wrong"}}


@pytest.fixture
def store() -> Iterator[TraceStore]:
    """The store under this test's ARMATURE_HOME: the one `armature tokens` writes to."""
    opened = TraceStore()
    yield opened
    opened.close()


async def waiting_run(http: httpx.AsyncClient, runner: str | None) -> str:
    """A customer-triage run, started over the API and waiting at its gate."""
    started = await http.post("/run/async", json=TRIAGE, headers=bearer(runner))
    assert started.status_code == 202, started.text
    run_id: str = started.json()["run_id"]
    await until(http, run_id, runner, lambda v: v["pending_gates"])
    return run_id


@contextlib.asynccontextmanager
async def open_streams(
    url: str, run_id: str, token: str | None, count: int
) -> AsyncIterator[list[httpx.Response]]:
    """``count`` event streams of ``run_id``, opened one after the other and kept open, each
    on its own connection (as the review's client did); the answers (their headers read,
    bodies not), closed on the way out."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:
        answers: list[httpx.Response] = []
        try:
            for _ in range(count):
                request = http.build_request("GET", f"/run/{run_id}/events", headers=bearer(token))
                answers.append(await http.send(request, stream=True))
            yield answers
        finally:
            for answer in answers:
                await answer.aclose()


async def read_until_end(answer: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """A stream's events, (event type, data), until the server ends it."""
    got: list[tuple[str, dict[str, Any]]] = []
    kind, data = "message", ""
    async for line in answer.aiter_lines():
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif line == "" and data:
            got.append((kind, json.loads(data)))
            kind, data = "message", ""
    return got


async def test_streams_past_a_tokens_cap_are_429_and_health_decisions_and_login_still_work(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    """The review's attack: 64 event streams from one read token. The first
    DEFAULT_STREAMS_PER_TOKEN are served, the rest refused at once (429, naming the cap and
    how to raise it); with those streams open, /health answers, an approver decides the gate,
    and /ui/login shows its form."""
    reader = store.create_token("watcher", ["read"])
    runner = store.create_token("ci-bot", ["run", "read"])
    approver = store.create_token("alice", ["approve", "read"])
    async with (
        service(client, task_queue, store) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
        build_worker(client, task_queue),
    ):
        run_id = await waiting_run(http, runner)
        async with open_streams(srv.url, run_id, reader, 64) as streams:
            statuses = [s.status_code for s in streams]
            assert statuses.count(200) == DEFAULT_STREAMS_PER_TOKEN, statuses
            assert statuses.count(429) == 64 - DEFAULT_STREAMS_PER_TOKEN, statuses
            refused = next(s for s in streams if s.status_code == 429)
            error = json.loads(await refused.aread())["error"]
            assert error["code"] == "too_many_streams"
            assert f"the most one token may hold ({DEFAULT_STREAMS_PER_TOKEN})" in error["message"]
            assert "--max-streams-per-token" in error["fix"]
            assert srv.state.streams.open_count("watcher") == DEFAULT_STREAMS_PER_TOKEN

            health = await http.get("/health")
            login = await http.get("/ui/login")
            decided = await http.post(
                f"/run/{run_id}/gates/approve_reply",
                json={"decision": "approve", "comment": "streams or not"},
                headers=bearer(approver),
            )
            # The served streams see the decision and the run's end.
            ok = next(s for s in streams if s.status_code == 200)
            events = await asyncio.wait_for(read_until_end(ok), 60)
    assert health.status_code == 200 and health.json()["ok"] is True, health.text
    assert login.status_code == 200 and 'name="token"' in login.text, login.text[:300]
    assert decided.status_code == 200, decided.text
    assert decided.json()["by"] == "alice"
    assert [k for k, _ in events if k == "gate_decided"] == ["gate_decided"]
    assert events[-1][0] == "run_complete"


async def test_the_servers_stream_cap_holds_across_tokens_and_a_closed_stream_frees_its_slot(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    a = store.create_token("reader-a", ["read"])
    b = store.create_token("reader-b", ["read"])
    runner = store.create_token("ci-bot", ["run", "read"])
    slots = StreamSlots(max_streams=3, per_token=2)
    async with (
        service(client, task_queue, store, streams=slots) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
        build_worker(client, task_queue),
    ):
        run_id = await waiting_run(http, runner)
        async with open_streams(srv.url, run_id, a, 3) as of_a:
            assert sorted(s.status_code for s in of_a) == [200, 200, 429]
            async with open_streams(srv.url, run_id, b, 2) as of_b:
                assert sorted(s.status_code for s in of_b) == [200, 429]
                full = next(s for s in of_b if s.status_code == 429)
                error = json.loads(await full.aread())["error"]
                assert "this server has 3 event streams open" in error["message"]
                assert "--max-streams N" in error["fix"]
                assert full.headers["connection"] == "close"
        # Both clients hung up: the slots are free again.
        for _ in range(100):
            if slots.open_count() == 0:
                break
            await asyncio.sleep(0.05)
        assert slots.open_count() == 0
        async with open_streams(srv.url, run_id, b, 2) as again:
            assert [s.status_code for s in again] == [200, 200]
        await client.get_workflow_handle(run_id).terminate("test over")


async def test_revoking_a_token_from_another_process_ends_its_streams_within_a_second(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    """`armature tokens revoke` in another process; the revoked token's open stream ends
    (an `error` event, token_revoked) about a second later at most, and another token's
    stream of the same run goes on. The bound asserted is generous (a loaded 2-core CI
    machine); what it checks is that the stream ends, not a benchmark."""
    from armature_temporal.http_client import ServiceClient, ServiceError

    reader = store.create_token("watcher", ["read"])
    other = store.create_token("other-reader", ["read"])
    runner = store.create_token("ci-bot", ["run", "read"])
    async with (
        service(client, task_queue, store) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
        build_worker(client, task_queue),
    ):
        run_id = await waiting_run(http, runner)
        async with (
            open_streams(srv.url, run_id, reader, 1) as (revoked,),
            open_streams(srv.url, run_id, other, 1) as (kept,),
            ServiceClient(srv.url, reader) as as_reader,
        ):
            assert revoked.status_code == 200 and kept.status_code == 200
            lines = revoked.aiter_lines()
            async for line in lines:  # the stream is live: the gate's event has come
                if line.startswith("event: gate_waiting"):
                    break
            library = asyncio.ensure_future(_drain(as_reader.handle(run_id).events()))
            await asyncio.sleep(0.5)
            done = await run_armature("tokens", "revoke", "watcher")
            assert done.returncode == 0, done.stderr
            revoked_at = time.monotonic()
            rest = await asyncio.wait_for(_rest(lines), 30)  # until the server ends it
            took = time.monotonic() - revoked_at
            with pytest.raises(ServiceError) as ended:
                await asyncio.wait_for(library, 30)
            assert not srv.state.streams.open_count("watcher")
            assert srv.state.streams.open_count("other-reader") == 1
        await client.get_workflow_handle(run_id).terminate("test over")
    assert "event: error" in rest, rest
    after = rest[rest.index("event: error") :]
    data = json.loads(next(line for line in after if line.startswith("data:"))[5:])
    assert data["error"]["code"] == "token_revoked"
    assert "'watcher' was revoked" in data["error"]["message"]
    assert took < 5.0, f"the revoked token's stream ended {took:.2f} s after the revoke"
    assert ended.value.code == "token_revoked"


async def _rest(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines]


async def _drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def test_an_open_servers_streams_end_when_the_first_token_is_created(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    """On a loopback server with no token, anyone on the machine may follow a run; once
    `armature tokens create` closes the server, those token-less streams end too."""
    async with (
        service(client, task_queue, store) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
        build_worker(client, task_queue),
    ):
        run_id = await waiting_run(http, None)
        async with open_streams(srv.url, run_id, None, 1) as (stream,):
            assert stream.status_code == 200
            made = await run_armature("tokens", "create", "first", "--scope", "read")
            assert made.returncode == 0, made.stderr
            events = await asyncio.wait_for(read_until_end(stream), 10)
        await client.get_workflow_handle(run_id).terminate("test over")
    kind, data = events[-1]
    assert kind == "error" and data["error"]["code"] == "token_revoked"
    assert "now requires a token" in data["error"]["message"]
