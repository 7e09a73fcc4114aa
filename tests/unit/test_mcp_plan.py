"""MCP servers at plan time: their tools listed and pinned, names resolved (canonical,
0.7.0's ``server.tool``, bare where one server lists it), rules checked against the listed
schemas, and bad servers as spec errors with the line, what failed and its stderr."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.mcp.discovery import forget
from armature_temporal.runtime.policy import evaluate_policy
from armature_temporal.spec.models import SafetyRule
from tests.fakes import plan_from

TESTS = Path(__file__).resolve().parents[1]
PROBE = TESTS / "mcp_probe_server.py"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    monkeypatch.setenv("ARMATURE_WORKSPACE", str(root))
    forget()
    return root


def test_bad_servers_are_plan_errors_that_say_what_and_where(workspace: Path) -> None:
    raw = TESTS / "mcp_raw_server.py"
    spec = f"""\
name: mcp-bad
mcp_servers:
  - name: dies
    command: {sys.executable}
    args: ["-c", "import sys; sys.stderr.write('boom: no config file\\\\n'); sys.exit(3)"]
  - name: raw
    command: {sys.executable}
    args: [{raw}, bad_schema]
stages:
  - id: s
    role: {{description: d}}
"""
    with pytest.raises(SpecError) as caught:
        plan_from(spec)
    issues = {i.path: i for i in caught.value.issues}
    dies = issues["mcp_servers[0]"]
    assert dies.line == 3 and "did not start" in dies.message
    assert "boom: no config file" in dies.message  # the last lines of its stderr
    broken = issues["mcp_servers[1]"]
    assert "tool 'broken' has a malformed input schema" in broken.message

    twice = f"""\
name: mcp-twice
mcp_servers:
  - {{name: one, command: {sys.executable}, args: [{TESTS / "mcp_probe_server.py"}, stdio]}}
  - {{name: two, command: {sys.executable}, args: [{TESTS / "mcp_probe_server.py"}, stdio]}}
stages:
  - id: s
    role: {{description: d, tools: [echo]}}
"""
    with pytest.raises(SpecError) as caught:
        plan_from(twice)
    (issue,) = caught.value.issues
    assert issue.path == "stages[0].role.tools[0]"
    assert "['one', 'two']" in issue.message and "mcp:one/echo" in issue.message
    plan = plan_from(twice.replace("tools: [echo]", "tools: [mcp:two/echo]"))
    role = plan.stage("s").role
    assert role is not None and role.tools == ["mcp:two/echo"]


def _probe_spec(tools: str, rules: str = "") -> str:
    return f"""\
name: mcp-names
mcp_servers:
  - {{name: probe, command: {sys.executable}, args: [{PROBE}, stdio]}}
{rules}
stages:
  - id: s
    role: {{description: d, tools: {tools}}}
"""


def test_names_resolve_to_the_canonical_form_and_wrong_ones_say_what_exists(
    workspace: Path,
) -> None:
    plan = plan_from(_probe_spec("[probe.echo, probe, mcp:probe/slow_write, file_read]"))
    role = plan.stage("s").role
    assert role is not None
    # 0.7.0's server.tool, a bare name (the server's tool "probe"), canonical; a built-in
    # stays itself
    assert role.tools == [
        "mcp:probe/echo",
        "mcp:probe/probe",
        "mcp:probe/slow_write",
        "file_read",
    ]
    with pytest.raises(SpecError) as caught:
        plan_from(_probe_spec("[mcp:probe/ecco]"))
    assert "lists no tool 'ecco'" in str(caught.value) and "did you mean 'echo'" in str(
        caught.value
    )
    with pytest.raises(SpecError) as caught:
        plan_from(_probe_spec("[mcp:prob/echo]"))
    assert "which mcp_servers does not declare" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        plan_from(_probe_spec("[nothing_like_it]"))
    assert "unknown tool 'nothing_like_it'" in str(caught.value)


def test_rules_name_mcp_tools_and_their_arguments_as_listed(workspace: Path) -> None:
    rules = """\
safety_rules:
  - {tool: echo, condition: {field: text, op: contains, value: rm}, action: block}
  - {tool: "mcp:probe/*", action: require_approval}
"""
    plan = plan_from(_probe_spec("[mcp:probe]", rules))
    assert [r.tool for r in plan.safety_rules] == ["mcp:probe/echo", "mcp:probe/*"]

    def decide(tool: str, args: dict[str, object]) -> str:
        return evaluate_policy(
            rules=list(plan.safety_rules),
            mode="permissive",
            tool=tool,
            args=args,
            reversibility="none",
        ).action

    assert decide("mcp:probe/echo", {"text": "rm -rf"}) == "block"
    assert decide("mcp:probe/echo", {"text": "hi"}) == "require_approval"  # server-wide
    assert decide("mcp:probe/slow_write", {}) == "require_approval"
    assert decide("mcp:probes/echo", {}) == "allow"  # another server's tool: not matched
    assert decide("shell", {}) == "allow"
    bad = "safety_rules:\n  - {tool: echo, condition: {field: txt, op: truthy}, action: block}\n"
    with pytest.raises(SpecError) as caught:
        plan_from(_probe_spec("[echo]", bad))
    (issue,) = caught.value.issues
    assert issue.path == "safety_rules[0].condition.field"
    assert "has no argument 'txt'" in issue.message and "'text'" in issue.message


def test_the_policy_matches_server_wide_rules_only_for_that_server() -> None:
    rule = SafetyRule(tool="mcp:git/*", action="block")
    for tool, expected in [
        ("mcp:git/git_commit", "block"),
        ("mcp:gitx/git_commit", "allow"),
        ("mcp:git", "allow"),
        ("git_commit", "allow"),
    ]:
        got = evaluate_policy(
            rules=[rule], mode="permissive", tool=tool, args={}, reversibility="none"
        ).action
        assert got == expected, (tool, got)


def test_a_listing_is_reused_only_while_what_the_server_reads_is_the_same(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"""\
name: mcp-again
mcp_servers:
  - name: probe
    command: {sys.executable}
    args: [{PROBE}, stdio]
    env: {{PROBE_VARIANT: "${{PROBE_VARIANT}}"}}
stages:
  - id: s
    role: {{description: d, tools: [echo]}}
"""

    def described() -> str:
        (server,) = plan_from(spec).mcp_servers
        return server.tool("echo").description

    monkeypatch.setenv("PROBE_VARIANT", "")
    first = described()
    starts = (workspace / "server.starts").read_text()
    assert described() == first  # reused: the server was not started again
    assert (workspace / "server.starts").read_text() == starts
    monkeypatch.setenv("PROBE_VARIANT", "changed")  # what ${PROBE_VARIANT} reads changed
    assert "changed since the plan" in described()


def test_a_server_installed_beside_armature_is_found_without_an_activated_environment(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A desktop client starts `armature` by its path, with no virtualenv on PATH: a server
    pip installed into the same environment is still found."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    spec = """\
name: mcp-beside
mcp_servers: [{name: time, command: mcp-server-time}]
stages:
  - id: s
    role: {description: d, tools: [get_current_time]}
"""
    (server,) = plan_from(spec).mcp_servers
    assert [t.name for t in server.tools] == ["get_current_time", "convert_time"]
    with pytest.raises(SpecError) as caught:
        plan_from(spec.replace("mcp-server-time", "mcp-server-nowhere"))
    assert "pip install mcp-server-nowhere" in str(caught.value)


def test_an_http_server_on_this_machine_needs_local_and_never_reaches_armatures_services(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fakes import free_port

    def spec(url: str, local: bool) -> str:
        return f"""\
name: mcp-where
mcp_servers: [{{name: web, url: "{url}", local: {str(local).lower()}}}]
stages:
  - id: s
    role: {{description: d}}
"""

    port = free_port()
    with pytest.raises(SpecError) as caught:
        plan_from(spec(f"http://127.0.0.1:{port}/mcp", local=False))
    assert "a loopback address" in str(caught.value) and "local: true" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        plan_from(spec("http://10.1.2.3/mcp", local=False))
    assert "a private address" in str(caught.value)
    # local: true lets a server here be reached, but never Temporal or the store
    temporal = free_port()
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{temporal}")
    monkeypatch.setenv("ARMATURE_DB_URL", "postgresql+psycopg://u@127.0.0.1:5432/armature")
    for own in (temporal, 5432):
        with pytest.raises(SpecError) as caught:
            plan_from(spec(f"http://localhost:{own}/mcp", local=True))
        assert "Armature's own service" in str(caught.value), own
    with pytest.raises(SpecError) as caught:  # allowed through: nothing listens there
        plan_from(spec(f"http://127.0.0.1:{port}/mcp", local=True))
    assert "did not start" in str(caught.value) and "own service" not in str(caught.value)
    with pytest.raises(SpecError) as caught:  # a stdio server has no url to be local
        plan_from(spec("x", local=True).replace('url: "x"', "command: echo"))
    assert "url, headers and local are for http servers" in str(caught.value)


def test_an_http_server_whose_name_rebinds_to_loopback_after_the_check_is_never_reached(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding against the MCP client: the name first resolves to a public address (the
    check passes), then to the loopback, where a server that records every request listens.
    The connection checks the address it connects to, so the request never arrives."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.fakes import fake_rebinding_dns

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.send_response(500)
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    given = fake_rebinding_dns(monkeypatch, "rebind-mcp.example", "93.184.215.14", "127.0.0.1")
    try:
        with pytest.raises(SpecError) as caught:
            plan_from(
                f"""\
name: mcp-rebind
mcp_servers: [{{name: web, url: "http://rebind-mcp.example:{server.server_port}/mcp"}}]
stages:
  - id: s
    role: {{description: d}}
"""
            )
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [], "the request reached the loopback server"
    assert given[0] == "93.184.215.14" and "127.0.0.1" in given[1:]
    assert "127.0.0.1, a loopback address" in str(caught.value), caught.value
