"""The run API's authorizer: open only on loopback with no active token (re-checked about
every second), 401 without or with a bad token once closed, 403 without the scope, and the
token compared in constant time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from armature_temporal.service.api.auth import TokenAuthorizer
from armature_temporal.service.api.principal import LOOPBACK, Principal
from armature_temporal.store import TraceStore

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    opened = TraceStore(f"sqlite:///{tmp_path / 'traces.db'}")
    yield opened
    opened.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake_request(authorization: str | None = None) -> Any:
    from starlette.requests import Request

    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    return Request({"type": "http", "method": "GET", "path": "/gates", "headers": headers})


def test_loopback_without_tokens_is_open_and_the_first_token_closes_it(store: TraceStore) -> None:
    clock = FakeClock()
    auth = TokenAuthorizer(store, loopback=True, clock=clock)
    assert auth.open and auth.authenticate(fake_request()) == LOOPBACK
    token = store.create_token("alice", ["read"])
    clock.now += 0.5  # within the cache: still open
    assert auth.open
    clock.now += 0.6  # re-checked: closed, without a restart
    assert not auth.open
    from armature_temporal.service.api.errors import ApiError

    with pytest.raises(ApiError) as refused:
        auth.authenticate(fake_request())
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")
    assert "armature tokens create" in refused.value.fix
    assert auth.authenticate(fake_request(f"Bearer {token}")) == Principal(
        "alice", frozenset({"read"})
    )


def test_beyond_loopback_is_never_open(store: TraceStore) -> None:
    auth = TokenAuthorizer(store, loopback=False, clock=FakeClock())
    assert store.active_token_count() == 0
    assert not auth.open
    from armature_temporal.service.api.errors import ApiError

    with pytest.raises(ApiError, match="carries none"):
        auth.authenticate(fake_request())


def test_revoked_token_is_refused_once_the_cache_expires(store: TraceStore) -> None:
    from armature_temporal.service.api.errors import ApiError

    clock = FakeClock()
    token = store.create_token("bot", ["run"])
    auth = TokenAuthorizer(store, loopback=True, clock=clock)
    assert auth.authenticate(fake_request(f"Bearer {token}")).name == "bot"
    store.revoke_token("bot")
    clock.now += 1.1
    with pytest.raises(ApiError) as refused:
        auth.authenticate(fake_request(f"Bearer {token}"))
    assert refused.value.status == 401
    assert token not in refused.value.message  # the message shows a prefix only
    assert "revoked" in refused.value.message


def test_the_hash_comparison_is_constant_time(
    store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hmac

    from armature_temporal.store.tokens import token_hash

    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spying_compare(a: str, b: str) -> bool:
        calls.append((a, b))
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spying_compare)
    token = store.create_token("alice", ["read"])
    assert store.principal_for(token) is not None
    assert calls == [(token_hash(token),) * 2]


async def test_scopes_over_http_403_names_the_scope_and_admin_holds_all(
    store: TraceStore,
) -> None:
    from armature_temporal.service.api.app import create_service_app
    from armature_temporal.service.api.deps import ServiceState
    from armature_temporal.service.client import ConnectionFailed
    from tests.fakes import plan_from

    async def fake_unreachable() -> Any:
        raise ConnectionFailed("cannot reach the Temporal server at nowhere:1")

    plan = plan_from(
        "name: tiny\nmodel_tiers: {small: {provider: simulate}}\n"
        "stages:\n  - {id: s, role: {name: S, description: hi}}\n"
    )
    reader = store.create_token("reader", ["read"])
    admin = store.create_token("root", ["admin"])
    state = ServiceState(
        plans={plan.name: plan},
        client=fake_unreachable,
        task_queue="unused",
        auth=TokenAuthorizer(store, loopback=True),
    )
    app = create_service_app(state)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api.test"
    ) as http:
        as_reader = {"Authorization": f"Bearer {reader}"}
        as_admin = {"Authorization": f"Bearer {admin}"}
        assert (await http.get("/workflows")).status_code == 401
        assert (await http.get("/openapi.json")).status_code == 401
        assert (await http.get("/docs")).status_code == 401
        listed = await http.get("/workflows", headers=as_reader)
        assert listed.status_code == 200 and listed.json()["workflows"][0]["name"] == "tiny"
        schema = await http.get("/openapi.json", headers=as_reader)
        assert schema.status_code == 200 and "/run/async" in schema.json()["paths"]
        # 403 comes before anything else is looked at (Temporal is unreachable here: 503).
        refused = await http.post("/run/async", json={"spec": "tiny"}, headers=as_reader)
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "forbidden" and "'run'" in error["message"]
        assert "--scope run" in error["fix"]
        gate = await http.post("/run/x/gates/s", json={"decision": "approve"}, headers=as_reader)
        assert gate.status_code == 403 and "'approve'" in gate.json()["error"]["message"]
        started = await http.post("/run/async", json={"spec": "tiny"}, headers=as_admin)
        assert started.status_code == 503
        assert started.json()["error"]["code"] == "temporal_unreachable"
        health = await http.get("/health")  # said ok while Temporal was unreachable
        assert health.status_code == 503
        assert health.json()["ok"] is False and health.json()["temporal"] == "unreachable"
        assert "armature dev" in health.json()["fix"]
        unknown = await http.get("/workflows/nope", headers=as_reader)
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_spec"
        big = await http.post(
            "/run/async", content=b"{" + b" " * (1024 * 1024 + 1), headers=as_admin
        )
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"


def test_serve_starts_open_on_loopback_refuses_beyond_it_without_a_token(
    store: TraceStore,
) -> None:
    from armature_temporal.service.api.edge import ServeRefused, token_warning

    assert "anyone on this machine" in token_warning(store, "127.0.0.1", 8787, False)
    assert "anyone on this machine" in token_warning(store, "localhost", 8787, False)
    with pytest.raises(ServeRefused, match="armature tokens create"):
        token_warning(store, "0.0.0.0", 8787, False)
    # --allow-unauthenticated opens the webhooks only; the API stays closed (never open).
    assert "opens the webhooks only" in token_warning(store, "0.0.0.0", 8787, True)
    assert not TokenAuthorizer(store, loopback=False).open
    store.create_token("ops", ["admin"])
    assert token_warning(store, "0.0.0.0", 8787, False) == ""


def test_a_webhook_may_not_claim_a_run_api_path() -> None:
    from armature_temporal.service.api.edge import ServeRefused, api_path_clash
    from armature_temporal.service.webhooks import collect_hooks
    from tests.fakes import plan_from

    def hooked(path: str) -> Any:
        return collect_hooks(
            [
                plan_from(
                    "name: hooked\nmodel_tiers: {small: {provider: simulate}}\n"
                    f"triggers: [{{type: webhook, path: {path}}}]\n"
                    "stages:\n  - {id: s, role: {name: S, description: hi}}\n"
                )
            ]
        )

    with pytest.raises(ServeRefused, match=r"webhook path '/run/x' is the run API's"):
        api_path_clash(hooked("/run/x"))
    api_path_clash(hooked("/runner"))  # a prefix of the name only: fine
    api_path_clash(hooked("/hooks/run"))


def request_with(**headers: str) -> Any:
    from starlette.requests import Request

    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/run/async", "headers": raw})


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "127.0.0.1:8787"},
        {"Host": "localhost:8787", "Origin": "http://localhost:8787"},
        {"Host": "[::1]:8787", "Origin": "http://[::1]:8787"},
        {"Host": "127.0.0.1:8787", "Origin": "http://127.0.0.1:3000"},  # a local page
        {},  # a program that sends neither (an ASGI test client)
    ],
)
def test_an_open_server_answers_this_machine(store: TraceStore, headers: dict[str, str]) -> None:
    assert TokenAuthorizer(store, loopback=True).authenticate(request_with(**headers)) == LOOPBACK


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        # DNS rebinding: evil.example now resolves to 127.0.0.1; the browser says its name.
        ({"Host": "evil.example:8787"}, "Host header is 'evil.example:8787'"),
        # A page on another site posting to the loopback port (a simple CORS request).
        ({"Host": "127.0.0.1:8787", "Origin": "https://evil.example"}, "https://evil.example"),
        ({"Host": "127.0.0.1:8787", "Origin": "null"}, "'null'"),  # a sandboxed frame, file://
        ({"Host": "127.0.0.1.evil.example"}, "127.0.0.1.evil.example"),
    ],
)
def test_an_open_server_refuses_a_page_from_elsewhere(
    store: TraceStore, headers: dict[str, str], said: str
) -> None:
    from armature_temporal.service.api.errors import ApiError

    with pytest.raises(ApiError) as refused:
        TokenAuthorizer(store, loopback=True).authenticate(request_with(**headers))
    assert (refused.value.status, refused.value.code) == (403, "cross_site")
    assert said in refused.value.message and "armature tokens create" in refused.value.fix


def test_a_token_stored_with_a_name_now_reserved_is_refused_and_serve_warns(
    store: TraceStore,
) -> None:
    """A token called "timeout" made before names were reserved would record a person's
    decisions as a timeout: it is refused (as revoked would be), and serve says why."""
    from sqlalchemy import update

    from armature_temporal.service.api.edge import reserved_token_warning
    from armature_temporal.store._base import table_of
    from armature_temporal.store.schema import ApiTokenRow

    token = store.create_token("was-fine", ["approve"])
    table = table_of(ApiTokenRow)
    with store.engine.begin() as conn:  # as an older Armature could have stored it
        conn.execute(update(table).where(table.c.name == "was-fine").values(name="timeout"))
    assert store.principal_for(token) is None
    assert store.active_tokens([token]) == []
    warning = reserved_token_warning(store)
    assert "'timeout'" in warning and "reserved names" in warning
    assert "armature tokens revoke NAME" in warning
    store.revoke_token("timeout")
    assert reserved_token_warning(store) == ""


def test_still_valid_reads_the_store_afresh_and_updates_the_cache(store: TraceStore) -> None:
    """What the stream watcher asks: no cache between a revoke and the answer."""
    clock = FakeClock()
    keep = store.create_token("keep", ["read"])
    drop = store.create_token("drop", ["read"])
    auth = TokenAuthorizer(store, loopback=True, clock=clock)
    assert auth.from_token(drop) is not None  # cached for TOKEN_CACHE_S
    store.revoke_token("drop")
    assert auth.from_token(drop) is not None, "the cache still says yes"
    assert auth.still_valid({keep, drop, "arm_malformed"}) == {keep}
    assert auth.from_token(drop) is None, "the fresh answer reached the cache"
    assert auth.still_valid({None}) == set(), "tokens exist: the open server is closed"
    store.revoke_token("keep")
    assert auth.still_valid({None, keep}) == {None}, "no active token: open again"
