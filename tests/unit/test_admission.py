"""Admission by class (#25: 64 event streams took every connection and `/health`, approvers
and `/ui/login` got 503): which requests are which, and each class's budget, over a fake ASGI
app that holds requests open until told."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from armature_temporal.service.admission import Admission, request_class


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/run/r-1/events", "stream"),
        ("GET", "/run/a%2Fb/events", "stream"),
        ("GET", "/health", "priority"),
        ("GET", "/healthz", "priority"),
        ("POST", "/run/r-1/gates/approve_reply", "priority"),
        ("GET", "/ui", "priority"),
        ("GET", "/ui/login", "priority"),
        ("POST", "/ui/login", "priority"),
        ("POST", "/ui/runs/r-1/gates/approve_reply", "priority"),
        ("POST", "/run/async", "ordinary"),
        ("GET", "/run/r-1", "ordinary"),
        ("GET", "/gates", "ordinary"),
        ("POST", "/ui/logout", "ordinary"),
        ("POST", "/run/r-1/events", "ordinary"),
        ("GET", "/run/r-1/gates/approve_reply", "ordinary"),
        ("POST", "/hooks/ticket", "ordinary"),
        ("GET", "/run/r-1/events/more", "ordinary"),
    ],
)
def test_request_class_from_method_and_path(method: str, path: str, kind: str) -> None:
    assert request_class(method, path) == kind


class FakeHeldApp:
    """An ASGI app that answers 200 once ``release`` is set; counts calls."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(app: Admission, method: str, path: str) -> tuple[int, dict[str, Any]]:
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body) if body != b"ok" else {}


async def test_ordinary_requests_fill_their_budget_and_priority_ones_use_the_reserve() -> None:
    inner = FakeHeldApp()
    app = Admission(inner, max_concurrency=2, reserved=1)
    held = [asyncio.ensure_future(call(app, "POST", "/run/async")) for _ in range(2)]
    await asyncio.sleep(0)
    assert app.in_flight["ordinary"] == 2
    status, body = await call(app, "GET", "/gates")
    assert status == 503 and body["error"]["code"] == "busy"
    assert "--max-concurrency" in body["error"]["fix"]
    health = asyncio.ensure_future(call(app, "GET", "/health"))
    await asyncio.sleep(0)
    assert app.in_flight["priority"] == 1, "the reserve admits health"
    status, body = await call(app, "POST", "/run/r/gates/g")
    assert status == 503 and "kept for health, gate decisions and login" in body["error"]["message"]
    streams = [asyncio.ensure_future(call(app, "GET", "/run/r/events")) for _ in range(5)]
    await asyncio.sleep(0)
    assert inner.calls == 2 + 1 + 5, "streams are the route's to count, never refused here"
    inner.release.set()
    answers = await asyncio.gather(*held, health, *streams)
    assert [status for status, _ in answers] == [200] * 8
    assert app.in_flight == {"stream": 0, "priority": 0, "ordinary": 0}
