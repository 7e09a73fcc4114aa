"""Webhook triggers on a real Temporal dev server: the ASGI app that `armature serve` runs,
driven over HTTP (httpx's ASGI transport) while a real worker runs the started runs."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.webhook_auth import sign
from armature_temporal.service.webhooks import collect_hooks, create_app
from tests.fakes import plan_from
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")

SPEC = """\
name: hooked
model_tiers: {small: {provider: simulate}}
inputs:
  type: object
  properties:
    ticket: {type: string}
    tier: {type: string, enum: [free, pro], default: free}
    channel: {type: string, default: email}
  required: [ticket]
triggers:
  - {type: webhook, path: /hooks/ticket, inputs: {tier: pro}}
stages:
  - {id: s, role: {name: S, description: "{{ inputs.ticket }} {{ inputs.tier }}"}}
"""


@asynccontextmanager
async def served(
    client: Client, task_queue: str, secret: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    async def temporal() -> Client:
        return client

    app = create_app(
        collect_hooks([plan_from(SPEC)]), temporal, task_queue=task_queue, secret=secret
    )
    transport = httpx.ASGITransport(app=app)
    # An open server (no secret) on loopback answers only this machine: a loopback Host.
    base = "http://127.0.0.1:8787"
    async with httpx.AsyncClient(transport=transport, base_url=base) as http:
        yield http


async def runs_on(client: Client, task_queue: str, at_least: int) -> list[str]:
    """Run ids on the task queue, waiting up to 10 s for visibility to show ``at_least``."""
    ids: list[str] = []
    for _ in range(100):
        ids = [w.id async for w in client.list_workflows(f"TaskQueue = '{task_queue}'")]
        if len(ids) >= at_least:
            break
        await asyncio.sleep(0.1)
    return ids


async def started_inputs(client: Client, run_id: str) -> dict[str, object]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    first = history.events[0].workflow_execution_started_event_attributes
    run_input = client.data_converter.payload_converter.from_payload(first.input.payloads[0], dict)
    inputs: dict[str, object] = run_input["inputs"]
    return inputs


async def test_a_post_starts_a_run_with_body_over_trigger_over_default_inputs(
    client: Client, task_queue: str
) -> None:
    async with served(client, task_queue) as http, build_worker(client, task_queue):
        listing = (await http.get("/")).json()
        assert listing["hooks"][0]["path"] == "/hooks/ticket"
        assert listing["auth"] == "none"
        answer = await http.post("/hooks/ticket", json={"ticket": "refund please"})
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert body["spec"] == "hooked" and body["duplicate"] is False
        assert body["ui_url"].endswith(
            f"/workflows/{body['run_id']}/{body['temporal_run_id']}/history"
        )
        result = await client.get_workflow_handle(body["run_id"], result_type=RunResult).result()
    assert result.state == "completed"
    # body key, trigger input (tier: pro over the default free), schema default (channel)
    assert await started_inputs(client, body["run_id"]) == {
        "ticket": "refund please",
        "tier": "pro",
        "channel": "email",
    }


async def test_a_retried_delivery_starts_one_run(client: Client, task_queue: str) -> None:
    headers = {"Idempotency-Key": "delivery-42"}
    async with served(client, task_queue) as http, build_worker(client, task_queue):
        first = await http.post("/hooks/ticket", json={"ticket": "a"}, headers=headers)
        assert first.status_code == 202, first.text
        run_id = first.json()["run_id"]
        await client.get_workflow_handle(run_id, result_type=RunResult).result()
        # again after the run closed, and once more with GitHub's delivery header
        again = await http.post("/hooks/ticket", json={"ticket": "a"}, headers=headers)
        github = await http.post(
            "/hooks/ticket", json={"ticket": "a"}, headers={"X-GitHub-Delivery": "delivery-42"}
        )
        other = await http.post(
            "/hooks/ticket", json={"ticket": "b"}, headers={"Idempotency-Key": "delivery-43"}
        )
    assert again.status_code == 200 and again.json() == {
        **again.json(),
        "run_id": run_id,
        "duplicate": True,
    }
    assert github.status_code == 200 and github.json()["run_id"] == run_id
    assert other.status_code == 202 and other.json()["run_id"] != run_id
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{run_id}'")]
    assert len(runs) == 1


@pytest.mark.parametrize(
    ("path", "payload", "status", "words"),
    [
        (
            "/hooks/nope",
            {"ticket": "x"},
            404,
            "no webhook at POST /hooks/nope; this server has: /hooks/ticket",
        ),
        ("/hooks/ticket", {"tier": "gold"}, 422, "'gold' is not one of"),
        ("/hooks/ticket", {}, 422, "'ticket' is a required property"),
        ("/hooks/ticket", "[1]", 422, "must be a JSON object"),
        ("/hooks/ticket", "{nope", 400, "is not JSON"),
    ],
    ids=["unknown-path", "bad-enum", "missing-required", "not-object", "not-json"],
)
async def test_bad_requests_start_nothing_and_say_why(
    client: Client, task_queue: str, path: str, payload: object, status: int, words: str
) -> None:
    content = payload if isinstance(payload, str) else json.dumps(payload)
    async with served(client, task_queue) as http:
        answer = await http.post(path, content=content)
        # A good request afterwards: once visibility shows it, it must be the only run.
        sentinel = await http.post("/hooks/ticket", json={"ticket": "ok"})
    assert answer.status_code == status
    assert words in answer.json()["error"]
    if status == 422 and "required" in words:
        assert "send them as keys of the JSON body" in answer.json()["error"]
    assert sentinel.status_code == 202
    assert await runs_on(client, task_queue, 1) == [sentinel.json()["run_id"]]
    await client.get_workflow_handle(sentinel.json()["run_id"]).terminate("test done")


async def test_a_get_on_a_hook_says_how_to_post(client: Client, task_queue: str) -> None:
    async with served(client, task_queue) as http:
        hook = await http.get("/hooks/ticket")
        missing = await http.get("/hooks/other")
    assert hook.status_code == 405 and hook.headers["allow"] == "POST"
    assert "starts runs of spec 'hooked' on POST" in hook.json()["error"]
    assert hook.json()["inputs_schema"]["required"] == ["ticket"]
    assert hook.json()["trigger_inputs"] == {"tier": "pro"}
    assert missing.status_code == 404 and "/hooks/ticket" in missing.json()["error"]


async def test_a_body_over_the_limit_is_refused(client: Client, task_queue: str) -> None:
    async with served(client, task_queue) as http:
        answer = await http.post("/hooks/ticket", content=b"{" + b" " * (1024 * 1024 + 1) + b"}")
    assert answer.status_code == 413


async def test_a_chunked_body_over_the_limit_is_refused_without_reading_it_all(
    client: Client, task_queue: str
) -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:  # no Content-Length: chunked
        nonlocal sent
        for _ in range(64):
            sent += 1
            yield b" " * 65536

    async with served(client, task_queue) as http:
        answer = await http.post("/hooks/ticket", content=endless())
    assert answer.status_code == 413
    assert sent < 64, "the server kept reading past the cap"


async def test_with_a_secret_only_authentic_requests_start_runs(
    client: Client, task_queue: str
) -> None:
    secret = "hook-secret"
    body = json.dumps({"ticket": "signed"}).encode()
    headers = sign(secret, body, timestamp=int(time.time()), path="/hooks/ticket")
    body_only = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    async with served(client, task_queue, secret) as http:
        denied = await http.post("/hooks/ticket", content=body)
        forged = await http.post(
            "/hooks/ticket", content=body, headers={"X-Armature-Signature-256": "sha256=00"}
        )
        signed = await http.post("/hooks/ticket", content=body, headers=headers)
        # The scheme before: a signature of the body alone never expires, so it is refused.
        unstamped = await http.post(
            "/hooks/ticket", content=body, headers={"X-Armature-Signature-256": body_only}
        )
        bearer = await http.post(
            "/hooks/ticket", content=body, headers={"Authorization": f"Bearer {secret}"}
        )
        hidden = await http.get("/")
        listed = await http.get("/", headers={"Authorization": f"Bearer {secret}"})
        hook_help = await http.get("/hooks/ticket")
        elsewhere = await http.post("/hooks/other", content=body)
    # Without the secret nothing about the hooks is told: not the list, not the inputs.
    assert hidden.status_code == 401 and "hooks" not in hidden.json()
    assert (
        listed.json()["auth"] == "required" and listed.json()["hooks"][0]["path"] == "/hooks/ticket"
    )
    assert hook_help.status_code == 401
    assert elsewhere.status_code == 404 and "/hooks/ticket" not in elsewhere.json()["error"]
    assert denied.status_code == 401 and forged.status_code == 401
    assert "X-Armature-Signature-256" in denied.json()["error"]
    assert "X-Armature-Timestamp" in denied.json()["error"]
    assert unstamped.status_code == 401
    assert signed.status_code == 202 and bearer.status_code == 202
    runs = await runs_on(client, task_queue, 2)
    assert sorted(runs) == sorted([signed.json()["run_id"], bearer.json()["run_id"]])
    for run_id in runs:
        await client.get_workflow_handle(run_id).terminate("test done")


async def test_an_unreachable_server_is_503_naming_it(task_queue: str) -> None:
    from armature_temporal.service.client import connect

    async def temporal() -> Client:
        return await connect("127.0.0.1:1")

    app = create_app(collect_hooks([plan_from(SPEC)]), temporal, task_queue=task_queue)
    transport = httpx.ASGITransport(app=app)
    # An open server (no secret) on loopback answers only this machine: a loopback Host.
    base = "http://127.0.0.1:8787"
    async with httpx.AsyncClient(transport=transport, base_url=base) as http:
        answer = await http.post("/hooks/ticket", json={"ticket": "x"})
    assert answer.status_code == 503
    assert "127.0.0.1:1" in answer.json()["error"]
