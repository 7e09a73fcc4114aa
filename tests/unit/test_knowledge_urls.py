"""Web pages as knowledge sources (issue #30 item 6): fetched only through the spec's HTTP
policy — a host on its http_allow_hosts, an address a granted tool program may reach, every
redirect hop checked — bounded, text only, and reported with the reason when refused, the rest
indexed. A local server plays the web; the egress policy lets its port through only where a
test says so."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from armature_temporal.experience.embeddings import LexicalEmbedder
from armature_temporal.knowledge import search
from armature_temporal.knowledge.sources import Document, Unreadable
from armature_temporal.knowledge.spec_sources import index_spec_knowledge
from armature_temporal.knowledge.urls import MAX_BYTES, fetch_page
from armature_temporal.store import TraceStore
from armature_temporal.tools._egress import EgressPolicy
from tests.fakes import fake_rebinding_dns

PAGES: dict[str, tuple[int, str, bytes, dict[str, str]]] = {
    "/faq.html": (
        200,
        "text/html; charset=utf-8",
        b"<html><body><h1>FAQ</h1><p>We open at nine.</p><script>x()</script></body></html>",
        {},
    ),
    "/away": (302, "text/plain", b"", {"Location": "http://example.invalid/elsewhere"}),
    "/hop": (302, "text/plain", b"", {"Location": "/faq.html"}),
    "/kettle.png": (200, "image/png", b"\x89PNG\r\n\x1a\n", {}),
    "/huge.txt": (200, "text/plain", b"a" * (MAX_BYTES + 10), {}),
    "/gone": (404, "text/plain", b"no", {}),
    # a small body that would expand past the bound: sent compressed though identity was asked
    "/bomb.txt": (
        200,
        "text/plain",
        gzip.compress(b"a" * (MAX_BYTES * 4)),
        {"Content-Encoding": "gzip"},
    ),
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, kind, body, headers = PAGES.get(self.path, (404, "text/plain", b"?", {}))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _open(port: int) -> EgressPolicy:
    """The egress policy with the test server's port let through (a fake internet)."""
    return EgressPolicy(open_ports=frozenset({("127.0.0.1", port)}))


def test_a_page_on_an_allowed_host_is_fetched_as_text(site: int) -> None:
    page = fetch_page(f"http://127.0.0.1:{site}/faq.html", ["127.0.0.1"], policy=_open(site))
    assert isinstance(page, Document)
    assert "We open at nine." in page.text and "<p>" not in page.text and "x()" not in page.text
    hopped = fetch_page(f"http://127.0.0.1:{site}/hop", ["127.0.0.1"], policy=_open(site))
    assert isinstance(hopped, Document) and "We open at nine." in hopped.text


def test_the_http_policy_decides_what_may_be_fetched(site: int) -> None:
    url = f"http://127.0.0.1:{site}/faq.html"
    not_listed = fetch_page(url, ["docs.example.com"], policy=_open(site))
    assert isinstance(not_listed, Unreadable)
    assert "not in the spec's http_allow_hosts ['docs.example.com']" in not_listed.reason
    loopback = fetch_page(url, ["127.0.0.1"])  # the environment's policy: no open ports
    assert isinstance(loopback, Unreadable) and "loopback" in loopback.reason
    assert "knowledge is never fetched from it" in loopback.reason
    away = fetch_page(f"http://127.0.0.1:{site}/away", ["127.0.0.1"], policy=_open(site))
    assert isinstance(away, Unreadable) and away.reason.startswith("redirected: host")
    assert "example.invalid" in away.reason
    local_name = fetch_page("http://localhost/x", ["localhost"])
    assert isinstance(local_name, Unreadable) and "own service or machine" in local_name.reason
    scheme = fetch_page("file:///etc/passwd", ["127.0.0.1"])
    assert isinstance(scheme, Unreadable) and "only http and https" in scheme.reason


def test_what_is_not_a_bounded_text_page_is_named_with_the_reason(site: int) -> None:
    base = f"http://127.0.0.1:{site}"
    reasons = {
        path: fetch_page(base + path, ["127.0.0.1"], policy=_open(site))
        for path in ("/kettle.png", "/huge.txt", "/gone", "/bomb.txt")
    }
    assert all(isinstance(r, Unreadable) for r in reasons.values())
    assert "content-type 'image/png', not text" in reasons["/kettle.png"].reason  # type: ignore[union-attr]
    assert f"more than {MAX_BYTES:,} bytes" in reasons["/huge.txt"].reason  # type: ignore[union-attr]
    assert reasons["/gone"].reason == "HTTP 404"  # type: ignore[union-attr]
    bomb = reasons["/bomb.txt"].reason  # type: ignore[union-attr]
    assert bomb == "content-encoding 'gzip'; only identity is read"


def test_a_spec_indexes_its_pages_beside_its_files_under_their_urls(
    site: int, tmp_path: Path, armature_home: Path
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "hours.md").write_text("# Hours\n\nClosed on Sundays.\n", "utf-8")
    faq = f"http://127.0.0.1:{site}/faq.html"
    gone = f"http://127.0.0.1:{site}/gone"
    store = TraceStore()
    report = index_spec_knowledge(
        store,
        tmp_path / "spec.yaml",
        "site",
        ["docs/", faq, gone],
        embedder=LexicalEmbedder(),
        allow_hosts=["127.0.0.1"],
        policy=_open(site),
    )
    assert set(report.indexed) == {"docs/hours.md", faq}
    assert report.unreadable == {gone: "HTTP 404"}
    (hit,) = search(store, "site", "when do you open", k=1, mode="text")
    assert hit.ref == f"knowledge:{faq}#0"


def test_a_name_that_rebinds_to_loopback_after_the_check_is_never_reached(
    site: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the first answer (the check's) is public, every later one is the
    loopback where the test server listens. The connection resolves once more, checks that
    answer and refuses it; an unpinned client would have fetched the page."""
    given = fake_rebinding_dns(monkeypatch, "rebind.example", "93.184.215.14", "127.0.0.1")
    page = fetch_page(f"http://rebind.example:{site}/faq.html", ["rebind.example"])
    assert isinstance(page, Unreadable), page
    assert "127.0.0.1, a loopback address" in page.reason and "fetch failed" in page.reason
    assert given == ["93.184.215.14", "127.0.0.1"]  # one lookup to check, one to connect
