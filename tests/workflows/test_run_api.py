"""The run API over real HTTP (uvicorn on a free port, the app `armature serve` runs) against a
real Temporal dev server and worker: runs started with /run/async and /run and followed with
GET /run/{id}, idempotency keys, cancelling, and gates — a token without `approve` is refused
(403) and nothing is written; the approver's decision records the token's name."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from armature_temporal.store import TraceStore
from tests.workflows.run_api_harness import bearer, serving, until
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = TraceStore(f"sqlite:///{tmp_path / 'tokens.db'}")
    yield opened
    opened.close()


async def test_run_async_then_get_to_completion_with_idempotent_repeats(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    runner = store.create_token("ci-bot", ["run", "read"])
    other = store.create_token("other-bot", ["run", "read"])
    body = {"spec": "quickstart", "inputs": {"topic": "tide pools"}}
    async with serving(client, task_queue, store) as http, build_worker(client, task_queue):
        assert (await http.post("/run/async", json=body)).status_code == 401
        keyed = {**bearer(runner), "Idempotency-Key": "job-1"}
        started = await http.post("/run/async", json=body, headers=keyed)
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert started.json()["links"] == {
            "self": f"/run/{run_id}",
            "events": f"/run/{run_id}/events",
        }
        again = await http.post("/run/async", json=body, headers=keyed)
        assert again.status_code == 200
        assert (again.json()["run_id"], again.json()["duplicate"]) == (run_id, True)
        # The key is the caller's: another token with the same key starts its own run.
        theirs = await http.post(
            "/run/async", json=body, headers={**bearer(other), "Idempotency-Key": "job-1"}
        )
        assert theirs.status_code == 202 and theirs.json()["run_id"] != run_id
        view = await until(http, run_id, runner, lambda v: v["status"] != "running")
        assert view["status"] == "completed", view
        assert view["spec_name"] == "quickstart"
        assert set(view["stages"]) == {"outline", "draft", "review"}
        assert len(view["outputs"]["outline"]["points"]) == 3
        # POST /run waits for the end and answers the outputs.
        waited = await http.post("/run?wait=60", json=body, headers=bearer(runner))
        assert waited.status_code == 200, waited.text
        assert waited.json()["status"] == "completed"
        assert set(waited.json()["outputs"]) >= {"outline", "draft", "review"}
        # The older shape: POST /workflows/NAME/run/async with the inputs as the body.
        named = await http.post(
            "/workflows/quickstart/run/async", json={"topic": "x"}, headers=bearer(runner)
        )
        assert named.status_code == 202 and named.json()["status"] == "running"
        await until(http, named.json()["run_id"], runner, lambda v: v["status"] != "running")
        invalid = await http.post(
            "/run/async",
            json={"spec": "quickstart", "inputs": {"topic": 3, "topik": "x"}},
            headers=bearer(runner),
        )
        assert invalid.status_code == 422
        error = invalid.json()["error"]
        assert error["code"] == "invalid_inputs"
        assert "topic: 3 is not of type 'string'" in error["message"]
        assert "topik: unknown input (did you mean 'topic'?)" in error["message"]
        missing = await http.get("/run/no-such-run", headers=bearer(runner))
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_run"


async def test_gate_refused_without_approve_then_decided_by_the_approver(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    runner = store.create_token("ci-bot", ["run", "read"])
    approver = store.create_token("alice", ["approve", "read"])
    body = {"spec": "customer-triage", "inputs": {"ticket": "My invoice is wrong"}}
    async with serving(client, task_queue, store) as http, build_worker(client, task_queue):
        started = await http.post("/run/async", json=body, headers=bearer(runner))
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        view = await until(http, run_id, runner, lambda v: v["pending_gates"])
        assert [g["stage"] for g in view["pending_gates"]] == ["approve_reply"]
        listed = (await http.get("/gates", headers=bearer(runner))).json()
        mine = [g for g in listed["gates"] if g["run_id"] == run_id]
        assert [(g["spec"], g["stage"], g["on_timeout"]) for g in mine] == [
            ("customer-triage", "approve_reply", "reject")
        ]
        assert mine[0]["message"].startswith("Send this reply?")

        gate = f"/run/{run_id}/gates/approve_reply"
        refused = await http.post(gate, json={"decision": "approve"}, headers=bearer(runner))
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"
        assert "'approve'" in refused.json()["error"]["message"]
        no_token = await http.post(gate, json={"decision": "approve"})
        assert no_token.status_code == 401
        assert no_token.json()["error"]["code"] == "unauthorized"
        # Nothing was written: the gate still waits, undecided.
        await asyncio.sleep(0.5)
        still = await until(http, run_id, runner, lambda v: True)
        assert [g["stage"] for g in still["pending_gates"]] == ["approve_reply"]
        assert still["stages"]["approve_reply"]["gate"] is None
        assert still["status"] == "running"

        named = await http.post(
            gate, json={"decision": "approve", "by": "mallory"}, headers=bearer(approver)
        )
        assert named.status_code == 422, named.text  # who decided is the token, not the body
        bare_reject = await http.post(gate, json={"decision": "reject"}, headers=bearer(approver))
        assert bare_reject.status_code == 422
        assert bare_reject.json()["error"]["code"] == "reason_required"
        decided = await http.post(
            gate, json={"decision": "approve", "comment": "fine"}, headers=bearer(approver)
        )
        assert decided.status_code == 200, decided.text
        assert {k: decided.json()[k] for k in ("run_id", "stage", "decision", "by")} == {
            "run_id": run_id,
            "stage": "approve_reply",
            "decision": "approve",
            "by": "alice",
        }
        twice = await http.post(gate, json={"decision": "approve"}, headers=bearer(approver))
        assert twice.status_code == 409, twice.text
        assert twice.json()["error"]["code"] == "not_waiting"
        done = await until(http, run_id, runner, lambda v: v["status"] != "running")
        assert done["status"] == "completed", done
        # The token's name, proved by this server with the trace key: no claim, nothing
        # unverified (a name in the body is refused: extra fields are 422).
        assert done["stages"]["approve_reply"]["gate"] == {
            "stage": "approve_reply",
            "decision": "approve",
            "comment": "fine",
            "by": "alice",
            "claimed_by": None,
            "proof": None,
            "unverified": None,
        }
        # The trace records the decision under the token's name too, in a row that checks.
        traces = TraceStore()
        try:
            [decision] = traces.gate_decisions(run_id)
        finally:
            traces.close()
        assert (decision.decision, decision.decided_by, decision.comment) == (
            "approve",
            "alice",
            "fine",
        )
        assert decision.trusted, decision.record_problem
        unknown = await http.post(
            "/run/no-such-run/gates/approve_reply",
            json={"decision": "approve"},
            headers=bearer(approver),
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_run"


async def test_delete_cancels_a_waiting_run_and_says_when_it_had_ended(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    runner = store.create_token("ci-bot", ["run", "read"])
    body = {"spec": "customer-triage", "inputs": {}}
    async with serving(client, task_queue, store) as http, build_worker(client, task_queue):
        run_id = (await http.post("/run/async", json=body, headers=bearer(runner))).json()["run_id"]
        await until(http, run_id, runner, lambda v: v["pending_gates"])
        cancelled = await http.delete(f"/run/{run_id}", headers=bearer(runner))
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json() == {"run_id": run_id, "status": "cancelled", "already_ended": False}
        again = await http.delete(f"/run/{run_id}", headers=bearer(runner))
        assert again.json() == {"run_id": run_id, "status": "cancelled", "already_ended": True}
        gone = await http.delete("/run/no-such-run", headers=bearer(runner))
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "unknown_run"


async def sse_events(
    http: httpx.AsyncClient, run_id: str, token: str, *, last: int | None = None, stop: Any
) -> list[dict[str, Any]]:
    """Read GET /run/{id}/events (resuming after ``last`` with Last-Event-ID) until
    ``stop(event)``, then drop the connection; the events read, in order."""
    headers = bearer(token)
    if last is not None:
        headers["Last-Event-ID"] = str(last)
    got: list[dict[str, Any]] = []
    async with http.stream("GET", f"/run/{run_id}/events", headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        seq, data = None, ""
        async for line in answer.aiter_lines():
            if line.startswith("id:"):
                seq = int(line[3:])
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif line == "" and data:
                event = __import__("json").loads(data)
                assert event["seq"] == seq  # the SSE id is the event's seq
                got.append(event)
                data = ""
                if stop(event):
                    break
    return got


async def test_acceptance_async_run_followed_on_events_across_a_reconnect_and_a_refused_gate(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    """#18's acceptance over real HTTP: /run/async, then /events read in two connections with a
    drop in the middle (at the gate) and Last-Event-ID, losing and repeating nothing; a token
    without approve is refused at the gate (403) and nothing is written; the approver decides
    through the HTTP client; the union of both reads is the run's whole event log."""
    from armature_temporal.http_client import ServiceClient, ServiceError

    runner = store.create_token("ci-bot", ["run", "read"])
    approver = store.create_token("alice", ["approve", "read"])
    body = {"spec": "customer-triage", "inputs": {"ticket": "My invoice is wrong"}}
    async with serving(client, task_queue, store) as http, build_worker(client, task_queue):
        started = await http.post("/run/async", json=body, headers=bearer(runner))
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        first = await sse_events(http, run_id, runner, stop=lambda e: e["type"] == "gate_waiting")
        assert first[-1]["stage"] == "approve_reply"
        base = str(http.base_url)
        async with ServiceClient(base, runner) as as_runner:
            with pytest.raises(ServiceError) as refused:
                await as_runner.handle(run_id).approve("approve_reply")
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        still = await until(http, run_id, runner, lambda v: True)
        assert [g["stage"] for g in still["pending_gates"]] == ["approve_reply"]
        assert still["stages"]["approve_reply"]["gate"] is None
        async with ServiceClient(base, approver) as as_approver:
            await as_approver.handle(run_id).approve("approve_reply", comment="ok")
        rest = await sse_events(
            http,
            run_id,
            runner,
            last=first[-1]["seq"],
            stop=lambda e: e["type"] in ("run_complete", "run_failed"),
        )
        whole = await sse_events(
            http, run_id, runner, stop=lambda e: e["type"] in ("run_complete", "run_failed")
        )
    seqs = [e["seq"] for e in first + rest]
    assert seqs == list(range(1, len(seqs) + 1))  # nothing lost, nothing repeated
    assert [(e["seq"], e["type"], e["stage"]) for e in first + rest] == [
        (e["seq"], e["type"], e["stage"]) for e in whole
    ]
    decided = [e for e in rest if e["type"] == "gate_decided"]
    assert [(e["stage"], e["data"]["decision"], e["data"]["by"]) for e in decided] == [
        ("approve_reply", "approve", "alice")
    ]
    assert rest[-1]["type"] == "run_complete"
