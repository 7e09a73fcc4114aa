"""OpenTelemetry traces, end to end: a worker process and the CLI export to a real OTLP/HTTP
receiver (tests/otlp_receiver.py), and what arrives is the run's tree with the GenAI attributes.

The worker is killed (SIGKILL) while the run waits at its gate, after the spans of the stages
already done were exported; a second worker carries the run on from its history once the gate
is approved. Replaying that history must not send those spans again: every span id arrives once,
and each stage has exactly one span.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.traces import store_for
from armature_temporal.runtime.models import RunResult, RunStatus
from armature_temporal.store.engine import database_url
from tests.fakes import run_armature
from tests.otlp_receiver import ReceivedSpan, otlp_receiver
from tests.worker_process import spawn

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
name: otel-traced
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
model_tiers:
  sim: {provider: simulate, model: sim-small, valid_rate: 1.0}
stages:
  - id: research
    role:
      name: Researcher
      description: "Look around the workspace, then write a note on {{ inputs.topic }}."
      model_tier: sim
      tools: [file_list]
  - id: summarize
    depends_on: [research]
    role: {name: Summarizer, description: "Summarize {{ research.content }}", model_tier: sim}
  - id: publish
    depends_on: [summarize]
    gate: {type: human, message: "Publish it?"}
"""


def otel_env(endpoint: str, service: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": service,
        "PYTHONPATH": str(REPO),
    }


def ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[str]:
    """The names of ``span``'s ancestors, nearest first (as far as they arrived)."""
    names = []
    parent = span.parent_id
    while parent is not None and parent in by_id:
        names.append(by_id[parent].name)
        parent = by_id[parent].parent_id
    return names


async def test_a_run_exports_its_tree_once_across_a_killed_worker(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    address = temporal_env.client.service_client.config.target_host
    spec = tmp_path / "otel-traced.yaml"
    spec.write_text(SPEC)
    with otlp_receiver() as received:
        cli_env = {"PYTHONPATH": str(REPO)}  # the CLI is told by its option instead
        cli_otel = ("--otel-endpoint", received.endpoint)
        worker_env = otel_env(received.endpoint, "armature-worker")
        async with contextlib.AsyncExitStack() as stack:
            first = await stack.enter_async_context(
                spawn(address, task_queue, tmp_path / "first.log", worker_env)
            )
            started = await run_armature(
                *cli_otel,
                "submit",
                str(spec),
                "--address",
                address,
                "--task-queue",
                task_queue,
                "--json",
                env=cli_env,
            )
            assert started.returncode == 0, started.stderr
            run_id = json.loads(started.stdout)["run_id"]

            # The two finished stages' spans were sent before the worker dies.
            await asyncio.to_thread(
                received.wait_for,
                lambda spans: (
                    {"invoke_agent Researcher", "invoke_agent Summarizer"}
                    <= {s.name for s in spans}
                ),
                "the finished stages' spans",
            )
            handle = client.get_workflow_handle(run_id, result_type=RunResult)
            for _ in range(200):
                if (await handle.query("status", result_type=RunStatus)).pending_gates:
                    break
                await asyncio.sleep(0.05)
            await first.crash()
            await stack.enter_async_context(
                spawn(address, task_queue, tmp_path / "second.log", worker_env)
            )
            approved = await run_armature(
                *cli_otel, "approve", run_id, "publish", "--address", address, env=cli_env
            )
            assert approved.returncode == 0, approved.stderr
            result = await asyncio.wait_for(handle.result(), 60)
            await asyncio.to_thread(
                received.wait_for,
                lambda spans: any(s.name == "invoke_workflow otel-traced" for s in spans),
                "the run's own span, ended by the second worker",
            )
            await asyncio.sleep(1.5)  # one more export interval: anything duplicated arrives
        spans = received.snapshot()

    by_id = {s.span_id: s for s in spans}
    # Nothing arrived twice: not a span, and not a stage.
    assert len(by_id) == len(spans), Counter(s.span_id for s in spans).most_common(3)
    run_spans = [s for s in spans if s.attributes.get("armature.run_id") == run_id]
    names = Counter(s.name for s in run_spans)
    assert names["invoke_workflow otel-traced"] == 1
    assert names["invoke_agent Researcher"] == 1
    assert names["invoke_agent Summarizer"] == 1
    assert names["gate publish"] == 1
    assert len({s.trace_id for s in run_spans}) == 1

    store = store_for(database_url())
    records = store.records(run_id)
    stage_hash = {r.stage_id: r.hash for r in records if r.kind == "stage"}
    attempts = [r for r in records if r.kind == "attempt"]

    # The tree: RunWorkflow → invoke_workflow → invoke_agent → (activity) → chat / execute_tool.
    chats = [s for s in run_spans if s.name.startswith("chat ")]
    assert {s.attributes["armature.stage"] for s in chats} == {"research", "summarize"}
    for chat in chats:
        up = ancestors(chat, by_id)
        assert up[0] == "RunActivity:llm_call", up
        assert "invoke_workflow otel-traced" in up and "RunWorkflow:RunSpec" in up, up
        assert any(n.startswith("invoke_agent ") for n in up), up
        a = chat.attributes
        assert chat.name == "chat sim-small"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "simulate"
        assert a["gen_ai.request.model"] == "sim-small"
        assert a["openinference.span.kind"] == "LLM"
        assert a["armature.tier"] == "sim"
        assert "gen_ai.input.messages" not in a  # content only with the opt-in
    # One chat per model call: a tool loop's turns are one attempt in the trace store, whose
    # tokens are the sum of its turns'.
    per_stage: Counter[tuple[str, str]] = Counter()
    for s in chats:
        per_stage[(s.attributes["armature.stage"], "in")] += s.attributes[
            "gen_ai.usage.input_tokens"
        ]
        per_stage[(s.attributes["armature.stage"], "out")] += s.attributes[
            "gen_ai.usage.output_tokens"
        ]
    recorded: Counter[tuple[str, str]] = Counter()
    for r in attempts:
        recorded[(r.stage_id, "in")] += r.prompt_tokens
        recorded[(r.stage_id, "out")] += r.completion_tokens
    assert per_stage == recorded
    assert Counter(s.attributes["armature.stage"] for s in chats)["research"] >= 2

    tools = [s for s in run_spans if s.name == "execute_tool file_list"]
    tool_records = [r for r in records if r.kind == "tool"]
    assert tools and len(tools) == len(tool_records)
    for tool in tools:
        up = ancestors(tool, by_id)
        assert up[0] == "invoke_agent Researcher", up
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["openinference.span.kind"] == "TOOL"
        assert tool.attributes["armature.tool.outcome"] == "ok"

    agent = {
        s.attributes["armature.stage"]: s
        for s in run_spans
        if "armature.stage_kind" in s.attributes
    }
    research = agent["research"].attributes
    assert research["gen_ai.operation.name"] == "invoke_agent"
    assert research["gen_ai.agent.name"] == "Researcher"
    assert research["openinference.span.kind"] == "AGENT"
    assert research["armature.tier"] == "sim"
    assert research["armature.status"] == "completed"
    for stage_id, span in agent.items():
        assert span.attributes["armature.trace.hash"] == stage_hash[stage_id]
    gate = agent["publish"].attributes
    assert gate["armature.gate.decision"] == "approve"
    decided = result.stages["publish"].gate
    assert decided is not None and decided.by
    assert gate["armature.gate.by"] == decided.by
    run_span = next(s for s in run_spans if s.name == "invoke_workflow otel-traced")
    assert run_span.attributes["gen_ai.agent.name"] == "otel-traced"
    row = store.run(run_id)
    assert row is not None and row.hqs is not None
    assert run_span.attributes["armature.hqs"] == row.hqs
    assert ancestors(run_span, by_id)[:1] == ["RunWorkflow:RunSpec"]
    # The CLI that submitted the run started the trace.
    assert "StartWorkflow:RunSpec" in ancestors(run_span, by_id)
    assert {s.service for s in spans} >= {"armature-submit", "armature-approve", "armature-worker"}
    assert os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") is None  # this process exports nothing


async def test_a_collector_that_is_down_neither_fails_nor_holds_up_a_run(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Every export fails (nothing listens): the run completes as it would without tracing,
    and the worker says, once, that it dropped spans."""
    import socket

    from tests.fakes import plan_from, start

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    address = temporal_env.client.service_client.config.target_host
    log = tmp_path / "worker.log"
    env = {**otel_env(dead, "armature-worker"), "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    async with spawn(address, task_queue, log, env):
        plan = plan_from(SPEC.split("  - id: publish")[0])  # the two stages before the gate
        handle = await start(client, plan, task_queue)
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.state == "completed"
        for _ in range(100):  # the export interval, then the failed request
            if "span(s) dropped" in log.read_text(errors="replace"):
                break
            await asyncio.sleep(0.1)
    text = log.read_text(errors="replace")
    assert "span(s) dropped (the collector could not be reached or refused them)" in text
    assert text.count("span(s) dropped") == 1
