"""The webhook server attacked over real HTTP: the app `armature serve` runs, under the uvicorn
config it runs with, on a loopback port, starting runs on a real Temporal dev server.

Each test is one attack from the outside review of issue #14: replayed signed bodies, stale
and body-only signatures, slow clients, bodies sent to a server that should not read them,
JSON that broke the server (500), a non-ASCII secret, the OpenAPI schema open to anyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
import socket
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from armature_temporal.spec.compiler import load_plan
from tests.fakes import plan_from

pytestmark = pytest.mark.asyncio(loop_scope="session")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")

import uvicorn  # noqa: E402  (the serve extra brings it with fastapi)

from armature_temporal.service.webhook_auth import SIGNED_FORM, sign  # noqa: E402
from armature_temporal.service.webhooks import collect_hooks, create_app  # noqa: E402
from armature_temporal.service.webserver import ServerLimits, server_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SECRET = "edge-secret"
SPEC = """\
name: edged
model_tiers: {small: {provider: simulate}}
inputs:
  type: object
  properties:
    ticket: {type: string}
    payload: {type: object}
  required: [ticket]
triggers:
  - {type: webhook, path: /hooks/ticket}
stages:
  - {id: s, role: {name: S, description: "{{ inputs.ticket }}"}}
"""


@dataclass
class Edge:
    url: str
    port: int


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers (pytest's stay)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def edge(
    client: Client,
    task_queue: str,
    *,
    secret: str | None = SECRET,
    spec: str = SPEC,
    request_timeout_s: float = 1.0,
    max_concurrency: int = 64,
    reserved: int = ServerLimits.reserved,
    max_streams: int = ServerLimits.max_streams,
    **auth: Any,
) -> AsyncIterator[Edge]:
    """The webhook server on a free loopback port, in this event loop."""

    async def temporal() -> Client:
        return client

    plan = load_plan(ROOT / spec) if spec.endswith(".yaml") else plan_from(spec)
    app = create_app(
        collect_hooks([plan]),
        temporal,
        task_queue=task_queue,
        secret=secret,
        body_timeout_s=request_timeout_s,
        **auth,
    )
    limits = ServerLimits(
        request_timeout_s=request_timeout_s,
        max_concurrency=max_concurrency,
        reserved=reserved,
        max_streams=max_streams,
    )
    server = _QuietServer(
        server_config(app, limits, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        for _ in range(100):
            if server.started:
                break
            await asyncio.sleep(0.05)
        assert server.started, "uvicorn did not start"
        yield Edge(f"http://127.0.0.1:{port}", port)
    finally:
        server.should_exit = True
        await serving
        sock.close()


def signed(
    body: bytes,
    *,
    key: str = "",
    at: float | None = None,
    method: str = "POST",
    path: str = "/hooks/ticket",
) -> dict[str, str]:
    stamp = int(time.time() if at is None else at)
    return sign(SECRET, body, timestamp=stamp, key=key, method=method, path=path)


async def terminate_all(client: Client, task_queue: str) -> None:
    running = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
    async for run in client.list_workflows(running):
        await client.get_workflow_handle(run.id).terminate("test done")


async def count_runs(client: Client, run_id: str) -> int:
    return len([w async for w in client.list_workflows(f"WorkflowId = '{run_id}'")])


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before it closed. A server that closes with unread client bytes
    in its buffer (a slow loris keeps sending) resets the connection; the answer that came
    before the reset still counts, where ``reader.read()`` would drop it."""
    chunks: list[bytes] = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := await reader.read(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def exchange(
    port: int, head: bytes, *, body: bytes = b"", wait_s: float = 5.0
) -> tuple[bytes, float]:
    """Send ``head`` (and ``body``) on a fresh connection and read until the server closes
    it; the bytes it sent and the seconds it took. Raises TimeoutError after ``wait_s``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    try:
        writer.write(head + body)
        await writer.drain()
        answer = await asyncio.wait_for(read_until_closed(reader), wait_s)
        return answer, time.monotonic() - started
    finally:
        writer.close()


async def dribble(port: int, head: bytes, *, wait_s: float) -> tuple[bytes, float]:
    """Send ``head``, then one byte every 0.2 s (a slow loris) until the server answers and
    closes the connection; what it sent and the seconds it took."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()

    async def feed() -> None:
        with contextlib.suppress(ConnectionError):
            while True:
                await asyncio.sleep(0.2)
                writer.write(b" ")
                await writer.drain()

    writer.write(head)
    await writer.drain()
    feeder = asyncio.ensure_future(feed())
    try:
        answer = await asyncio.wait_for(read_until_closed(reader), wait_s)
        return answer, time.monotonic() - started
    finally:
        feeder.cancel()
        writer.close()


def post_head(extra: str = "", *, length: int | None = None, path: str = "/hooks/ticket") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"POST {path} HTTP/1.1\r\nHost: edge.test\r\n{size}{extra}\r\n".encode()


# -- freshness and replay --------------------------------------------------------------------


async def test_a_captured_signed_body_replayed_with_a_new_key_is_refused(
    client: Client, task_queue: str
) -> None:
    body = json.dumps({"ticket": "refund"}).encode()
    captured = signed(body, key="delivery-1")
    async with edge(client, task_queue) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        first = await http.post("/hooks/ticket", content=body, headers=captured)
        # The attacker keeps the signature and timestamp and sends a new Idempotency-Key.
        replay = await http.post(
            "/hooks/ticket", content=body, headers={**captured, "Idempotency-Key": "new-2"}
        )
        unkeyed = await http.post(
            "/hooks/ticket",
            content=body,
            headers={k: v for k, v in captured.items() if k != "Idempotency-Key"},
        )
        # The very same request again within the window: the same delivery, no second run.
        again = await http.post("/hooks/ticket", content=body, headers=captured)
    assert first.status_code == 202, first.text
    assert replay.status_code == 401, replay.text
    assert "X-Armature-Signature-256 does not match" in replay.json()["error"]
    assert (
        f"'{captured['X-Armature-Timestamp']}', 'POST', '/hooks/ticket', 'new-2'"
        in (replay.json()["error"])
    )
    assert unkeyed.status_code == 401
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["run_id"] == first.json()["run_id"]
    assert await count_runs(client, first.json()["run_id"]) == 1
    await terminate_all(client, task_queue)


async def test_a_signed_request_without_a_key_replayed_in_the_window_starts_no_second_run(
    client: Client, task_queue: str
) -> None:
    body = json.dumps({"ticket": f"once {task_queue}"}).encode()
    headers = signed(body)
    async with edge(client, task_queue) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        first = await http.post("/hooks/ticket", content=body, headers=headers)
        replay = await http.post("/hooks/ticket", content=body, headers=headers)
        later = await http.post(
            "/hooks/ticket", content=body, headers=signed(body, at=time.time() + 1)
        )
    assert first.status_code == 202, first.text
    assert replay.status_code == 200 and replay.json()["run_id"] == first.json()["run_id"]
    # A new signature (another timestamp) is another delivery, made by someone with the secret.
    assert later.status_code == 202 and later.json()["run_id"] != first.json()["run_id"]
    await terminate_all(client, task_queue)


@pytest.mark.parametrize(
    ("skew", "words"), [(-301, "s old"), (+301, "s in the future")], ids=["old", "future"]
)
async def test_a_timestamp_outside_the_window_is_refused(
    client: Client, task_queue: str, skew: int, words: str
) -> None:
    body = json.dumps({"ticket": f"late {task_queue}"}).encode()
    async with edge(client, task_queue) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        stale = await http.post(
            "/hooks/ticket", content=body, headers=signed(body, at=time.time() + skew)
        )
        short = await http.post(
            "/hooks/ticket", content=body, headers=signed(body, at=time.time() - 30)
        )
    assert stale.status_code == 401
    assert words in stale.json()["error"] and "300 s either way" in stale.json()["error"]
    assert short.status_code == 202, short.text
    await terminate_all(client, task_queue)


async def test_a_configured_tolerance_is_the_window(client: Client, task_queue: str) -> None:
    body = json.dumps({"ticket": "t"}).encode()
    async with (
        edge(client, task_queue, tolerance_s=10) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        stale = await http.post(
            "/hooks/ticket", content=body, headers=signed(body, at=time.time() - 30)
        )
    assert stale.status_code == 401 and "10 s either way" in stale.json()["error"]


def body_only(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


async def test_the_empty_body_signature_without_a_fresh_timestamp_is_refused(
    client: Client, task_queue: str
) -> None:
    empty = body_only(b"")  # the old scheme's signature of nothing: it worked forever
    async with edge(client, task_queue) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        listing = await http.get("/", headers={"X-Armature-Signature-256": empty})
        hook = await http.get("/hooks/ticket", headers={"X-Hub-Signature-256": empty})
        post = await http.post("/hooks/ticket", headers={"X-Armature-Signature-256": empty})
        fresh = await http.get("/", headers=signed(b"", method="GET", path="/"))
    for answer in (listing, hook, post):
        assert answer.status_code == 401, answer.text
        assert "without X-Armature-Timestamp" in answer.json()["error"]
        assert SIGNED_FORM in answer.json()["error"]
    assert fresh.status_code == 200 and fresh.json()["hooks"][0]["path"] == "/hooks/ticket"


async def test_accepted_body_only_signatures_start_one_run_per_body_whatever_the_key(
    client: Client, task_queue: str
) -> None:
    body = json.dumps({"ticket": f"from github {task_queue}"}).encode()
    github = {"X-Hub-Signature-256": body_only(body), "X-GitHub-Delivery": "d-1"}
    async with (
        edge(client, task_queue, accept_body_signatures=True) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        first = await http.post("/hooks/ticket", content=body, headers=github)
        replay = await http.post(
            "/hooks/ticket", content=body, headers={**github, "X-GitHub-Delivery": "d-2"}
        )
        listing = await http.get("/", headers={"X-Hub-Signature-256": body_only(b"")})
    assert first.status_code == 202, first.text
    assert replay.status_code == 200 and replay.json()["run_id"] == first.json()["run_id"]
    assert listing.status_code == 401, "a body-only signature must never admit a GET"
    await terminate_all(client, task_queue)


TWO_HOOKS = """\
name: twohooks
model_tiers: {small: {provider: simulate}}
inputs:
  type: object
  properties:
    ticket: {type: string}
  required: [ticket]
triggers:
  - {type: webhook, path: /hooks/ticket}
  - {type: webhook, path: /hooks/refund, inputs: {ticket: "refund everything"}}
stages:
  - {id: s, role: {name: S, description: "{{ inputs.ticket }}"}}
"""


async def test_a_delivery_signed_for_one_hook_is_refused_by_another(
    client: Client, task_queue: str
) -> None:
    """#25: a signed delivery to one hook, replayed to another, started a run there. The
    method and path are signed now: the replay is 401 and starts nothing."""
    body = json.dumps({"ticket": f"to ticket {task_queue}"}).encode()
    captured = signed(body, key="d-1", path="/hooks/ticket")
    async with (
        edge(client, task_queue, spec=TWO_HOOKS) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        replayed = await http.post("/hooks/refund", content=body, headers=captured)
        meant = await http.post("/hooks/ticket", content=body, headers=captured)
    assert replayed.status_code == 401, replayed.text
    assert "'POST', '/hooks/refund', 'd-1'" in replayed.json()["error"]
    assert meant.status_code == 202, meant.text
    running = f"TaskQueue = '{task_queue}'"
    started = [w.id async for w in client.list_workflows(running)]
    assert started == [meant.json()["run_id"]], "the replay must start nothing"
    await terminate_all(client, task_queue)


async def test_a_signed_get_is_not_a_post(client: Client, task_queue: str) -> None:
    """A signature of a GET (an empty body) was a valid POST with an empty body: on a hook
    whose trigger gives every input, it started a run."""
    listing = signed(b"", method="GET", path="/")
    on_hook = signed(b"", method="GET", path="/hooks/refund")
    async with (
        edge(client, task_queue, spec=TWO_HOOKS) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        assert (await http.get("/", headers=listing)).status_code == 200
        assert (await http.get("/hooks/refund", headers=on_hook)).status_code == 405
        as_post = [
            await http.post("/hooks/refund", headers=listing),
            await http.post("/hooks/refund", headers=on_hook),
        ]
    for answer in as_post:
        assert answer.status_code == 401, answer.text
    assert [w async for w in client.list_workflows(f"TaskQueue = '{task_queue}'")] == []


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"Host": "evil.example:8787"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
    ],
    ids=["rebound-host", "rebound-host-port", "other-origin", "null-origin"],
)
async def test_a_loopback_server_without_a_secret_refuses_pages_elsewhere(
    client: Client, task_queue: str, headers: dict[str, str]
) -> None:
    """#25: the run API refused a token-less request from a page elsewhere (DNS rebinding,
    another site's form) with 403 cross_site, but the webhooks on the same loopback server
    started runs for it."""
    body = json.dumps({"ticket": f"from a page {task_queue}"}).encode()
    async with (
        edge(client, task_queue, secret=None) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        refused = await http.post("/hooks/ticket", content=body, headers=headers)
        listing = await http.get("/", headers=headers)
        local = await http.post("/hooks/ticket", content=body)
    for answer in (refused, listing):
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "cross_site"
        assert "http://127.0.0.1:<port>" in answer.json()["error"]
    assert local.status_code == 202, local.text
    runs = [w.id async for w in client.list_workflows(f"TaskQueue = '{task_queue}'")]
    assert runs == [local.json()["run_id"]], "the page's request must start nothing"
    await terminate_all(client, task_queue)


async def test_beyond_loopback_or_with_a_secret_the_host_is_not_checked(
    client: Client, task_queue: str
) -> None:
    """The cross-site rule is for an open loopback server: a secret authenticates the
    sender, and a server opened beyond loopback (--allow-unauthenticated, a proxy in front)
    is reached by other names on purpose."""
    body = json.dumps({"ticket": f"proxied {task_queue}"}).encode()
    rebound = {"Host": "hooks.example.com"}
    async with (
        edge(client, task_queue, secret=None, loopback=False) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        proxied = await http.post("/hooks/ticket", content=body, headers=rebound)
    async with edge(client, task_queue) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        holder = await http.post(
            "/hooks/ticket", content=body, headers={**rebound, **signed(body, key="p-2")}
        )
    assert proxied.status_code == 202, proxied.text
    assert holder.status_code == 202, holder.text
    await terminate_all(client, task_queue)


# -- slow and unauthenticated bodies ---------------------------------------------------------


async def test_a_slow_loris_body_is_cut_off_within_the_timeout(
    client: Client, task_queue: str
) -> None:
    head = post_head(f"Authorization: Bearer {SECRET}\r\n", length=10_000)
    async with edge(client, task_queue, request_timeout_s=1.0) as srv:
        answer, took = await dribble(srv.port, head, wait_s=20)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"took over 1 s to arrive" in answer
    assert 0.9 < took < 10.0, f"cut off after {took:.2f} s with a 1 s timeout"


async def test_slow_request_headers_are_cut_off_within_the_timeout(
    client: Client, task_queue: str
) -> None:
    async with edge(client, task_queue, request_timeout_s=1.0) as srv:
        # Headers that never end: the server closes without answering.
        answer, took = await dribble(
            srv.port, b"POST /hooks/ticket HTTP/1.1\r\nHost: edge.test\r\nX-Slow: a", wait_s=20
        )
        idle, idle_took = await exchange(srv.port, b"", wait_s=20)  # a connection sending nothing
    assert answer == b"" and idle == b""
    assert 0.9 < took < 10.0, f"headers cut off after {took:.2f} s with a 1 s timeout"
    assert 0.9 < idle_took < 10.0, f"idle connection closed after {idle_took:.2f} s"


async def test_an_unsigned_small_body_gets_the_401_that_says_how_to_sign(
    client: Client, task_queue: str
) -> None:
    """A sender not yet signing (a plain client posting a small JSON body) must read the 401
    that tells it what to fix, not a connection reset: the server drops a small body before
    it answers and closes. Closing on the unread body made the kernel reset the connection,
    and the client lost the answer (seen once in a full-suite run under load, with httpx;
    not reproducible on demand, so this is a guard)."""
    async with edge(client, task_queue) as srv:
        for _ in range(20):
            async with httpx.AsyncClient(base_url=srv.url, timeout=10) as http:
                answer = await http.post("/hooks/ticket", json={"ticket": "x" * 2000})
            assert answer.status_code == 401, answer.text
            assert "X-Armature-Signature-256" in answer.json()["error"]


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: 900000\r\n",
        "Content-Length: 100000000\r\n",
        "Transfer-Encoding: chunked\r\n",
    ],
    ids=["under-cap", "huge", "chunked"],
)
async def test_an_unauthenticated_body_is_refused_before_it_is_read(
    client: Client, task_queue: str, framing: str
) -> None:
    async with edge(client, task_queue, request_timeout_s=30.0) as srv:
        # Only the headers are sent: the answer must come without waiting for the body.
        answer, took = await exchange(srv.port, post_head(framing), wait_s=5)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b"no credentials" in answer
    assert b"connection: close" in answer.lower(), "the rest of the body must not be read"
    assert took < 5


async def test_the_connection_ceiling_answers_503(client: Client, task_queue: str) -> None:
    """Connections are capped at the sum of the budgets (ordinary, reserved, streams): past
    it, whatever the path, 503."""
    async with edge(
        client, task_queue, request_timeout_s=10.0, max_concurrency=2, reserved=1, max_streams=1
    ) as srv:
        held = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(4)]
        await asyncio.sleep(0.1)
        try:
            async with httpx.AsyncClient(base_url=srv.url) as http:
                answer = await http.get("/healthz")
        finally:
            for _, writer in held:
                writer.close()
    assert answer.status_code == 503


async def test_idle_keep_alive_connections_give_way_to_a_new_one(
    client: Client, task_queue: str
) -> None:
    """Clients that keep connections open between requests hold no capacity: when the
    server is full, a new connection closes the idle ones first and is served."""
    async with edge(
        client, task_queue, request_timeout_s=10.0, max_concurrency=2, reserved=1, max_streams=1
    ) as srv:
        idle = []
        for _ in range(4):  # the ceiling: 2 + 1 + 1, each answered once and kept alive
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200"), head
            idle.append((reader, writer))
        try:
            async with httpx.AsyncClient(base_url=srv.url) as http:
                answer = await http.get("/healthz")
        finally:
            for _, writer in idle:
                writer.close()
    assert answer.status_code == 200, answer.text


async def test_requests_at_the_limit_leave_health_its_reserved_capacity(
    client: Client, task_queue: str
) -> None:
    """#25: ordinary requests held open fill --max-concurrency; another is 503 ``busy`` (JSON
    naming the limit), while ``GET /healthz`` still answers from the capacity kept for it."""
    async with edge(
        client, task_queue, request_timeout_s=5.0, max_concurrency=2, reserved=2, max_streams=2
    ) as srv:
        # Two deliveries whose bodies never come: in progress until the body deadline.
        head = post_head(f"Authorization: Bearer {SECRET}\r\n", length=100)
        held = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(2)]
        try:
            for _, writer in held:
                writer.write(head)
                await writer.drain()
            await asyncio.sleep(0.3)
            async with httpx.AsyncClient(base_url=srv.url) as http:
                busy = await http.get("/", headers={"Authorization": f"Bearer {SECRET}"})
            async with httpx.AsyncClient(base_url=srv.url) as http:
                health = await http.get("/healthz")
        finally:
            for _, writer in held:
                writer.close()
    assert busy.status_code == 503, busy.text
    assert busy.json()["error"]["code"] == "busy"
    assert "--max-concurrency" in busy.json()["error"]["fix"]
    assert health.status_code == 200, health.text


# -- bodies that broke the server ------------------------------------------------------------


async def test_deep_nesting_and_lone_surrogates_are_400_not_500(
    client: Client, task_queue: str
) -> None:
    deep = b'{"ticket": "t", "payload": ' + b'{"a": ' * 500 + b"1" + b"}" * 500 + b"}"
    deeper = b'{"ticket": "t", "payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    surrogate = b'{"ticket": "\\ud800"}'
    surrogate_key = b'{"ticket": "t", "payload": {"\\udfff": 1}}'
    bearer = {"Authorization": f"Bearer {SECRET}"}
    async with edge(client, task_queue) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        answers = {
            name: await http.post("/hooks/ticket", content=body, headers=bearer)
            for name, body in [
                ("deep", deep),
                ("deeper", deeper),
                ("surrogate", surrogate),
                ("surrogate-key", surrogate_key),
            ]
        }
        fine = await http.post(
            "/hooks/ticket", content=b'{"ticket": "\\ud83d\\ude00 ok"}', headers=bearer
        )
    for name in ("deep", "deeper"):
        assert answers[name].status_code == 400, (name, answers[name].text)
        assert "nested deeper than 64 levels" in answers[name].json()["error"]
    for name in ("surrogate", "surrogate-key"):
        assert answers[name].status_code == 400, (name, answers[name].text)
        assert "lone surrogate" in answers[name].json()["error"]
    assert "$.ticket" in answers["surrogate"].json()["error"]
    assert fine.status_code == 202, fine.text
    await terminate_all(client, task_queue)


# -- the secret and what it guards ------------------------------------------------------------


async def test_a_non_ascii_bearer_secret_is_accepted(client: Client, task_queue: str) -> None:
    secret = "sécret-ü-密钥"
    async with edge(client, task_queue, secret=secret) as srv:
        token = f"Authorization: Bearer {secret}\r\n".encode()
        body = b'{"ticket": "unicode"}'
        head = post_head(length=len(body))[:-2] + token + b"Connection: close\r\n\r\n"
        answer, _ = await exchange(srv.port, head, body=body)
        wrong = (
            post_head(length=len(body))[:-2]
            + "Authorization: Bearer sécret\r\nConnection: close\r\n\r\n".encode()
        )
        refused, _ = await exchange(srv.port, wrong, body=body)
    assert answer.startswith(b"HTTP/1.1 202"), answer[:300]
    assert refused.startswith(b"HTTP/1.1 401") and b"bearer token is wrong" in refused
    await terminate_all(client, task_queue)


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"])
async def test_the_api_schema_and_docs_are_behind_the_secret(
    client: Client, task_queue: str, path: str
) -> None:
    async with edge(client, task_queue) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        anonymous = await http.get(path)
        holder = await http.get(path, headers={"Authorization": f"Bearer {SECRET}"})
    assert anonymous.status_code == 401
    assert "hooks/ticket" not in anonymous.text
    assert holder.status_code == 404, "the schema is off altogether"


# -- the README's senders ---------------------------------------------------------------------


def readme_block(language: str, marker: str) -> str:
    """The README's ``language`` code block in the webhook section that contains ``marker``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Webhook triggers", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)
    found = [b for b in blocks if marker in b]
    assert found, f"no {language} block with {marker!r} in the README's webhook section"
    return textwrap.dedent(found[0])


async def test_the_readme_signing_examples_start_runs(client: Client, task_queue: str) -> None:
    import os
    import sys

    python = readme_block("python", "X-Armature-Timestamp")
    shell = readme_block("bash", "openssl dgst")
    assert "key=ticket-4711;" in shell
    shell = shell.replace("key=ticket-4711;", f"key={task_queue};")  # unique in this session
    async with edge(client, task_queue, spec="specs/customer-triage.yaml") as srv:
        env = {**os.environ, "ARMATURE_WEBHOOK_SECRET": SECRET}
        answers = []
        for argv in (
            [sys.executable, "-c", python.replace("http://localhost:8787", srv.url)],
            ["bash", "-c", "set -eu\n" + shell.replace("localhost:8787", srv.url)],
        ):
            proc = await asyncio.create_subprocess_exec(
                *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, errs = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, errs.decode()
            answers.append(json.loads(out.decode().strip().splitlines()[-1]))
    for answer in answers:
        assert answer["spec"] == "customer-triage", answer
        assert answer["duplicate"] is False
    await terminate_all(client, task_queue)
