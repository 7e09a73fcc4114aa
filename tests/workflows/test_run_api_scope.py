"""The run API attacked over real HTTP (#25): a token read, cancelled and decided runs of specs
its server does not serve; a lone surrogate in a body was a 500. Now another spec's run is
404 exactly as a run that does not exist (unless `--all-runs`), in the API and in the inbox,
and a body that is not text is a 400 naming the place — in the JSON routes and the inbox's
forms alike — with nothing done."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from armature_temporal.spec.compiler import compile_spec, load_plan
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from tests.fakes import SPECS, start, wait_for_gate
from tests.ui.inbox_harness import csrf_of
from tests.workflows.run_api_harness import bearer, plans, serving, until
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")


@pytest.fixture
def store() -> Iterator[TraceStore]:
    opened = TraceStore()
    yield opened
    opened.close()


@pytest.fixture
async def other_specs_run(
    client: Client, task_queue: str
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """A customer-triage run (started by someone else, on the same namespace) waiting at its
    gate, and a worker for it."""
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"ticket": "not yours"})
        await wait_for_gate(handle, "approve_reply")
        yield handle
        with contextlib.suppress(RPCError):
            await handle.terminate("test over")


async def pending(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The gates the run waits at now."""
    from armature_temporal.runtime.models import RunStatus

    status = await handle.query("status", result_type=RunStatus)
    return [g.stage for g in status.pending_gates]


async def ui_login(http: httpx.AsyncClient, token: str) -> str:
    """Log in at /ui/login; the inbox page after it."""
    form = await http.get("/ui/login")
    assert form.status_code == 200, form.text
    done = await http.post("/ui/login", data={"csrf": csrf_of(form.text), "token": token})
    assert done.status_code == 303, done.text
    page = await http.get("/ui")
    assert page.status_code == 200, page.text
    return page.text


async def test_a_run_of_a_spec_not_served_is_unknown_to_every_route(
    client: Client, task_queue: str, store: TraceStore, other_specs_run: Any
) -> None:
    """A quickstart-only server, an admin token, and a customer-triage run waiting at its
    gate: showing, following, cancelling and deciding it are 404 — the very answer a run that
    does not exist gets — the gate lists and the inbox leave it out, and the run still waits,
    undecided and not cancelled."""
    run_id = other_specs_run.id
    admin = store.create_token("ops", ["admin"])
    quickstart_only = plans("quickstart.yaml")
    async with serving(client, task_queue, store, served=quickstart_only) as http:
        auth = bearer(admin)
        gate = {"decision": "approve", "comment": "not mine to approve"}
        answers = {
            "show": await http.get(f"/run/{run_id}", headers=auth),
            "events": await http.get(f"/run/{run_id}/events", headers=auth),
            "cancel": await http.delete(f"/run/{run_id}", headers=auth),
            "decide": await http.post(
                f"/run/{run_id}/gates/approve_reply", json=gate, headers=auth
            ),
        }
        missing = await http.get("/run/no-such-run", headers=auth)
        listed = (await http.get("/gates", headers=auth)).json()
        page = await ui_login(http, admin)
        ui_decide = await http.post(
            f"/ui/runs/{run_id}/gates/approve_reply",
            data={"csrf": csrf_of(page), "decision": "approve"},
        )
    for route, answer in answers.items():
        assert answer.status_code == 404, (route, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "unknown_run", route
        # Word for word what a run that does not exist gets: nothing says this one exists.
        expected = missing.json()["error"]["message"].replace("no-such-run", run_id)
        assert error["message"] == expected, route
    assert "of the specs it serves (quickstart)" in missing.json()["error"]["message"]
    assert run_id not in str(listed)
    assert run_id not in page
    assert ui_decide.status_code == 404 and "Unknown run" in ui_decide.text
    assert "of the specs it serves (quickstart)" in ui_decide.text
    # Nothing was done to it.
    desc = await other_specs_run.describe()
    assert desc.status.name == "RUNNING"
    assert await pending(other_specs_run) == ["approve_reply"]


async def test_all_runs_serves_every_run_of_the_namespace(
    client: Client, task_queue: str, store: TraceStore, other_specs_run: Any
) -> None:
    run_id = other_specs_run.id
    reader = store.create_token("auditor", ["read"])
    quickstart_only = plans("quickstart.yaml")
    async with serving(client, task_queue, store, served=quickstart_only, all_runs=True) as http:
        view = await until(http, run_id, reader, lambda v: v["pending_gates"])
        listed = (await http.get("/gates", headers=bearer(reader))).json()
    assert view["spec_name"] == "customer-triage"
    assert run_id in {g["run_id"] for g in listed["gates"]}


SURROGATE = b"\\ud800"  # as it is sent: the six characters of a JSON escape


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        (
            "/run",
            b'{"spec": "quickstart", "inputs": {"topic": "' + SURROGATE + b'"}}',
            "$.inputs.topic",
        ),
        (
            "/run/async",
            b'{"spec": "quickstart", "inputs": {"topic": "a' + SURROGATE + b'"}}',
            "$.inputs.topic",
        ),
        (
            "/run/async",
            b'{"spec": "quickstart", "inputs": {"' + SURROGATE + b'": "x"}}',
            "$.inputs",
        ),
        ("/workflows/quickstart/run/async", b'{"topic": "\\udfff"}', "$.topic"),
        (
            "/run/RUN/gates/approve_reply",
            b'{"decision": "reject", "reason": "' + SURROGATE + b'"}',
            "$.reason",
        ),
    ],
    ids=["run", "run-async", "run-async-key", "named-run", "gate-decision"],
)
async def test_a_lone_surrogate_in_a_json_body_is_400_naming_the_place(
    client: Client,
    task_queue: str,
    store: TraceStore,
    other_specs_run: Any,
    path: str,
    body: bytes,
    where: str,
) -> None:
    admin = store.create_token("ops", ["admin"])
    async with serving(client, task_queue, store) as http:
        answer = await http.post(
            path.replace("RUN", other_specs_run.id),
            content=body,
            headers={**bearer(admin), "Content-Type": "application/json"},
        )
        fine = await http.post(
            "/run/async",
            json={"spec": "quickstart", "inputs": {"topic": "\U0001f600 both halves"}},
            headers=bearer(admin),
        )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "lone_surrogate"
    assert f"lone surrogate escape at {where} " in error["message"]
    assert "nothing was done" in error["message"]
    assert "both halves of a pair" in error["fix"]
    assert fine.status_code == 202, fine.text
    # Nothing else started, and the gate still waits.
    quickstart = f"TaskQueue = '{task_queue}' AND ArmatureSpecName = 'quickstart'"
    assert [w.id async for w in client.list_workflows(quickstart)] == [fine.json()["run_id"]]
    assert await pending(other_specs_run) == ["approve_reply"]


async def test_json_nested_past_the_limit_is_400_in_the_api(
    client: Client, task_queue: str, store: TraceStore
) -> None:
    admin = store.create_token("ops", ["admin"])
    deep = b'{"spec": "quickstart", "inputs": {"topic": ' + b"[" * 100 + b"]" * 100 + b"}}"
    async with serving(client, task_queue, store) as http:
        answer = await http.post(
            "/run/async",
            content=deep,
            headers={**bearer(admin), "Content-Type": "application/json"},
        )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "too_deep"
    assert "nested deeper than 64 levels (at $.inputs.topic" in answer.json()["error"]["message"]


async def test_a_form_field_that_is_not_text_is_400_in_the_inbox_and_decides_nothing(
    client: Client, task_queue: str, store: TraceStore, other_specs_run: Any
) -> None:
    """A comment holding %ED%A0%80 (a lone surrogate as bytes): it was stored as replacement
    characters the approver never typed; now the inbox refuses it, and the gate still waits."""
    run_id = other_specs_run.id
    approver = store.create_token("alice", ["read", "approve"])
    async with serving(client, task_queue, store) as http:
        page = await ui_login(http, approver)
        answer = await http.post(
            f"/ui/runs/{run_id}/gates/approve_reply",
            content=f"csrf={csrf_of(page)}&decision=approve&comment=ok%ED%A0%80".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    assert answer.status_code == 400, answer.text[:500]
    assert "Not text" in answer.text
    assert "the form&#39;s field &#39;comment&#39; is not UTF-8 text" in answer.text
    await asyncio.sleep(0.3)
    assert await pending(other_specs_run) == ["approve_reply"]


async def test_a_fan_out_child_belongs_to_its_parents_spec(
    client: Client, task_queue: str, store: TraceStore, tmp_path: Path
) -> None:
    """A child run has no spec name of its own (no search attributes): a server serving its
    parent's spec lists its waiting gate; one serving another spec does not."""
    (tmp_path / "gated.yaml").write_text(
        "name: gated-child\nstages:\n  - id: vote\n    gate: {type: human, message: ok?}\n"
    )
    (tmp_path / "poll.yaml").write_text(
        "name: poll\nmodel_tiers: {frontier: {provider: simulate}}\nstages:\n"
        "  - {id: ask, subagent_spec: gated.yaml, fan_out: 1, fan_in: list}\n"
    )
    poll = compile_spec(load_spec(tmp_path / "poll.yaml"))
    reader = store.create_token("auditor", ["read"])
    async with build_worker(client, task_queue):
        parent = await start(client, poll, task_queue)
        child = client.get_workflow_handle(f"{parent.id}/ask/0")
        for _ in range(100):
            with contextlib.suppress(RPCError):
                await wait_for_gate(child, "vote", timeout_s=0.5)
                break
        async with serving(client, task_queue, store, served={poll.name: poll}) as http:
            listed: dict[str, Any] = {}
            for _ in range(100):  # visibility catches up with the child's waiting flag
                listed = (await http.get("/gates", headers=bearer(reader))).json()
                if child.id in {g["run_id"] for g in listed["gates"]}:
                    break
                await asyncio.sleep(0.1)
        async with serving(client, task_queue, store, served=plans("quickstart.yaml")) as http:
            unlisted = (await http.get("/gates", headers=bearer(reader))).json()
        await parent.terminate("test over")
    assert child.id in {g["run_id"] for g in listed["gates"]}
    assert child.id not in str(unlisted)
