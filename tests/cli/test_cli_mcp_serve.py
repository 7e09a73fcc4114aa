"""``armature mcp serve`` driven by the ``mcp`` SDK's own client: over stdio (the command a
desktop client starts) list the tools, run a spec, read its outputs, answer a gate; over
streamable HTTP behind the run API's tokens, a read-only token lists and reads but cannot
approve, and a request without a token is refused once tokens exist."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.spec.compiler import load_plan
from armature_temporal.store import TraceStore
from tests.fakes import SPECS, free_port
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]


def _address(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


def _payload(result: Any) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return dict(result.structured_content)


@pytest.fixture
def stdio_params(temporal_env: WorkflowEnvironment, task_queue: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=[
            str(REPO / "cli.py"),
            "mcp",
            "serve",
            str(SPECS / "quickstart.yaml"),
            str(SPECS / "customer-triage.yaml"),
            "--address",
            _address(temporal_env),
            "--task-queue",
            task_queue,
            "--wait",
            "60",
        ],
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        cwd=str(REPO),
    )


async def test_over_stdio_a_client_lists_runs_reads_and_approves(
    client: Client, task_queue: str, stdio_params: Any
) -> None:
    from mcp import Client as McpClient

    async with build_worker(client, task_queue), McpClient(stdio_params) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert set(tools) == {
            "quickstart",
            "customer-triage",
            "run_status",
            "list_gates",
            "decide_gate",
        }
        quick = load_plan(SPECS / "quickstart.yaml")
        assert tools["quickstart"].input_schema["properties"] == quick.inputs_schema["properties"]

        done = _payload(await mcp.call_tool("quickstart", {"topic": "tides"}))
        assert done["state"] == "completed", done
        assert done["outputs"], done
        status = _payload(await mcp.call_tool("run_status", {"run_id": done["run_id"]}))
        assert status["outputs"] == done["outputs"] and status["status"] == "completed"

        waiting = _payload(await mcp.call_tool("customer-triage", {}))
        run_id = waiting["run_id"]
        assert waiting["status"] == "running"
        assert [g["gate"] for g in waiting["waiting_gates"]] == ["approve_reply"], waiting
        listed = _payload(await mcp.call_tool("list_gates", {}))
        assert {"run_id": run_id, "gate": "approve_reply"}.items() <= next(
            g for g in listed["gates"] if g["run_id"] == run_id
        ).items()
        decided = _payload(
            await mcp.call_tool(
                "decide_gate",
                {"run_id": run_id, "gate": "approve_reply", "decision": "approve"},
            )
        )
        assert decided["decision"] == "approve" and decided["by"].startswith("mcp:")
        for _ in range(200):
            status = _payload(await mcp.call_tool("run_status", {"run_id": run_id}))
            if status["status"] != "running":
                break
            await asyncio.sleep(0.1)
        assert status["status"] == "completed", status

        bad = await mcp.call_tool("quickstart", {"topic": 42})
        assert bad.is_error and "topic" in _payload(bad)["error"]
        other = await mcp.call_tool("run_status", {"run_id": "no-such-run"})
        assert other.is_error and "no-such-run" in _payload(other)["error"]
    decisions = [(g.decision, g.decided_by) for g in TraceStore().gate_decisions(run_id)]
    assert decisions and decisions[0][0] == "approve" and decisions[0][1].startswith("mcp:")


async def _serving_http(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[str]:
    port = free_port()
    log = (tmp_path / "mcp-http.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "cli.py"),
            "mcp",
            "serve",
            str(SPECS / "customer-triage.yaml"),
            "--http",
            "--port",
            str(port),
            "--address",
            _address(temporal_env),
            "--task-queue",
            task_queue,
            "--wait",
            "30",
        ],
        cwd=REPO,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        stdout=log,
        stderr=log,
    )
    import httpx

    try:
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                try:
                    await http.get(f"http://127.0.0.1:{port}/mcp")
                    break
                except httpx.TransportError:
                    if proc.poll() is not None:
                        raise AssertionError((tmp_path / "mcp-http.log").read_text()) from None
                    await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _with_token(url: str, token: str | None) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}

    class Transport:
        def __init__(self) -> None:
            self.stack: Any = None

        async def __aenter__(self) -> Any:
            from contextlib import AsyncExitStack

            self.stack = AsyncExitStack()
            http = await self.stack.enter_async_context(httpx2.AsyncClient(headers=headers))
            return await self.stack.enter_async_context(
                streamable_http_client(url, http_client=http)
            )

        async def __aexit__(self, *exc: Any) -> None:
            await self.stack.__aexit__(*exc)

    return Transport()


async def test_over_http_tokens_and_scopes_decide_who_may_do_what(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    from mcp import Client as McpClient

    store = TraceStore()
    reader = store.create_token("reader", ["read", "run"])
    approver = store.create_token("approver", ["read", "approve"])
    serving = _serving_http(temporal_env, task_queue, tmp_path)
    url = await serving.__anext__()
    try:
        async with build_worker(client, task_queue):
            async with McpClient(_with_token(url, reader)) as mcp:
                names = {t.name for t in (await mcp.list_tools()).tools}
                assert "customer-triage" in names and "decide_gate" in names
                waiting = _payload(await mcp.call_tool("customer-triage", {}))
                run_id = waiting["run_id"]
                assert [g["gate"] for g in waiting["waiting_gates"]] == ["approve_reply"]
                refused = await mcp.call_tool(
                    "decide_gate",
                    {"run_id": run_id, "gate": "approve_reply", "decision": "approve"},
                )
                assert refused.is_error
                said = _payload(refused)["error"]
                assert "needs the approve scope" in said and "'reader'" in said, said
            async with McpClient(_with_token(url, approver)) as mcp:
                no_run = await mcp.call_tool("customer-triage", {})
                assert no_run.is_error and "needs the run scope" in _payload(no_run)["error"]
                decided = _payload(
                    await mcp.call_tool(
                        "decide_gate",
                        {"run_id": run_id, "gate": "approve_reply", "decision": "approve"},
                    )
                )
                assert decided["by"] == "approver"
            import httpx

            async with httpx.AsyncClient() as http:
                answer = await http.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={"Accept": "application/json, text/event-stream"},
                )
            assert answer.status_code == 401, answer.text
            assert json.loads(answer.text)["error"]["code"] == "unauthorized"
    finally:
        await serving.aclose()
    decisions = [(g.decision, g.decided_by) for g in TraceStore().gate_decisions(run_id)]
    assert decisions == [("approve", "approver")]
