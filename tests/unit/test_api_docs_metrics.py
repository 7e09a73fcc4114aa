"""The run API's ``/docs`` works offline (Swagger UI served from this server, behind the read
scope as before) and its ``/metrics`` and request counting (read scope; route templates, never
raw paths), on the app in process."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from armature_temporal.service.api.auth import TokenAuthorizer
from armature_temporal.store import TraceStore

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")
pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    s = TraceStore(f"sqlite:///{tmp_path / 'tokens.db'}")
    yield s
    s.close()


@pytest.fixture
async def http(store: TraceStore) -> AsyncIterator[httpx.AsyncClient]:
    from armature_temporal.service.api.app import create_service_app
    from armature_temporal.service.api.deps import ServiceState
    from armature_temporal.service.client import ConnectionFailed
    from tests.fakes import plan_from

    async def unreachable() -> Any:
        raise ConnectionFailed("cannot reach the Temporal server at nowhere:1")

    plan = plan_from(
        "name: tiny\nmodel_tiers: {small: {provider: simulate}}\n"
        "stages:\n  - {id: s, role: {name: S, description: hi}}\n"
    )
    state = ServiceState(
        plans={plan.name: plan},
        client=unreachable,
        task_queue="unused",
        auth=TokenAuthorizer(store, loopback=True),
    )
    app = create_service_app(state)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api.test"
    ) as client:
        yield client


async def test_docs_page_loads_nothing_from_another_server(
    http: httpx.AsyncClient, store: TraceStore
) -> None:
    reader = {"Authorization": f"Bearer {store.create_token('reader', ['read'])}"}
    assert (await http.get("/docs")).status_code == 401  # still behind the read scope
    page = await http.get("/docs", headers=reader)
    assert page.status_code == 200
    linked = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]+)['"]""", page.text)
    assert linked, page.text[:500]
    assert not [u for u in linked if re.match(r"(?i)(https?:)?//", u)], linked
    assert "http://" not in page.text.split("<script>")[0]
    assert "https://" not in page.text.split("<script>")[0]
    assert "validatorUrl: null" in page.text  # no badge asking an outside validator
    kinds = {}
    for url in linked:  # the assets are public: a <script src> carries no token
        asset = await http.get(url)
        assert asset.status_code == 200, url
        kinds[url.rsplit(".", 1)[-1]] = asset.headers["content-type"]
        assert len(asset.content) > 10_000, url
    assert kinds["js"].startswith("text/javascript")
    assert kinds["css"].startswith("text/css")
    missing = await http.get("/docs/assets/nothing.js")
    assert missing.status_code == 404
    assert "swagger-ui-bundle.js" in missing.json()["error"]["message"]


async def test_metrics_need_the_read_scope_and_count_requests_by_route_template(
    http: httpx.AsyncClient, store: TraceStore
) -> None:
    reader = {"Authorization": f"Bearer {store.create_token('reader', ['read'])}"}
    assert (await http.get("/metrics")).status_code == 401

    def counted(text: str, **labels: str) -> float:
        (family,) = [
            f for f in text_string_to_metric_families(text) if f.name == "armature_api_requests"
        ]
        return sum(
            s.value
            for s in family.samples
            if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items())
        )

    before = (await http.get("/metrics", headers=reader)).text
    for run_id in ("run-aaa", "run-bbb"):  # unknown runs of an unreachable Temporal: 503
        await http.get(f"/run/{run_id}", headers=reader)
    await http.get("/no/such/path", headers=reader)
    after = (await http.get("/metrics", headers=reader)).text
    route = {"method": "GET", "route": "/run/{run_id}"}
    assert counted(after, **route) - counted(before, **route) == 2
    assert counted(after, route="unmatched") - counted(before, route="unmatched") == 1
    assert counted(after, route="/metrics", status="401") >= 1
    assert "run-aaa" not in after and "/no/such/path" not in after
    latency = [
        f
        for f in text_string_to_metric_families(after)
        if f.name == "armature_api_request_duration_seconds"
    ]
    assert any(s.labels.get("route") == "/run/{run_id}" for s in latency[0].samples)
