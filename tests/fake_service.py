"""``fake_service``: an in-memory ASGI app answering the run API's HTTP contract (#18), for
testing the HTTP client without Temporal. Runs are scripted by spec name:

- ``quick`` completes at once: outputs ``{"echo": inputs}``;
- ``slow`` is running until its status has been read twice, then completes;
- ``gated`` waits at gate ``review`` until decided (approve: completes; reject: rejected);
- ``breaks`` fails at stage ``s`` with error ``boom``.

``FakeServiceState.drop_after`` makes the first ``GET /run/{id}/events`` connection break
(the server aborts it mid-stream) after that many events, as a lost connection would;
``unavailable`` answers that many events requests 503 first, as a restarting server would.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class FakeRun:
    run_id: str
    spec: str
    inputs: dict[str, Any]
    status: str = "running"
    state: str = "running"
    reason: str | None = None
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    pending: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    reads: int = 0

    def view(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "spec_name": self.spec,
            "status": self.status,
            "state": self.state,
            "reason": self.reason,
            "stages": self.stages,
            "outputs": self.outputs,
            "pending_gates": self.pending,
            "refused_signals": [],
        }


@dataclass
class FakeServiceState:
    #: token -> (name, scopes); empty: the server is open (loopback).
    tokens: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    runs: dict[str, FakeRun] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    drop_after: int | None = None
    #: How many events requests to answer 503 temporal_unreachable (a restart) first.
    unavailable: int = 0
    #: Last-Event-ID (or None) of each events connection, in order.
    resumed_from: list[str | None] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class FakeRefusal(Exception):
    def __init__(self, status: int, code: str, message: str, fix: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.fix = status, code, message, fix


def fake_service(state: FakeServiceState) -> FastAPI:
    app = FastAPI()

    @app.exception_handler(FakeRefusal)
    async def refused(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, FakeRefusal)
        body = {"error": {"code": exc.code, "message": exc.message, "fix": exc.fix}}
        return JSONResponse(body, status_code=exc.status)

    def caller(request: Request, scope: str) -> str:
        if not state.tokens:
            return "loopback"
        header = request.headers.get("authorization", "")
        token = header.removeprefix("Bearer ").strip()
        if token not in state.tokens:
            raise FakeRefusal(401, "unauthorized", "no valid token", "send a Bearer token")
        name, scopes = state.tokens[token]
        if scope not in scopes and "admin" not in scopes:
            raise FakeRefusal(403, "forbidden", f"token {name!r} lacks {scope!r}", "use another")
        return name

    def emit(run: FakeRun, kind: str, stage: str | None, **data: Any) -> None:
        run.events.append(
            {
                "seq": len(run.events) + 1,
                "type": kind,
                "run_id": run.run_id,
                "stage": stage,
                "at": _now(),
                "data": data,
            }
        )
        state.changed.set()

    def finish(run: FakeRun, state_: str, reason: str | None = None) -> None:
        run.status = "completed" if state_ == "completed" else "failed"
        run.state, run.reason = state_, reason
        if state_ == "completed":
            emit(run, "run_complete", None, status="completed", outputs=run.outputs)
        else:
            emit(run, "run_failed", None, status=state_, reason=reason)

    def begin(run: FakeRun) -> None:
        if run.spec == "quick":
            emit(run, "stage_start", "s", attempt=1)
            run.stages["s"] = {"status": "completed", "output": {"echo": run.inputs}}
            run.outputs = {"s": {"echo": run.inputs}}
            emit(run, "stage_complete", "s", status="completed", output={"echo": run.inputs})
            finish(run, "completed")
        elif run.spec == "breaks":
            emit(run, "stage_start", "s", attempt=1)
            run.stages["s"] = {"status": "failed", "error": "boom"}
            emit(run, "stage_complete", "s", status="failed", error="boom")
            finish(run, "failed", "stage 's' failed: boom")
        elif run.spec == "gated":
            emit(run, "stage_start", "draft", attempt=1)
            run.stages["draft"] = {"status": "completed", "output": "a draft"}
            emit(run, "stage_complete", "draft", status="completed", output="a draft")
            run.stages["review"] = {"status": "waiting_gate"}
            run.pending = [{"stage": "review", "message": "ok?", "since": _now()}]
            run.state = "waiting_gate"
            emit(run, "gate_waiting", "review", message="ok?", timeout_s=None, on_timeout="fail")

    def start(request: Request, spec: str, inputs: dict[str, Any]) -> tuple[FakeRun, bool]:
        who = caller(request, "run")
        if spec not in ("quick", "slow", "gated", "breaks"):
            raise FakeRefusal(404, "unknown_spec", f"no spec {spec!r}", "use a served one")
        key = request.headers.get("idempotency-key")
        if key:
            digest = hashlib.sha256(f"{who}\n{spec}\n{key}".encode()).hexdigest()[:16]
            run_id = f"{spec}-api-{digest}"
            if run_id in state.runs:
                return state.runs[run_id], True
        else:
            run_id = f"{spec}-{len(state.started) + 1}"
        run = FakeRun(run_id, spec, inputs)
        state.runs[run_id] = run
        state.started.append(run_id)
        begin(run)
        return run, False

    def links(run: FakeRun) -> dict[str, str]:
        return {"self": f"/run/{run.run_id}", "events": f"/run/{run.run_id}/events"}

    def run_of(run_id: str) -> FakeRun:
        if run_id not in state.runs:
            raise FakeRefusal(404, "unknown_run", f"no run {run_id!r}", "list runs")
        return state.runs[run_id]

    @app.post("/run/async")
    async def run_async(request: Request) -> JSONResponse:
        body = await request.json()
        run, duplicate = start(request, body["spec"], body.get("inputs") or {})
        answer: dict[str, Any] = {"run_id": run.run_id, "status": "running", "links": links(run)}
        if duplicate:
            return JSONResponse({**answer, "status": run.status, "duplicate": True})
        return JSONResponse(answer, status_code=202)

    @app.post("/run")
    async def run_wait(request: Request, wait: int = 30) -> JSONResponse:
        body = await request.json()
        run, duplicate = start(request, body["spec"], body.get("inputs") or {})
        if run.status == "running":
            answer = {"run_id": run.run_id, "status": "running", "links": links(run)}
            return JSONResponse(answer, status_code=200 if duplicate else 202)
        return JSONResponse(
            {
                "run_id": run.run_id,
                "status": run.state,
                "outputs": run.outputs,
                "stages": run.stages,
                **({"duplicate": True} if duplicate else {}),
            }
        )

    @app.get("/run/{run_id}")
    async def show(run_id: str, request: Request) -> JSONResponse:
        caller(request, "read")
        run = run_of(run_id)
        run.reads += 1
        if run.spec == "slow" and run.status == "running" and run.reads >= 2:
            run.stages["s"] = {"status": "completed", "output": 42}
            run.outputs = {"s": 42}
            finish(run, "completed")
        return JSONResponse(run.view())

    @app.delete("/run/{run_id}")
    async def cancel(run_id: str, request: Request) -> JSONResponse:
        caller(request, "run")
        run = run_of(run_id)
        ended = run.status != "running"
        if not ended:
            run.status = run.state = "cancelled"
            run.reason = "the run was cancelled"
            emit(run, "run_failed", None, status="cancelled", reason=run.reason)
        return JSONResponse({"run_id": run_id, "status": run.status, "already_ended": ended})

    @app.post("/run/{run_id}/gates/{stage}")
    async def decide(run_id: str, stage: str, request: Request) -> JSONResponse:
        who = caller(request, "approve")
        run = run_of(run_id)
        body = await request.json()
        if not any(g["stage"] == stage for g in run.pending):
            raise FakeRefusal(409, "not_waiting", f"{stage!r} is not waiting", "see /gates")
        decision = body["decision"]
        comment = body.get("comment") or body.get("reason")
        state.decisions.append({"run_id": run_id, "stage": stage, **body, "by": who})
        run.pending = []
        gate = {"stage": stage, "decision": decision, "comment": comment, "by": who}
        emit(run, "gate_decided", stage, decision=decision, by=who, comment=comment)
        if decision == "approve":
            run.stages[stage] = {"status": "completed", "gate": gate}
            run.outputs = {"draft": "a draft", stage: None}
            finish(run, "completed")
        else:
            run.stages[stage] = {"status": "rejected", "gate": gate}
            finish(run, "rejected", f"gate {stage!r} rejected: {comment}")
        answer = f"{decision}d {stage}"
        return JSONResponse(
            {"run_id": run_id, "stage": stage, "decision": decision, "by": who, "answer": answer}
        )

    @app.get("/run/{run_id}/events")
    async def events(run_id: str, request: Request) -> StreamingResponse:
        caller(request, "read")
        run = run_of(run_id)
        resume = request.headers.get("last-event-id")
        if state.unavailable > 0:
            state.unavailable -= 1
            raise FakeRefusal(503, "temporal_unreachable", "Temporal is down", "retry")
        state.resumed_from.append(resume)
        after = int(resume or request.query_params.get("after") or 0)
        drop = state.drop_after if len(state.resumed_from) == 1 else None

        async def stream() -> AsyncIterator[str]:
            sent = 0
            seq = after
            yield ": keepalive\n\n"
            while True:
                for event in run.events[seq:]:
                    if drop is not None and sent == drop:
                        raise ConnectionAbortedError("fake_service drops the stream")
                    yield f"id: {event['seq']}\nevent: {event['type']}\n"
                    yield f"data: {json.dumps(event)}\n\n"
                    seq, sent = event["seq"], sent + 1
                    if event["type"] in ("run_complete", "run_failed"):
                        return
                state.changed.clear()
                await state.changed.wait()

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app
