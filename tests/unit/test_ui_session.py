"""The inbox's sessions and CSRF tokens (pure: a fake clock, starlette requests from scopes)."""

from __future__ import annotations

from starlette.requests import Request

from armature_temporal.service.api.principal import LOOPBACK
from armature_temporal.service.api.ui_session import UiSessions, same_origin
from tests.ui.inbox_harness import FakeAuthorizer


def request(headers: dict[str, str], host: str = "127.0.0.1:8787") -> Request:
    raw = [(b"host", host.encode())] + [(k.encode(), v.encode()) for k, v in headers.items()]
    return Request(
        {
            "type": "http",
            "method": "POST",
            "scheme": "http",
            "path": "/ui/login",
            "headers": raw,
            "query_string": b"",
            "server": ("127.0.0.1", 8787),
        }
    )


def test_a_csrf_token_is_bound_to_its_session_and_to_the_server_key() -> None:
    sessions = UiSessions()
    one, two = sessions.new("anonymous"), sessions.new("anonymous")
    assert sessions.csrf_ok(one, sessions.csrf(one))
    assert not sessions.csrf_ok(one, sessions.csrf(two))
    assert not sessions.csrf_ok(one, None) and not sessions.csrf_ok(one, "")
    assert not UiSessions().csrf_ok(one, sessions.csrf(one))  # another server's key


def test_sessions_expire_and_the_oldest_go_first_past_the_cap() -> None:
    now = [0.0]
    sessions = UiSessions(max_age_s=60, max_sessions=2, clock=lambda: now[0])
    first, second = sessions.new("anonymous"), sessions.new("anonymous")
    third = sessions.new("anonymous")
    assert sessions.get(first.sid) is None and sessions.get(second.sid) is second
    now[0] = 61
    assert sessions.get(third.sid) is None
    assert sessions.get(None) is None and sessions.get("made-up") is None


def test_a_session_acts_as_its_token_until_revoked_and_open_only_while_open() -> None:
    auth = FakeAuthorizer()
    sessions = UiSessions()
    opened = sessions.new("open")
    assert sessions.principal(opened, auth) is LOOPBACK
    token = auth.add("erin", "read")
    assert sessions.principal(opened, auth) is None  # the first token closed the server
    logged = sessions.new("token", token)
    principal = sessions.principal(logged, auth)
    assert principal is not None and principal.name == "erin"
    auth.add("other", "read")
    auth.revoke("erin")
    assert sessions.principal(logged, auth) is None
    assert sessions.principal(sessions.new("anonymous"), auth) is None


def test_same_origin_refuses_another_site_in_origin_or_referer() -> None:
    assert same_origin(request({}))
    assert same_origin(request({"origin": "http://127.0.0.1:8787"}))
    assert same_origin(request({"referer": "http://127.0.0.1:8787/ui"}))
    assert not same_origin(request({"origin": "https://evil.example"}))
    assert not same_origin(request({"origin": "null"}))
    assert not same_origin(request({"referer": "http://127.0.0.1:9999/ui"}))
    assert not same_origin(request({"origin": "http://evil", "referer": "http://127.0.0.1:8787/"}))


def test_the_inbox_templates_ship_as_package_data() -> None:
    import tomllib
    from pathlib import Path

    import armature_temporal.service.api as api

    root = Path(api.__file__).parent
    pyproject = tomllib.loads((root.parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["armature_temporal.service.api"]
    shipped = {p for g in globs for p in root.glob(g)}
    templates = set((root / "templates").iterdir())
    assert templates and templates <= shipped, templates - shipped
