"""Tool programs' network (issue #25 item 2): none by default, HTTP(S) through the egress proxy
when the spec grants it, and never the worker's loopback, link-local or private addresses or
its services, whatever a name resolves to.

A local HTTP server stands in for the internet: tests let its one (address, port) through the
proxy's policy (``EgressPolicy.open_ports``), the way a public address would pass; everything
else on loopback stays refused.
"""

from __future__ import annotations

import http.server
import ipaddress
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from armature_temporal.tools import ToolContext, call_tool
from armature_temporal.tools._egress import EgressPolicy, egress_proxy, refusal, service_hosts
from armature_temporal.tools.sandbox import sandbox

ip = ipaddress.ip_address


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.path} via {self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def internet(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A web server the proxy treats as public; its port."""
    if not sandbox().isolated:
        pytest.skip(f"no sandbox here ({sandbox().note})")
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    port = int(server.server_address[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = egress_proxy()
    monkeypatch.setattr(proxy, "policy", EgressPolicy(open_ports=frozenset({("127.0.0.1", port)})))
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


def _ctx(tmp_path: Path, network: bool) -> ToolContext:
    return ToolContext(workspace=tmp_path, timeout_s=30, network=network)


async def _curl(ctx: ToolContext, *args: str) -> dict[str, object]:
    result = await call_tool("shell", {"argv": ["curl", "-sS", "-m", "10", *args]}, ctx)
    assert result.ok, result.error
    return result.output


async def test_without_a_grant_a_program_has_no_network_and_is_told_which_grant(
    tmp_path: Path, internet: int
) -> None:
    out = await _curl(_ctx(tmp_path, False), f"http://127.0.0.1:{internet}/data")
    assert out["exit_code"] != 0 and "hello" not in str(out["stdout"]), out
    assert "network: true" in str(out["hint"]) and "allow_network" in str(out["hint"]), out


async def test_with_a_grant_http_and_https_tunnels_go_out_through_the_proxy(
    tmp_path: Path, internet: int
) -> None:
    ctx = _ctx(tmp_path, True)
    plain = await _curl(ctx, f"http://127.0.0.1:{internet}/data")
    assert plain["stdout"] == f"hello from /data via 127.0.0.1:{internet}", plain
    # --proxytunnel: through CONNECT, as every HTTPS request goes.
    tunnel = await _curl(ctx, "--proxytunnel", f"http://127.0.0.1:{internet}/tunnel")
    assert tunnel["stdout"] == f"hello from /tunnel via 127.0.0.1:{internet}", tunnel


async def test_a_granted_program_still_never_reaches_loopback_or_metadata(
    tmp_path: Path, internet: int
) -> None:
    ctx = _ctx(tmp_path, True)
    with socket.socket() as frontend:  # a service on the worker's loopback, not the internet
        frontend.bind(("127.0.0.1", 0))
        frontend.listen(1)
        port = frontend.getsockname()[1]
        out = await _curl(ctx, "-i", f"http://127.0.0.1:{port}/api/v1/namespaces")
        assert "403 Forbidden" in str(out["stdout"]) and "loopback" in str(out["stdout"]), out
        out = await _curl(ctx, "--proxytunnel", f"http://localhost:{port}/")
        assert out["exit_code"] != 0 and "403" in str(out["stderr"]), out
        assert "egress proxy" in str(out["hint"]), out
        # Around the proxy: the namespace's own loopback has nothing on that port.
        out = await _curl(ctx, "--noproxy", "*", f"http://127.0.0.1:{port}/")
        assert out["exit_code"] != 0 and "Couldn't connect" in str(out["stderr"]), out
    out = await _curl(ctx, "-i", "http://169.254.169.254/latest/meta-data/")
    assert "403 Forbidden" in str(out["stdout"]) and "link-local" in str(out["stdout"]), out


def test_every_address_a_name_resolves_to_is_checked() -> None:
    """DNS rebinding: a name that resolves to a public address and to loopback is refused (the
    proxy then connects only to an address it checked, never to a second lookup's)."""
    policy = EgressPolicy()
    assert refusal("example.com", 443, [ip("93.184.216.34")], policy) is None
    both = refusal("rebind.example", 443, [ip("93.184.216.34"), ip("127.0.0.1")], policy)
    assert both is not None and "127.0.0.1" in both
    mapped = refusal("m.example", 80, [ip("::ffff:127.0.0.1")], policy)
    assert mapped is not None and "loopback" in mapped


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("0.0.0.0", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.254.254.254", "private address"),
        ("192.168.1.10", "private address"),
        ("100.64.0.1", "private address"),
        ("fd00::1", "private address"),
        ("224.0.0.1", "not a unicast"),
    ],
)
def test_addresses_the_proxy_refuses(address: str, why: str) -> None:
    said = refusal("host.example", 80, [ip(address)], EgressPolicy())
    assert said is not None and why in said, said


def test_a_private_network_can_be_allowed_but_never_loopback_or_a_service() -> None:
    policy = EgressPolicy(
        services=frozenset({"temporal", "db.internal"}),
        service_addresses=frozenset({ip("10.9.0.7")}),
        allow_private=(ipaddress.ip_network("10.9.0.0/16"),),
    )
    assert refusal("mirror.internal", 443, [ip("10.9.1.2")], policy) is None
    assert "service" in str(refusal("temporal", 7233, [ip("10.9.1.3")], policy))
    assert "services" in str(refusal("other-name", 5432, [ip("10.9.0.7")], policy))
    assert "the worker's own" in str(refusal("localhost", 80, [ip("127.0.0.1")], policy))
    assert "loopback" in str(refusal("lo.example", 80, [ip("127.0.0.2")], policy))


def test_the_workers_services_come_from_its_settings_without_credentials() -> None:
    hosts = service_hosts(
        {
            "TEMPORAL_ADDRESS": "temporal.internal:7233",
            "ARMATURE_DB_URL": "postgresql+psycopg://armature:pw@db.internal:5432/armature",
            "ARMATURE_SERVICE_HOSTS": "api.internal, [fd00::5]:8787",
            "ARMATURE_BANDIT_URL": "rediss://:secret@bandits.internal:6380/2",
            "ARMATURE_REDIS_URL": "redis://cache.internal:6379/0",
        }
    )
    assert hosts == {
        "temporal.internal",
        "db.internal",
        "api.internal",
        "fd00::5",
        "bandits.internal",
        "cache.internal",
    }


async def test_the_proxy_resolves_once_and_connects_to_what_it_checked(
    tmp_path: Path, internet: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name whose second lookup would answer differently: the proxy asks once."""
    lookups: list[str] = []
    real = socket.getaddrinfo

    def answer(host: object, *args: object, **kw: object) -> object:
        if host == "rebind.test":
            lookups.append("rebind.test")
            first = len(lookups) == 1
            return real("127.0.0.1" if first else "192.0.2.1", *args, **kw)  # type: ignore[arg-type]
        return real(host, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", answer)
    out = await _curl(_ctx(tmp_path, True), f"http://rebind.test:{internet}/once")
    assert out["stdout"] == f"hello from /once via rebind.test:{internet}", out
    assert lookups == ["rebind.test"]


def test_the_forwarder_is_only_for_granted_calls() -> None:
    """Without a grant no proxy variable is set: the program has nothing to talk to."""
    from armature_temporal.tools._launch import PROXY_VARIABLES, proxied
    from armature_temporal.tools.sandbox import minimal_env

    env = minimal_env("/ws")
    assert not set(PROXY_VARIABLES) & set(env)
    given = proxied({**env, "NO_PROXY": "*"})
    assert {given[v] for v in PROXY_VARIABLES} == {"http://127.0.0.1:3128"}
    assert "NO_PROXY" not in given


def test_a_proxy_sweeps_the_socket_directories_of_dead_processes() -> None:
    """A worker killed before its exit handler ran left its socket directory in /tmp (43 of
    them after a day's tests); the next proxy removes those whose process is gone."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from armature_temporal.tools._egress import EgressProxy

    # A pid that has exited. Waited for through its Popen: a Popen dropped while its child
    # still runs is reaped by whichever later Popen call in this process comes first.
    child = subprocess.Popen(["true"])
    child.wait()
    dead_pid = child.pid
    stale = Path(tempfile.mkdtemp(prefix=f"armature-egress-{dead_pid}-"))
    alive = Path(tempfile.mkdtemp(prefix=f"armature-egress-{os.getpid()}-"))
    try:
        proxy = EgressProxy()
        assert not stale.exists() and alive.exists()
        assert proxy.path.parent.name.startswith(f"armature-egress-{os.getpid()}-")
    finally:
        alive.rmdir()
