"""The approval inbox (``/ui``) over a real Temporal dev server, through the ASGI app: login
and its cookie, the gates with what an approver needs, decisions recorded with the token's
name, CSRF and scope refusals that write nothing, and escaping."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from markupsafe import escape
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from armature_temporal.runtime.models import RunResult, RunStatus
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, plan_from, start, wait_for_gate
from tests.ui.inbox_harness import FakeAuthorizer, csrf_of, fake_inbox_app, gate_sections
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

BASE = "http://127.0.0.1:8787"  # an open server answers only this machine
#: The inbox shows the runs of the specs its server serves: these tests serve the triage spec.
TRIAGE = load_plan(SPECS / "customer-triage.yaml")


async def browser_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


async def login(http: httpx.AsyncClient, token: str) -> httpx.Response:
    page = await http.get("/ui/login")
    assert page.status_code == 200, page.text
    return await http.post("/ui/login", data={"csrf": csrf_of(page.text), "token": token})


async def section_for(http: httpx.AsyncClient, run_id: str, tries: int = 100) -> tuple[str, str]:
    """The inbox page and the gate card of ``run_id`` (visibility is eventually consistent)."""
    for _ in range(tries):
        page = await http.get("/ui")
        assert page.status_code == 200, page.text
        mine = [s for s in gate_sections(page.text) if f'data-run="{run_id}"' in s]
        if mine:
            return page.text, mine[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} never appeared in the inbox:\n{page.text[:3000]}")


@pytest.fixture
async def triage(
    client: Client, task_queue: str
) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], Any]]:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        status = await wait_for_gate(handle, "approve_reply")
        yield handle, status
        with contextlib.suppress(RPCError):  # a test that decided has ended it already
            await handle.terminate("test over")


async def test_login_then_approve_records_the_token_name_and_the_run_completes(
    client: Client, task_queue: str, triage: Any
) -> None:
    handle, status = triage
    auth = FakeAuthorizer()
    token = auth.add("alice", "read", "approve")
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with await browser_for(fake_inbox_app(client, task_queue, auth, plan)) as http:
        assert (await http.get("/ui")).status_code == 303  # closed server: login first
        answer = await login(http, token)
        assert answer.status_code == 303 and answer.headers["location"] == "/ui"
        cookie = answer.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        page, card = await section_for(http, handle.id)
        assert 'id="who">alice<' in page
        draft = json.dumps(status.stages["draft_reply"].output, indent=2)
        assert str(escape(draft))[:80] in card  # the upstream output the gate asks about
        assert "output of <strong>draft_reply</strong>" in card
        assert str(escape(status.pending_gates[0].message))[:80] in card
        done = await http.post(
            f"/ui/runs/{handle.id}/gates/approve_reply",
            data={"csrf": csrf_of(card), "decision": "approve", "comment": "fine by me"},
        )
        assert done.status_code == 303, done.text
        result: RunResult = await asyncio.wait_for(handle.result(), timeout=60)
        assert result.state == "completed"
        gate = result.stages["approve_reply"].gate
        assert gate is not None
        assert (gate.decision, gate.by, gate.comment) == ("approve", "alice", "fine by me")
        after = await http.get(done.headers["location"])
        assert "approve_reply: approved" in after.text
        # the line is the session's, not the URL's: a link cannot put words on the inbox
        spoof = await http.get("/ui?done=your+token+expired")
        assert "your token expired" not in spoof.text and 'id="done"' not in spoof.text
        assert f'data-run="{handle.id}"' not in after.text
        assert '<td class="by">alice</td>' in after.text  # recent decisions, from the store


async def test_a_read_only_token_sees_the_gate_without_buttons_and_a_forged_post_writes_nothing(
    client: Client, task_queue: str, triage: Any
) -> None:
    handle, _ = triage
    auth = FakeAuthorizer()
    auth.add("approver", "approve")  # another token exists; this one may only read
    reader = auth.add("reader", "read")
    async with await browser_for(fake_inbox_app(client, task_queue, auth, TRIAGE)) as http:
        await login(http, reader)
        page, card = await section_for(http, handle.id)
        assert "Approve</button>" not in card and 'id="read-only"' in page
        before = (await handle.describe()).history_length
        forged = await http.post(
            f"/ui/runs/{handle.id}/gates/approve_reply",
            data={"csrf": csrf_of(page), "decision": "approve"},
        )
        assert forged.status_code == 403
        assert "may not decide gates" in forged.text and "nothing was" in forged.text
        assert (await handle.describe()).history_length == before
        st = await handle.query("status", result_type=RunStatus)
        assert [g.stage for g in st.pending_gates] == ["approve_reply"]


async def test_a_post_without_the_csrf_token_or_from_another_site_is_refused_and_writes_nothing(
    client: Client, task_queue: str, triage: Any
) -> None:
    handle, _ = triage
    auth = FakeAuthorizer()
    token = auth.add("alice", "approve", "read")
    path = f"/ui/runs/{handle.id}/gates/approve_reply"
    async with await browser_for(fake_inbox_app(client, task_queue, auth, TRIAGE)) as http:
        await login(http, token)
        _, card = await section_for(http, handle.id)
        before = (await handle.describe()).history_length
        missing = await http.post(path, data={"decision": "approve"})
        wrong = await http.post(path, data={"decision": "approve", "csrf": "0" * 64})
        cross = await http.post(
            path,
            data={"decision": "approve", "csrf": csrf_of(card)},
            headers={"origin": "https://evil.example"},
        )
        referer = await http.post(
            path,
            data={"decision": "approve", "csrf": csrf_of(card)},
            headers={"referer": "https://evil.example/page"},
        )
        assert [r.status_code for r in (missing, wrong, cross, referer)] == [403] * 4
        assert "CSRF" in missing.text and "another site" in cross.text
        # another session's token is no good either: it is bound to the session it was made for
        async with await browser_for(fake_inbox_app(client, task_queue, auth, TRIAGE)) as other:
            await login(other, token)
            stolen = await other.post(path, data={"decision": "approve", "csrf": csrf_of(card)})
            assert stolen.status_code == 403
        assert (await handle.describe()).history_length == before
        # A rejection needs a reason here as in `armature reject` and the API (one rule).
        for blank in ("", "   "):
            reasonless = await http.post(
                path,
                data={"decision": "reject", "csrf": csrf_of(card), "comment": blank},
                headers={"origin": BASE},
            )
            assert reasonless.status_code == 400 and "needs a reason" in reasonless.text
        assert (await handle.describe()).history_length == before
        same = await http.post(
            path,
            data={"decision": "reject", "csrf": csrf_of(card), "comment": "no"},
            headers={"origin": BASE},
        )
        assert same.status_code == 303, same.text
    outcome = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert outcome is not None and outcome.state == "rejected"


async def test_script_in_a_gate_message_and_an_output_renders_inert(
    client: Client, task_queue: str
) -> None:
    plan = plan_from("""\
name: inbox-escape
inputs:
  type: object
  properties: {note: {type: string}}
adapters:
  show:
    type: python
    fn: tests.fakes:fake_adapter_seen
    args: {seen: "{{ inputs.note }}"}
stages:
  - id: echo
    adapter: show
  - id: check
    depends_on: [echo]
    gate: {type: human, message: "really? {{ inputs.note }}"}
""")
    evil = "<script>alert('x')</script><img src=x onerror=alert(1)>"
    auth = FakeAuthorizer()
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"note": evil})
        await wait_for_gate(handle, "check")
        async with await browser_for(fake_inbox_app(client, task_queue, auth, plan)) as http:
            page, card = await section_for(http, handle.id)  # open server: no login
            assert "<script>" not in page and "<img" not in page
            assert "really? &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in card
            assert "output of <strong>echo</strong>" in card
            assert "&lt;script&gt;alert(&#39;x&#39;)" in card.split("output of <strong>echo")[1]
            assert 'id="who">loopback<' in page and "This server is open" in page
            done = await http.post(
                f"/ui/runs/{handle.id}/gates/check",
                data={"csrf": csrf_of(card), "decision": "approve", "comment": evil},
            )
            assert done.status_code == 303
            await asyncio.wait_for(handle.result(), timeout=60)
            after = await http.get("/ui")
            assert "<script>" not in after.text
            assert '<td class="by">loopback</td>' in after.text


async def test_a_tool_approval_shows_the_exact_call_its_reversibility_and_the_rule(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "safe-shell.yaml")
    auth = FakeAuthorizer()
    token = auth.add("ops", "read", "approve")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        status = await wait_for_gate(handle, "archive")
        call = status.pending_gates[0].tool_call
        assert call is not None
        assert (call.tool, call.args["argv"], call.reversibility) == (
            "shell",
            ["tar", "-czf", "notes.tgz", "notes"],
            "none",
        )
        assert call.rule_index == 3 and call.rule is not None
        assert call.rule["action"] == "require_approval"
        assert call.rule["condition"]["field"] == "_tool_reversibility"
        assert call.reason.startswith("irreversible tool call needs a human")
        async with await browser_for(fake_inbox_app(client, task_queue, auth, plan)) as http:
            await login(http, token)
            _, card = await section_for(http, handle.id)
            assert "Tool call <code>shell</code>" in card
            assert 'class="rev-none">none<' in card
            assert "safety_rules[3]" in card and "irreversible tool call needs a human" in card
            assert "&#34;tar&#34;" in card and "notes.tgz" in card  # the arguments, as JSON
            assert "output of <strong>record</strong>" in card  # its depends_on
            await http.post(
                f"/ui/runs/{handle.id}/gates/archive",
                data={"csrf": csrf_of(card), "decision": "reject", "comment": "keep them"},
            )
        outcome = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert outcome is not None and "rejected by ops: keep them" in (
        outcome.stages["archive"].error or ""
    )


async def test_an_unknown_token_is_refused_and_a_revoked_one_ends_its_session(
    client: Client, task_queue: str
) -> None:
    auth = FakeAuthorizer()
    auth.add("other", "read")  # still closed once "temp" is revoked
    token = auth.add("temp", "read")
    async with await browser_for(fake_inbox_app(client, task_queue, auth)) as http:
        bad = await login(http, "arm_" + "x" * 43)
        assert bad.status_code == 401 and "unknown or revoked" in bad.text
        assert (await login(http, token)).status_code == 303
        assert (await http.get("/ui")).status_code == 200
        auth.revoke("temp")
        assert (await http.get("/ui")).status_code == 303  # back to the login page
        page = await http.get("/ui/login")
        out = await http.post("/ui/logout", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"


async def test_an_open_server_refuses_a_page_from_elsewhere_dns_rebinding_included() -> None:
    """No token exists, so the inbox needs no login — but only for this machine: a page on
    evil.example whose name was rebound to 127.0.0.1 (Host: evil.example) gets no session and
    no page, and a form posted from another site's page is refused; nothing is done."""
    auth = FakeAuthorizer()
    assert auth.open
    app = fake_inbox_app(None, "tq", auth)  # type: ignore[arg-type]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://evil.example:8787"
    ) as rebound:
        page = await rebound.get("/ui")
        assert page.status_code == 403 and "not from this machine" in page.text
        assert "set-cookie" not in page.headers  # no session for the rebound name
        posted = await rebound.post(
            "/ui/runs/r-1/gates/ok", data={"decision": "approve", "csrf": "x"}
        )
        assert posted.status_code == 403
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8787"
    ) as local:
        posted = await local.post(
            "/ui/runs/r-1/gates/ok",
            data={"decision": "approve", "csrf": "x"},
            headers={"Origin": "https://evil.example"},
        )
        assert posted.status_code == 403 and "nothing was done" in posted.text
