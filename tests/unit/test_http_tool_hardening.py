"""http_request against a real loopback server: no routing headers from the model, no
credentials across origins on a redirect, and a decompression bomb stays within the cap."""

from __future__ import annotations

import gzip
import http.server
import json
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from armature_temporal.tools import ToolContext, call_tool
from tests.unit.test_tools import _Handler as ToolsTestHandler  # its _reply and quiet log

BOMB_BYTES = 100_000_000  # decoded size of the bomb: 100 MB of zeros


def _compressed_zeros(wbits: int) -> bytes:
    """``BOMB_BYTES`` zeros, compressed a megabyte at a time (never all in memory)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = bytes(1_000_000)
    parts = [packer.compress(block) for _ in range(BOMB_BYTES // len(block))]
    return b"".join(parts) + packer.flush()


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {
        "gzip": _compressed_zeros(zlib.MAX_WBITS | 16),
        "deflate": _compressed_zeros(zlib.MAX_WBITS),
        "raw-deflate": _compressed_zeros(-zlib.MAX_WBITS),
    }


class _Server(http.server.ThreadingHTTPServer):
    seen: list[tuple[str, dict[str, str]]]
    bombs: dict[str, bytes]
    other_port: int  # the second server's: same host name, another origin


class _Handler(ToolsTestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        port = self.server.server_port
        if self.path == "/echo":
            self._reply(200, json.dumps(dict(self.headers.items())).encode())
        elif self.path == "/same-origin":
            self._reply(302, b"", {"Location": "/echo"})
        elif self.path == "/other-host":
            self._reply(302, b"", {"Location": f"http://localhost:{port}/echo"})
        elif self.path == "/other-port":  # same host name, other port: another origin
            self._reply(307, b"", {"Location": f"http://127.0.0.1:{self.server.other_port}/echo"})
        elif self.path.startswith("/bomb/"):
            coding = self.path.removeprefix("/bomb/")
            wire = "deflate" if coding == "raw-deflate" else coding
            self._reply(200, self.server.bombs[coding], {"Content-Encoding": wire})
        elif self.path == "/gzip-text":
            body = gzip.compress(b"hello, " * 3 + b"world") + gzip.compress(b"; more")
            self._reply(200, body, {"Content-Encoding": "gzip", "Content-Type": "text/plain"})
        elif self.path == "/br":
            self._reply(200, b"\x8b\x02\x80hi\x03", {"Content-Encoding": "br"})
        else:
            self._reply(404, b"not found")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, bombs: dict[str, bytes]) -> Iterator[_Server]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    servers = [_Server(("127.0.0.1", 0), _Handler) for _ in range(2)]
    for httpd in servers:
        httpd.daemon_threads = True
        httpd.seen = []
        httpd.bombs = bombs
        httpd.other_port = servers[1].server_port
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield servers[0]
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def _ctx(tmp_path: Path, cap: int = 1000) -> ToolContext:
    return ToolContext(
        workspace=tmp_path, timeout_s=10, output_cap_bytes=cap,
        http_allow_hosts=("127.0.0.1", "localhost"),
    )  # fmt: skip


# --- headers the model may not set -------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "Host",
        "host",
        "Connection",
        "Transfer-Encoding",
        "Content-Length",
        "TE",
        "Upgrade",
        "Proxy-Authorization",
        "X-HTTP-Method-Override",
        "X-Forwarded-Host",
    ],
)
async def test_routing_and_framing_headers_are_refused_before_anything_is_sent(
    server: _Server, tmp_path: Path, header: str
) -> None:
    port = server.server_port
    result = await call_tool(
        "http_request",
        {"url": f"http://127.0.0.1:{port}/echo", "headers": {header: "internal-admin"}},
        _ctx(tmp_path),
    )
    assert (result.ok, result.error_type) == (False, "policy_blocked")
    assert f"header {header!r} is not allowed" in (result.error or "")
    assert server.seen == []


async def test_ordinary_headers_are_sent(server: _Server, tmp_path: Path) -> None:
    port = server.server_port
    result = await call_tool(
        "http_request",
        {"url": f"http://127.0.0.1:{port}/echo", "headers": {"X-Api-Key": "k", "Accept": "a/b"}},
        _ctx(tmp_path),
    )
    assert result.ok, result.error
    sent = server.seen[0][1]
    assert (sent["x-api-key"], sent["accept"], sent["host"]) == ("k", "a/b", f"127.0.0.1:{port}")


# --- redirects ---------------------------------------------------------------------------------

CREDENTIALS = {
    "X-Api-Key": "key-123",
    "Authorization": "Bearer tok",
    "Cookie": "session=abc",
    "X-Custom-Token": "t",
}
HARMLESS = {"Accept": "application/json", "Accept-Language": "fr", "User-Agent": "agent/1"}


@pytest.mark.parametrize("path", ["/other-host", "/other-port"])
async def test_a_cross_origin_redirect_carries_only_allow_listed_headers(
    server: _Server, tmp_path: Path, path: str
) -> None:
    port = server.server_port
    result = await call_tool(
        "http_request",
        {"url": f"http://127.0.0.1:{port}{path}", "headers": {**CREDENTIALS, **HARMLESS}},
        _ctx(tmp_path),
    )
    assert result.ok, result.error
    assert result.output["url"].endswith("/echo") and result.output["url"] != (
        f"http://127.0.0.1:{port}/echo"
    )
    received = {k.lower(): v for k, v in json.loads(result.output["body"]).items()}
    for name in CREDENTIALS:
        assert name.lower() not in received, f"{name} followed the redirect to another origin"
    for name, value in HARMLESS.items():
        assert received[name.lower()] == value


async def test_a_same_origin_redirect_keeps_the_headers(server: _Server, tmp_path: Path) -> None:
    port = server.server_port
    result = await call_tool(
        "http_request",
        {"url": f"http://127.0.0.1:{port}/same-origin", "headers": CREDENTIALS},
        _ctx(tmp_path),
    )
    assert result.ok, result.error
    received = {k.lower(): v for k, v in json.loads(result.output["body"]).items()}
    assert received["x-api-key"] == "key-123"
    assert received["x-custom-token"] == "t"


# --- decoded size ------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_a_decompression_bomb_is_decoded_only_up_to_the_cap(
    server: _Server, tmp_path: Path, bombs: dict[str, bytes], coding: str
) -> None:
    assert len(bombs[coding]) < 200_000  # ~100 KB on the wire, 100 MB decoded
    port = server.server_port
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = await call_tool(
            "http_request", {"url": f"http://127.0.0.1:{port}/bomb/{coding}"}, _ctx(tmp_path)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok, result.error
    assert result.output["body"] == "\x00" * 1000
    assert result.output["truncated"] is True
    # Decoding all of it costs 100 MB; a chunk at a time without a bound, tens of MB.
    assert peak - base < 8_000_000, f"peak Python memory grew by {(peak - base) / 1e6:.1f} MB"
    print(f"{coding} bomb: peak Python memory +{(peak - base) / 1e6:.2f} MB")


async def test_a_gzip_body_under_the_cap_is_decoded_whole(server: _Server, tmp_path: Path) -> None:
    port = server.server_port
    result = await call_tool(
        "http_request", {"url": f"http://127.0.0.1:{port}/gzip-text"}, _ctx(tmp_path)
    )
    assert result.ok, result.error
    assert (result.output["body"], result.output["truncated"]) == (
        "hello, hello, hello, world; more",  # two gzip members, as a gzip reader reads them
        False,
    )
    assert server.seen[0][1]["accept-encoding"] == "gzip, deflate"


async def test_a_coding_the_tool_cannot_bound_is_refused_by_name(
    server: _Server, tmp_path: Path
) -> None:
    port = server.server_port
    result = await call_tool("http_request", {"url": f"http://127.0.0.1:{port}/br"}, _ctx(tmp_path))
    assert (result.ok, result.error_type) == (False, "tool_error")
    assert "'br'" in (result.error or "")
