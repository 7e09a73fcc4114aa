"""http_request checks the address it connects to, not only the name: a name (or a ``*.``
match) that resolves to the loopback, cloud metadata or a private network is refused before a
byte is sent, one whose DNS answer changes after a check cannot slip through (DNS rebinding),
and an address the spec writes itself is reached as written."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from armature_temporal.tools import ToolContext, call_tool
from tests.fakes import fake_rebinding_dns


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = b"internal admin page"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback() -> Iterator[tuple[int, list[str]]]:
    seen: ClassVar[list[str]] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield httpd.server_address[1], seen
    httpd.shutdown()
    httpd.server_close()


def _ctx(tmp_path: Path, *hosts: str) -> ToolContext:
    return ToolContext(
        workspace=tmp_path, timeout_s=5, output_cap_bytes=1000, http_allow_hosts=hosts
    )


async def test_an_allowed_name_that_resolves_to_the_loopback_is_refused_unsent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback: tuple[int, list[str]]
) -> None:
    port, seen = loopback
    fake_rebinding_dns(monkeypatch, "api.partner.example", "127.0.0.1")
    result = await call_tool(
        "http_request",
        {"url": f"http://api.partner.example:{port}/admin"},
        _ctx(tmp_path, "*.partner.example"),
    )
    assert (result.ok, result.error_type) == (False, "policy_blocked"), result
    assert "api.partner.example resolves to 127.0.0.1, a loopback address" in (result.error or "")
    assert "list its address in http_allow_hosts" in (result.error or "")
    assert seen == []


async def test_a_name_rebinding_after_a_good_answer_never_reaches_the_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback: tuple[int, list[str]]
) -> None:
    """The attacker's DNS answers a public address once, then the loopback. Whatever the
    order of lookups, the address connected to is one the check saw: the request is refused
    (or fails to reach the public address, which this machine cannot), never served locally."""
    port, seen = loopback
    given = fake_rebinding_dns(monkeypatch, "rebind.example", "93.184.215.14", "127.0.0.1")
    for _ in range(2):
        result = await call_tool(
            "http_request",
            {"url": f"http://rebind.example:{port}/admin", "timeout_s": 2},
            _ctx(tmp_path, "rebind.example"),
        )
        assert not result.ok and "internal admin page" not in str(result.output)
    assert seen == [] and given[:2] == ["93.184.215.14", "127.0.0.1"]
    assert result.error_type == "policy_blocked" and "127.0.0.1" in (result.error or "")


async def test_cloud_metadata_behind_an_allowed_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_rebinding_dns(monkeypatch, "meta.example", "169.254.169.254")
    result = await call_tool(
        "http_request",
        {"url": "http://meta.example/latest/meta-data/iam/"},
        _ctx(tmp_path, "meta.example"),
    )
    assert result.error_type == "policy_blocked"
    assert "link-local (cloud metadata" in (result.error or "")


async def test_a_private_name_needs_its_network_listed_and_an_address_written_is_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback: tuple[int, list[str]]
) -> None:
    fake_rebinding_dns(monkeypatch, "wiki.corp.example", "10.255.255.1")
    ask = {"url": "http://wiki.corp.example/", "timeout_s": 1}
    refused = await call_tool("http_request", ask, _ctx(tmp_path, "wiki.corp.example"))
    assert refused.error_type == "policy_blocked"
    assert "ARMATURE_EGRESS_ALLOW_PRIVATE" in (refused.error or "")
    monkeypatch.setenv("ARMATURE_EGRESS_ALLOW_PRIVATE", "10.0.0.0/8")
    tried = await call_tool("http_request", ask, _ctx(tmp_path, "wiki.corp.example"))
    # let through: what answers there (if anything) depends on the machine, but not the policy
    assert tried.error_type != "policy_blocked", tried
    port, seen = loopback
    written = await call_tool(
        "http_request", {"url": f"http://127.0.0.1:{port}/ok"}, _ctx(tmp_path, "127.0.0.1")
    )
    assert written.ok and written.output["body"] == "internal admin page" and seen == ["/ok"]
