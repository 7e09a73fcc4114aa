"""``armature worker --metrics-port``: one Prometheus endpoint with the Temporal SDK's
``temporal_*`` and Armature's ``armature_*`` families, counted from the trace records the
worker stored. Real parts only: the worker CLI in a subprocess, a real Temporal dev server,
prometheus_client's own parser, and the Grafana dashboard checked against what is served."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from armature_temporal.commands._common import queue_pollers
from armature_temporal.service.client import decide_gate, run_outcome
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.telemetry.metrics import METRIC_NAMES
from tests.fakes import free_port, plan_from, run_armature, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "armature.json"

#: Two model stages, a human gate, a tool that works and one that fails (last, so the run
#: fails there with everything else done): every kind of record the metrics count.
SPEC = """
name: {name}
model_tiers:
  small: {{provider: simulate, valid_rate: 1.0, quality: 0.9}}
stages:
  - id: outline
    role: {{name: Outliner, description: "List three points about tides."}}
  - id: write
    depends_on: [outline]
    role: {{name: Writer, description: "Write a paragraph from {{{{ outline }}}}."}}
    gate: {{type: human, message: "Publish it?"}}
  - id: echo
    tool: {{name: shell, args: {{argv: [sh, -c, "echo hi"]}}}}
  - id: broken
    depends_on: [write, echo]
    tool: {{name: shell, args: {{argv: [/nonexistent/armature-probe]}}}}
"""

OK_SPEC = """
name: metrics-ok
model_tiers:
  small: {provider: simulate, valid_rate: 1.0, quality: 0.9}
stages:
  - {id: only, role: {name: Only, description: "Say hi."}}
"""


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """The sum of ``sample``'s values whose labels include ``labels``."""
    family = sample.removesuffix("_total").removesuffix("_count").removesuffix("_sum")
    family = re.sub(r"_bucket$", "", family)
    return sum(
        s.value
        for s in families[family].samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


@contextlib.asynccontextmanager
async def metrics_worker(
    client: Client, task_queue: str, port: int, log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m cli worker --no-tools --metrics-port PORT`` until it polls the queue."""
    target = str(client.service_client.config.target_host)
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "cli", "worker", "--no-tools"),
            *("--address", target, "--task-queue", task_queue),
            *("--metrics-port", str(port)),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not await queue_pollers(client, task_queue):
            if proc.returncode is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"worker did not start (exit {proc.returncode}): "
                    f"{log.read_text(errors='replace')[-3000:]}"
                )
            await asyncio.sleep(0.3)
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_worker_metrics_show_temporal_and_armature_families_from_the_trace_store(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    name = "metrics-probe"
    plan = plan_from(SPEC.format(name=name))
    port = free_port()
    async with (
        metrics_worker(client, task_queue, port, tmp_path / "worker.log"),
        # The tools run in this process: their records are stored (and counted) by the
        # worker under test, which runs the workflow: no port is needed where tools run.
        build_worker(client, task_queue, role="tools"),
    ):
        finished = await start(client, plan_from(OK_SPEC), task_queue)
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "write", timeout_s=60)
        await asyncio.sleep(0.3)  # a measurable wait
        await decide_gate(client, handle.id, "write", "approve", by="tester")
        result = await asyncio.wait_for(run_outcome(handle), 60)
        done = await asyncio.wait_for(run_outcome(finished), 60)
        assert done is not None and done.state == "completed", done
        assert result is not None and result.state == "failed", result
        assert "'broken'" in (result.reason or ""), result.reason
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert answer.status_code == 200
    text = answer.text
    families = _families(text)

    # The SDK's own families, through its Prometheus setting.
    temporal = {n for n, f in families.items() if n.startswith("temporal_") and f.samples}
    assert {"temporal_workflow_completed", "temporal_workflow_failed"} <= temporal, temporal
    assert _value(families, "temporal_workflow_completed_total", task_queue=task_queue) == 1
    assert _value(families, "temporal_workflow_failed_total", task_queue=task_queue) == 1

    # Armature's, equal to what the trace store holds for the run.
    records = TraceStore(database_url()).records(handle.id)
    stages = [r for r in records if r.kind == "stage"]
    assert len(stages) == 4
    assert _value(families, "armature_stage_duration_seconds_count", spec=name) == 4
    assert _value(families, "armature_stage_duration_seconds_count", spec=name, stage="write") == 1
    # The gate's wait is part of its stage's duration.
    assert _value(families, "armature_stage_duration_seconds_sum", spec=name, stage="write") > 0.3
    calls = [r for r in records if r.kind in ("attempt", "evaluation", "critique", "context")]
    prompt = sum(r.prompt_tokens for r in calls)
    completion = sum(r.completion_tokens for r in calls)
    assert prompt > 0 and completion > 0
    assert _value(families, "armature_llm_tokens_total", spec=name, direction="input") == prompt
    assert (
        _value(families, "armature_llm_tokens_total", spec=name, direction="output") == completion
    )
    assert _value(families, "armature_llm_cost_usd_total", spec=name) == pytest.approx(
        sum(r.cost_usd for r in calls)
    )
    assert _value(families, "armature_llm_calls_total", spec=name, tier="small") == len(calls)
    assert _value(families, "armature_tool_calls_total", spec=name, outcome="ok") == 1
    assert _value(families, "armature_tool_calls_total", spec=name, stage="broken") == 1
    assert (
        _value(
            families, "armature_tool_calls_total", spec=name, stage="broken", outcome="tool_error"
        )
        == 1
    )
    assert _value(families, "armature_gate_wait_seconds_count", spec=name, decision="approve") == 1
    assert _value(families, "armature_gate_wait_seconds_sum", spec=name) >= 0.3
    assert _value(families, "armature_runs_total", spec=name, status="failed") == 1
    assert _value(families, "armature_runs_total", spec="metrics-ok", status="completed") == 1
    assert _value(families, "armature_runs_total", spec=name, status="completed") == 0
    hqs = TraceStore(database_url()).run(handle.id)
    assert hqs is not None and hqs.hqs is not None
    assert _value(families, "armature_run_hqs_sum", spec=name) == pytest.approx(hqs.hqs)
    # No label holds a run id.
    assert handle.id not in text
    # Every family this module defines is served (the dashboard may query any of them).
    for metric in METRIC_NAMES:
        assert metric.removesuffix("_total") in families, metric
    _check_dashboard(families)


def _check_dashboard(families: dict[str, Any]) -> None:
    """Every metric a panel of deploy/grafana/armature.json queries is served."""
    board = json.loads(DASHBOARD.read_text())
    exprs = [
        t["expr"] for p in board["panels"] if p.get("type") != "row" for t in p.get("targets", [])
    ]
    assert exprs, "the dashboard has no queries"
    served = {s.name for f in families.values() for s in f.samples} | set(families)
    served |= {f"{n}_total" for n in families} | {
        f"{n}{suffix}" for n in families for suffix in ("_bucket", "_count", "_sum")
    }
    queried = {m for e in exprs for m in re.findall(r"\b((?:armature|temporal)_[a-z_]+)", e)}
    missing = sorted(queried - served)
    assert not missing, f"panels query metrics /metrics does not serve: {missing}"


async def test_worker_metrics_port_in_use_names_the_port_and_the_fix() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await run_armature(
            "worker", "--metrics-port", str(port), "--address", "127.0.0.1:1", timeout=60
        )
    assert done.returncode == 1, done.stderr
    assert f"--metrics-port {port}" in done.stderr
    assert "give each worker its own --metrics-port" in done.stderr


@pytest.mark.parametrize(
    ("port", "said"),
    [("0", "greater than or equal to 1"), ("65536", "less than or equal to 65535")],
)
async def test_worker_metrics_port_out_of_range_is_refused(port: str, said: str) -> None:
    done = await run_armature("worker", "--metrics-port", port, timeout=60)
    assert done.returncode == 2
    assert "'--metrics-port'" in done.stderr and said in done.stderr, done.stderr


async def test_serve_metrics_show_temporal_and_api_families(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    target = str(client.service_client.config.target_host)
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "cli", "serve", "specs/quickstart.yaml"),
            *("--port", str(port), "--address", target, "--task-queue", task_queue),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "ARMATURE_WEBHOOK_SECRET": ""},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/health")).status_code == 200:
                        break
                assert proc.returncode is None, log.read_text(errors="replace")[-3000:]
                await asyncio.sleep(0.1)
            before = _families((await http.get("/metrics")).text)
            for _ in range(3):
                assert (await http.get("/health")).status_code == 200
            answer = await http.get("/metrics")
    finally:
        proc.terminate()
        await proc.wait()
    # On loopback with no token yet, the read scope is open to this machine (as for /docs).
    assert answer.status_code == 200, answer.text
    after = _families(answer.text)
    health = {"method": "GET", "route": "/health", "status": "200"}
    counted = _value(after, "armature_api_requests_total", **health)
    assert counted - _value(before, "armature_api_requests_total", **health) == 3
    # serve's own Temporal client, through the SDK's Prometheus setting.
    assert _value(after, "temporal_request_total") > 0, sorted(after)
