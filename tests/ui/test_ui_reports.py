"""``/ui/specs/{spec}/dashboard`` and ``/ui/runs/{run_id}/report`` through the app ``armature
serve`` runs (create_service_app, the token store's TokenAuthorizer) over a store real runs on
a real Temporal dev server wrote: the page for a reader, 401 without a token, 403 for a token
without ``read``; the charts' data is the store's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.service.api.app import create_service_app
from armature_temporal.service.api.auth import TokenAuthorizer
from armature_temporal.service.api.deps import ServiceState
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from tests.cli.test_cli_html import Pictured, blocks, external_refs, pictured, spec_text
from tests.ui.inbox_harness import csrf_of

pytestmark = pytest.mark.asyncio(loop_scope="session")
__all__ = ["pictured"]  # the fixture, imported to be used here


class Served:
    def __init__(self, http: httpx.AsyncClient, tokens: dict[str, str], store: TraceStore):
        self.http, self.tokens, self.store = http, tokens, store

    async def get(self, path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[token]}"} if token else {}
        return await self.http.get(path, headers=headers)


@pytest_asyncio.fixture(loop_scope="session")
async def served(pictured: Pictured, temporal_env: WorkflowEnvironment) -> AsyncIterator[Served]:
    url = f"sqlite:///{pictured.home / 'armature.db'}"
    store = TraceStore(url)
    suffix = uuid.uuid4().hex[:6]  # the store outlives one test; token names stay taken
    tokens = {
        "reader": store.create_token(f"reader-{suffix}", ["read"]),
        "approver": store.create_token(f"approver-{suffix}", ["approve"]),
    }

    async def connected() -> Client:  # the inbox asks Temporal; the report pages do not
        return temporal_env.client

    plan = compile_spec(load_spec_text(spec_text("2")))  # the server serves version 2
    app = create_service_app(
        ServiceState(
            plans={plan.name: plan},
            client=connected,
            task_queue="unused",
            auth=TokenAuthorizer(store, loopback=True),
            store_url=url,
        )
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield Served(http, tokens, store)
    for name in tokens:
        store.revoke_token(f"{name}-{suffix}")
    store.close()


async def test_ui_dashboard_is_for_readers_and_draws_the_store(
    served: Served, pictured: Pictured
) -> None:
    path = "/ui/specs/pictured/dashboard"
    assert (await served.get(path)).status_code == 401
    forbidden = await served.get(path, "approver")
    assert forbidden.status_code == 403 and "read" in forbidden.text
    page = await served.get(path, "reader")
    assert page.status_code == 200
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    rows = sorted(served.store.runs(spec="pictured", limit=100), key=lambda r: r.started_at)
    assert blocks(page.text)["chart-hqs"] == [{"run_id": r.run_id, "hqs": r.hqs} for r in rows]
    first = pictured.runs["1"][0]
    assert f'href="/ui/runs/{first}/report"' in page.text
    assert [r for r in external_refs(page.text) if not r.startswith("/ui")] == []
    listing = await served.get("/ui/specs", "reader")
    assert listing.status_code == 200 and 'href="/ui/specs/pictured/dashboard"' in listing.text
    assert (await served.get("/ui/specs")).status_code == 401


async def test_ui_report_is_for_readers_with_the_dag_of_a_served_version(
    served: Served, pictured: Pictured
) -> None:
    v2, v1 = pictured.runs["2"][0], pictured.runs["1"][0]
    assert (await served.get(f"/ui/runs/{v2}/report")).status_code == 401
    assert (await served.get(f"/ui/runs/{v2}/report", "approver")).status_code == 403
    page = await served.get(f"/ui/runs/{v2}/report", "reader")
    assert page.status_code == 200
    data: dict[str, Any] = blocks(page.text)
    ends = {r.stage_id: r.recorded_at for r in served.store.records(v2) if r.kind == "stage"}
    assert {s["stage_id"]: s["end"] for s in data["chart-timeline"]} == ends
    assert {n["stage_id"] for n in data["chart-dag"]} == {"draft", "facts", "review"}
    # Version 1 is not the version served: its DAG is the one its start record names.
    old = await served.get(f"/ui/runs/{v1}/report", "reader")
    (start,) = [r for r in served.store.records(v1) if r.kind == "run_start"]
    recorded = {s["id"]: s["depends_on"] for s in (start.data or {})["dag"]}
    assert old.status_code == 200
    assert {n["stage_id"]: n["depends_on"] for n in blocks(old.text)["chart-dag"]} == recorded
    assert recorded["review"] == ["draft", "facts"]


async def test_ui_report_pages_name_what_is_missing(served: Served) -> None:
    missing = await served.get("/ui/runs/pictured-nope/report", "reader")
    assert missing.status_code == 404
    assert "pictured-nope" in missing.text and "armature runs list" in missing.text
    spec = await served.get("/ui/specs/pictureed/dashboard", "reader")
    assert spec.status_code == 404 and "did you mean" in spec.text.lower()
    assert "pictured" in spec.text


async def test_ui_dashboard_through_the_inbox_login(served: Served) -> None:
    login = await served.http.get("/ui/login")
    posted = await served.http.post(
        "/ui/login",
        data={"token": served.tokens["reader"], "csrf": csrf_of(login.text)},
        headers={"Origin": "http://testserver"},
    )
    assert posted.status_code == 303, posted.text
    inbox = await served.http.get("/ui")
    assert inbox.status_code == 200 and 'href="/ui/specs"' in inbox.text  # linked
    page = await served.http.get("/ui/specs/pictured/dashboard")
    assert page.status_code == 200 and "Dashboard: pictured" in page.text
