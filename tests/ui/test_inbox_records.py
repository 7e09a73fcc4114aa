"""The inbox's recent decisions come from the trace store, checked (issue #25 item 6): a
decider edited in the database, or a row without a MAC, shows as unverified; an
unauthenticated decision shows ``signal`` with its claim labelled as one."""

from __future__ import annotations

import re

import httpx
import pytest
from sqlalchemy import text
from temporalio.client import Client

from armature_temporal.store import TraceStore
from tests.store.chains import make_run
from tests.ui.inbox_harness import FakeAuthorizer, fake_inbox_app

pytestmark = pytest.mark.asyncio(loop_scope="session")

BASE = "http://127.0.0.1:8787"


def _by_cells(html: str) -> dict[str, str]:
    rows = re.findall(r"<tr><td>[^<]*</td><td><code>([^<]+)</code></td>.*?</tr>", html, re.S)
    cells = re.findall(r'<td class="by[^"]*">.*?</td>', html, re.S)
    return dict(zip(rows, cells, strict=True))


async def test_an_edited_decider_shows_as_unverified_and_a_claim_as_a_claim(
    client: Client, task_queue: str
) -> None:
    store = TraceStore()
    try:
        store.write(make_run("run-honest", gate_stage="draft"))
        store.write(make_run("run-edited", gate_stage="draft"))
        # An unauthenticated decision (a raw signal claiming alice), as the run records it.
        store.write(
            make_run("run-signal", gate_stage="draft", gate_by="signal", gate_claimed_by="alice")
        )
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE gate_decisions SET decided_by = 'alice' WHERE run_id = 'run-edited'")
            )
    finally:
        store.close()
    app = fake_inbox_app(client, task_queue, FakeAuthorizer())  # open: no login
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        page = await http.get("/ui")
    assert page.status_code == 200, page.text
    cells = _by_cells(page.text)
    assert cells["run-honest"] == '<td class="by">ana</td>'
    assert 'class="by unverified"' in cells["run-edited"]
    assert "alice" in cells["run-edited"]
    assert "(unverified record: its MAC does not match its content" in cells["run-edited"]
    assert cells["run-signal"].startswith('<td class="by">signal')
    assert "(unauthenticated; claimed alice)" in cells["run-signal"]
