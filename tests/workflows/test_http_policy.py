"""http_request reaches only the hosts the spec allows; a subagent can only narrow the list."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.errors import SpecError
from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec, load_spec_text
from tests.fakes import plan_from, start
from worker import build_worker


@pytest.fixture
def local_http() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()


async def test_allowed_host_is_reached_and_others_refused(
    client: Client, task_queue: str, local_http: int
) -> None:
    plan = plan_from(f"""\
name: fetch
http_allow_hosts: [127.0.0.1]
stages:
  - {{id: ok, tool: {{name: http_request, args: {{url: "http://127.0.0.1:{local_http}/x"}}}}}}
  - {{id: nope, tool: {{name: http_request, args: {{url: "http://localhost:{local_http}/x"}}}}}}
""")
    async with build_worker(client, task_queue):
        result = await run_outcome(await start(client, plan, task_queue))
    assert result is not None
    assert result.stages["ok"].status == "completed"
    assert result.outputs["ok"]["status_code"] == 200
    assert result.stages["nope"].error_type == "policy_blocked"
    assert "not allowed" in (result.stages["nope"].error or "")


async def test_a_subagent_cannot_widen_its_parents_hosts(
    client: Client, task_queue: str, local_http: int, tmp_path: Path
) -> None:
    (tmp_path / "child.yaml").write_text(f"""\
name: wide-child
http_allow_hosts: [127.0.0.1]
stages:
  - {{id: get, tool: {{name: http_request, args: {{url: "http://127.0.0.1:{local_http}/"}}}}}}
""")
    (tmp_path / "parent.yaml").write_text("""\
name: narrow-parent
http_allow_hosts: [api.example.com]
stages:
  - {id: sub, subagent_spec: child.yaml}
""")
    plan = compile_spec(load_spec(tmp_path / "parent.yaml"))
    async with build_worker(client, task_queue):
        await run_outcome(await start(client, plan, task_queue, run_id="narrow-1"))
        child = await run_outcome(
            client.get_workflow_handle("narrow-1/sub/0", result_type=RunResult)
        )
    assert child is not None
    assert child.stages["get"].error_type == "policy_blocked"
    assert "outside an enclosing run's http_allow_hosts" in (child.stages["get"].error or "")


def test_http_tool_without_allowed_hosts_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="http_allow_hosts is empty"):
        load_spec_text(
            "name: x\nstages:\n  - {id: a, tool: {name: http_request, "
            "args: {url: 'https://example.com'}}}\n"
        )
