"""Verification runs never act (issue 25, item 4).

The attack: three runs were rejected at a gate ("do NOT send this"); `armature improve` then
replayed their inputs, approved the gate itself in its verification runs, and the
``http_request`` after the gate sent the data out. Here a loopback listener counts what
reaches it. Verification runs (improve, optimize, memory CI, fine-tune pairs: all start
``workflows/paired.py``'s runs) approve no gate — the gated stage and what depends on it are not
executed — and never replay the inputs of a run in which a gate was rejected.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from activities.finetune import _prepare as finetune_prepare
from activities.learn import recent_inputs
from activities.llm import llm_call
from armature_temporal.experience.learning import LearnResult
from armature_temporal.finetune.models import FinetuneInput
from armature_temporal.improve.models import ImproveResult
from armature_temporal.runtime.models import RunInput, RunResult
from armature_temporal.runtime.payloads import data_converter
from armature_temporal.service.client import decide_gate, run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.views import load_runs
from tests.fakes import fake_llm_call_tool_loop, plan_from, run_armature, start, wait_for_gate
from worker import ACTIVITIES, WORKFLOWS, build_worker, workflow_runner

#: What the people who rejected the runs said.
REJECTED = "do NOT send this"


class Listener:
    """A loopback HTTP server that counts every request it gets (any method)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                with listener._lock:
                    listener.requests.append((self.command, self.path))
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port

    def tickets(self) -> list[str]:
        """The ``ticket`` query value of each request so far."""
        with self._lock:
            return [
                parse_qs(urlsplit(path).query).get("ticket", [""])[0] for _, path in self.requests
            ]


@pytest.fixture
def listener() -> Iterator[Listener]:
    got = Listener()
    threading.Thread(target=got.server.serve_forever, daemon=True).start()
    try:
        yield got
    finally:
        got.server.shutdown()
        got.server.server_close()


def outbound_spec(port: int, name: str = "outbound", extra: str = "") -> str:
    """A model drafts, a person approves, then the ticket goes out by GET (the data in the
    URL). The small tier is often invalid, so a round has a tier change to verify."""
    return f"""\
name: {name}
model_tiers:
  small: {{provider: simulate, valid_rate: 0.1, quality: 0.5}}
  frontier: {{provider: simulate, valid_rate: 1.0, quality: 0.95}}
http_allow_hosts: [127.0.0.1]
inputs:
  type: object
  properties: {{ticket: {{type: string}}}}
  required: [ticket]
self_improvement:
  editable_surfaces: [draft.model_tier]
  min_traces: 6
  target_hqs: 0.99
  verify_runs: 8
{extra}stages:
  - id: draft
    role:
      name: Drafter
      model_tier: small
      description: |
        Summarise this ticket for the partner system: {{{{ inputs.ticket }}}}
    output_mode: json
    output_schema:
      type: object
      properties: {{summary: {{type: string}}}}
      required: [summary]
    on_fail:
      loop: {{max: 2}}
      escalate: true
  - id: approve
    depends_on: [draft]
    gate:
      type: human
      message: "Send this to the partner? {{{{ draft.summary }}}}"
  - id: send
    depends_on: [approve]
    tool:
      name: http_request
      args:
        url: "http://127.0.0.1:{port}/tickets?ticket={{{{ inputs.ticket | urlencode }}}}"
        method: GET
"""


APPROVED = [f"ticket {i}" for i in range(6)]
SECRETS = [f"secret {i}" for i in range(3)]


async def _history(client: Client, task_queue: str, text: str, listener: Listener) -> None:
    """Six runs a person approved (each sends its ticket), then three a person rejected."""
    plan = plan_from(text)
    for i, ticket in enumerate([*APPROVED, *SECRETS]):
        run_id = f"{plan.name}-{i}"
        handle = await start(client, plan, task_queue, {"ticket": ticket}, run_id=run_id)
        await wait_for_gate(handle, "approve")
        ok = ticket in APPROVED
        await decide_gate(
            client,
            handle.id,
            "approve",
            "approve" if ok else "reject",
            comment=None if ok else REJECTED,
        )
        result = await run_outcome(handle)
        assert result is not None and result.state == ("completed" if ok else "rejected")
    assert sorted(listener.tickets()) == APPROVED  # the listener is reachable


def _verification_runs(spec: str) -> list[Any]:
    store = TraceStore(database_url())
    try:
        return [
            r for r in load_runs(store, spec=spec, limit=1000, verification=True) if r.verification
        ]
    finally:
        store.close()


def _assert_held_at_the_gate(spec: str, said: str = "") -> None:
    """Every verification run completed without its gate approved: the gate and the send
    skipped (``verification_gate``), the send never executed, no rejected input replayed.
    ``said``: what the round printed, shown when it ran none."""
    runs = _verification_runs(spec)
    assert runs, f"the round ran no verification runs; it said: {said[-3000:]}"
    for run in runs:
        assert run.verification and run.status == "completed", (run.run_id, run.reason)
        assert (run.inputs or {}).get("ticket") in APPROVED, run.inputs
        stages = {r.stage_id: r for r in run.records if r.kind == "stage"}
        assert stages["approve"].error_type == "verification_gate", stages["approve"]
        assert stages["send"].status == "skipped"
        assert stages["send"].data["verification_gate"] == "approve"
        assert not [r for r in run.records if r.kind == "tool"]  # nothing was called
        assert not [r for r in run.records if r.kind == "gate"]  # nothing was decided


async def _round(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    listener: Listener,
    command: str,
    name: str,
    extra: str = "",
) -> dict[str, Any]:
    """The history, then one round of ``armature <command>`` as a user runs it; its JSON."""
    text = outbound_spec(listener.port, name=name, extra=extra)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    if command == "learn":  # a person's lesson waits in quarantine for memory CI's replays
        added = await run_armature(
            "memory", "add", str(path), "--stage", "draft", "--text", "Keep the summary short."
        )
        assert added.returncode == 0, added.stderr
    async with build_worker(client, task_queue):
        await _history(client, task_queue, text, listener)
        addr = str(client.service_client.config.target_host)
        done = await run_armature(
            command, str(path), "--json", "--address", addr, "--task-queue", task_queue
        )
    assert done.returncode == 0, done.stderr
    # Zero requests from the round: only the six a person approved ever arrived.
    assert sorted(listener.tickets()) == APPROVED
    _assert_held_at_the_gate(name, done.stdout + done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def test_improve_sends_nothing_and_never_replays_a_rejected_input(
    client: Client, task_queue: str, tmp_path: Path, listener: Listener
) -> None:
    answer = await _round(client, task_queue, tmp_path, listener, "improve", "outbound")
    answer.pop("improve_id")
    result = ImproveResult.model_validate(answer)
    # The comparison used the stages before the gate, on both sides: the tier change that
    # makes the draft valid first time still verifies.
    assert result.status == "proposed", result.detail
    (tier,) = result.proposals
    assert tier.verdict == "verified", tier.detail
    assert len(tier.baseline_hqs) == len(tier.candidate_hqs) == 8
    assert result.diagnosis is not None
    assert all(i["ticket"] in APPROVED for i in result.diagnosis.sample_inputs)


async def test_optimize_sends_nothing_and_never_replays_a_rejected_input(
    client: Client, task_queue: str, tmp_path: Path, listener: Listener
) -> None:
    answer = await _round(client, task_queue, tmp_path, listener, "optimize", "outbound-opt")
    answer.pop("improve_id")
    result = ImproveResult.model_validate(answer)
    # the refiner's change was verified by runs (its notes say why a proposal was dropped)
    assert result.proposals, (result.detail, result.notes)


async def test_memory_ci_sends_nothing_and_never_replays_a_rejected_input(
    client: Client, task_queue: str, tmp_path: Path, listener: Listener
) -> None:
    experience = "experience:\n  verify_runs: 6\n"
    answer = await _round(
        client, task_queue, tmp_path, listener, "learn", "outbound-mem", extra=experience
    )
    answer.pop("learn_id")
    result = LearnResult.model_validate(answer)
    assert result.status == "learned", result.detail
    # memory CI's own choice of inputs, from the same history.
    store = TraceStore(database_url())
    try:
        chosen = recent_inputs(load_runs(store, spec="outbound-mem", limit=500), 20)
    finally:
        store.close()
    assert sorted(i["ticket"] for i in chosen) == APPROVED


async def test_finetune_pairs_never_replay_a_rejected_runs_inputs(
    client: Client, task_queue: str, tmp_path: Path, listener: Listener
) -> None:
    """The fine-tune loop's paired runs replay the held-out examples' inputs; with half the
    examples held out, the rejected runs' drafts are among them, their inputs never."""
    base = tmp_path / "models" / "base"
    base.mkdir(parents=True)  # _prepare only needs the directory; nothing is trained here
    extra = (
        f"finetune:\n  base_model: {base}\n  min_examples: 4\n  eval_share: 0.5\n"
        "  target_stages: [draft]\n"
    )
    text = outbound_spec(listener.port, name="outbound-ft", extra=extra)
    path = tmp_path / "outbound-ft.yaml"
    path.write_text(text)
    async with build_worker(client, task_queue):
        await _history(client, task_queue, text, listener)
    prepared = finetune_prepare(FinetuneInput(spec_text=text, spec_path=str(path)), "ft-round")
    (job,) = prepared.jobs
    examples = {e.run_id for e in job.request.examples}
    assert {f"outbound-ft-{i}" for i in (6, 7, 8)} <= examples  # the rejected runs' drafts
    replayed = [i["ticket"] for i in job.heldout_inputs]
    assert replayed and set(replayed) <= set(APPROVED), replayed


TOOL_LOOP = """\
name: held
http_allow_hosts: [127.0.0.1]
safety_rules:
  - {{tool: file_list, action: require_approval, message: a person looks first}}
inputs:
  type: object
  properties: {{tool_turns: {{type: integer}}}}
contracts:
  outputs:
    - {{stage: send, key: status_code, required: true}}
stages:
  - id: agent
    role:
      name: Agent
      description: "List the workspace {{{{ inputs.tool_turns }}}} times."
      tools: [file_list]
  - id: approve
    depends_on: [agent]
    gate: {{type: human, on_reject: continue}}
  - id: send
    depends_on: [approve]
    tool: {{name: http_request, args: {{url: "http://127.0.0.1:{port}/x?ticket=after-gate"}}}}
  - id: report
    depends_on: [send]
    role:
      name: Reporter
      description: "Report after {{{{ inputs.tool_turns }}}} turns: {{{{ send.status_code }}}}"
"""


async def test_a_verification_run_approves_no_gate_and_refuses_tool_approvals(
    client: Client, task_queue: str, listener: Listener
) -> None:
    """The runs every loop starts (``workflows/paired.py``: ``verification=True``): a tool
    approval in the agent's loop is refused at once, with the reason the model reads, and the
    loop goes on; the stage gate is never approved (not even with ``on_reject: continue``), so
    the send after it and the stage after that are not executed, and the run completes."""
    plan = plan_from(TOOL_LOOP.format(port=listener.port))
    activities = [fake_llm_call_tool_loop, *(a for a in ACTIVITIES if a is not llm_call)]
    async with build_worker(client, task_queue, activities=activities):
        handle = await client.start_workflow(
            "RunSpec",
            RunInput(plan=plan, inputs={"tool_turns": 2}, verification=True, replicate=1),
            id="held-verification",
            task_queue=task_queue,
            result_type=RunResult,
        )
        result = await run_outcome(handle)
        history = await handle.fetch_history()
    assert listener.requests == []
    assert result is not None and result.state == "completed", result and result.reason
    agent, gate, send, report = (result.stages[s] for s in ("agent", "approve", "send", "report"))
    assert agent.status == "completed" and agent.output == {
        "content": "listed the workspace 2 times"
    }
    assert (gate.status, gate.error_type, gate.gate) == ("skipped", "verification_gate", None)
    for later in (send, report):
        assert (later.status, later.error_type) == ("skipped", "verification_gate")
        assert "comes after gate 'approve'" in (later.error or "")
    assert set(result.outputs) == {"agent"}  # the gated stage's output goes no further
    store = TraceStore(database_url())
    try:
        records = store.records(handle.id)
    finally:
        store.close()
    decided = [r for r in records if r.kind == "gate"]
    assert [(r.stage_id, r.status, r.data["by"]) for r in decided] == [
        ("agent#1", "reject", "verification run"),
        ("agent#2", "reject", "verification run"),
    ]
    # What the model read back for each refused call, in its last turn's messages.
    last = [r for r in records if r.kind == "attempt" and r.stage_id == "agent"][-1]
    told = [m["content"] for m in last.data["messages"] if m.get("role") == "tool"]
    assert len(told) == 2 and all("never approves a gate" in t for t in told), told
    # The held stages are recorded, each naming the gate, so comparisons leave them out.
    held = {r.stage_id: r.data.get("verification_gate") for r in records if r.kind == "stage"}
    assert held == {"agent": None, "approve": "approve", "send": "approve", "report": "approve"}
    # The run replays deterministically (strict sandbox).
    replayer = Replayer(
        workflows=WORKFLOWS, data_converter=data_converter(), workflow_runner=workflow_runner()
    )
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


def _fetch(port: int, ticket: str, method: str = "GET") -> str:
    return (
        f'{{name: http_request, args: {{url: "http://127.0.0.1:{port}/?ticket={ticket}", '
        f"method: {method}}}}}"
    )


async def test_a_verification_run_sends_only_what_the_spec_marks_safe(
    client: Client, task_queue: str, listener: Listener, tmp_path: Path
) -> None:
    """An outbound request is an action (reversibility none), a GET too, unless the spec marks
    its host and method safe; a subagent's mark counts only where its parents mark it too."""
    port = listener.port
    allow = "http_allow_hosts: [127.0.0.1]\n"
    mark = "http_safe: [{host: 127.0.0.1, methods: [GET]}]\n"
    files = {
        # A child that marks its own GET safe, under a parent that marks it too / does not.
        "child-a.yaml": f"name: child-a\n{allow}{mark}stages:\n"
        f"  - {{id: get, tool: {_fetch(port, 'child-of-marked')}}}\n",
        "child-b.yaml": f"name: child-b\n{allow}{mark}stages:\n"
        f"  - {{id: get, tool: {_fetch(port, 'child-of-unmarked')}}}\n",
        "marked.yaml": f"name: marked\n{allow}{mark}stages:\n"
        f"  - {{id: get, tool: {_fetch(port, 'marked')}}}\n"
        f"  - {{id: post, fail_as_value: true, tool: {_fetch(port, 'post', 'POST')}}}\n"
        "  - {id: sub, subagent_spec: child-a.yaml}\n",
        "unmarked.yaml": f"name: unmarked\n{allow}stages:\n"
        f"  - {{id: get, fail_as_value: true, tool: {_fetch(port, 'unmarked')}}}\n"
        "  - {id: sub, subagent_spec: child-b.yaml}\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    plans = {n: compile_spec(load_spec(tmp_path / f"{n}.yaml")) for n in ("marked", "unmarked")}
    outcomes: dict[str, RunResult | None] = {}
    async with build_worker(client, task_queue):
        for name, plan in plans.items():
            handle = await client.start_workflow(
                "RunSpec",
                RunInput(plan=plan, inputs={}, verification=True),
                id=f"{name}-verification",
                task_queue=task_queue,
                result_type=RunResult,
            )
            outcomes[name] = await run_outcome(handle)
        # A real run of the unmarked spec sends as before: marks matter to verification runs.
        plain = await run_outcome(await start(client, plans["unmarked"], task_queue))
    assert plain is not None and plain.stages["get"].status == "completed"
    assert sorted(listener.tickets()) == [
        "child-of-marked",
        "child-of-unmarked",  # the real run's
        "marked",
        "unmarked",  # the real run's
    ]
    marked, unmarked = outcomes["marked"], outcomes["unmarked"]
    assert marked is not None and unmarked is not None
    assert marked.stages["get"].status == "completed"
    for refused in (marked.outputs["post"], unmarked.outputs["get"]):
        assert refused["_failed"] and "reversibility 'none'" in refused["error"], refused
    assert unmarked.stages["sub"].status == "failed"  # its child's GET was refused
    assert "reversibility 'none'" in (unmarked.stages["sub"].error or "")
