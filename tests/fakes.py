"""Test fakes, registered under the real activity names, and small spec helpers."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer

from activities.llm import llm_call
from armature_temporal.experience import Heuristic, heuristic_id
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult, RunInput, RunResult
from armature_temporal.runtime.traces import TraceBatch
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text

SPECS = Path(__file__).resolve().parents[1] / "specs"


def plan_from(text: str) -> Plan:
    """Compile spec text (subagent paths resolve against specs/)."""
    return compile_spec(load_spec_text(text, "test.yaml", base_dir=SPECS))


async def start(
    client: Client,
    plan: Plan,
    task_queue: str,
    inputs: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> WorkflowHandle[Any, RunResult]:
    from armature_temporal.service.client import prepare_inputs, start_run

    return await start_run(
        client,
        plan,
        prepare_inputs(plan, inputs or {}),
        task_queue=task_queue,
        run_id=run_id or f"{plan.name}-{uuid.uuid4().hex[:8]}",
    )


async def run_history(client: Client, task_queue: str, text: str, prefix: str, runs: int) -> None:
    """``runs`` completed runs of the spec ``text``, one after another, with input ``topic``
    ``topic 0``, ``topic 1``, ... and ids ``<prefix>-hist-<i>``: the history an improvement
    round diagnoses."""
    plan = plan_from(text)
    for i in range(runs):
        handle = await start(
            client, plan, task_queue, {"topic": f"topic {i}"}, run_id=f"{prefix}-hist-{i}"
        )
        await handle.result()


@activity.defn(name="llm_call")
async def fake_llm_call_counting(inp: LLMCallInput) -> LLMCallResult:
    """The real llm_call, plus one line per execution in $ARMATURE_CALL_LOG.

    Each line: run id, stage id, the stage's attempt and Temporal's activity attempt (2 and up
    when Temporal retried the activity, e.g. after its worker died).
    """
    log = os.environ.get("ARMATURE_CALL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(
                json.dumps(
                    {
                        "run_id": inp.run_id,
                        "stage": inp.stage.id,
                        "attempt": inp.attempt,
                        "activity_attempt": activity.info().attempt,
                    }
                )
                + "\n"
            )
    return await llm_call(inp)


def run_input(plan: Plan, **inputs: Any) -> RunInput:
    return RunInput(plan=plan, inputs=inputs)


def fake_vote(index: int, answers: str) -> dict[str, Any]:
    """A python tool for fan-out tests: child ``index`` answers ``answers.split(',')[index]``."""
    return {"answer": answers.split(",")[index]}


async def fake_slow_answer(index: int) -> dict[str, Any]:
    """A python tool: child 0 answers at once, the others only after a long wait."""
    import asyncio

    await asyncio.sleep(0 if index == 0 else 30)
    return {"answer": f"child-{index}"}


def fake_big_output(size: int) -> dict[str, Any]:
    """A python tool returning ``size`` bytes of text (for large-payload tests)."""
    return {"text": "x" * size}


@activity.defn(name="llm_call")
async def fake_llm_call_tool_loop(inp: LLMCallInput) -> LLMCallResult:
    """An agent that calls ``file_list`` on every turn below ``inputs.tool_turns``, then answers.

    The stage's prompt must name ``inputs.tool_turns`` (the workflow sends only the variables a
    prompt reads). Like the real ``llm_call``, the result carries the messages sent (prompt plus
    the whole transcript so far), so the history this fake produces is the size a real tool
    loop's would be.
    """
    from armature_temporal.runtime.prompts import build_messages

    stage = inp.stage
    assert stage.role is not None, "llm_call runs LLM stages only"
    tool_turns = inp.variables.get("inputs", {}).get("tool_turns")
    if not isinstance(tool_turns, int):
        raise ValueError(
            f"stage {stage.id!r}: fake_llm_call_tool_loop needs an integer inputs.tool_turns "
            f"named in the stage's prompt, got {tool_turns!r}"
        )
    messages = build_messages(
        role_type=stage.role.type,
        role_name=stage.role.name,
        prompt_template=inp.prompt_template,
        variables=inp.variables,
        mission=inp.mission,
        output_mode=stage.output_mode,
        output_schema=stage.output_schema,
    )
    messages.extend(inp.transcript)
    result = LLMCallResult(valid=True, model="fake", tier=inp.tier.name, messages=messages)
    if inp.turn < tool_turns:
        call = {"id": f"call_{inp.turn}", "name": "file_list", "arguments": {"path": "."}}
        return result.model_copy(update={"tool_calls": [call], "messages": []})
    answer = f"listed the workspace {inp.turn} times"
    return result.model_copy(update={"text": answer, "output": {"content": answer}})


async def fake_timed_step(index: int, delays: str) -> dict[str, Any]:
    """A python tool for fan-out crash tests: child ``index`` sleeps
    ``float(delays.split(',')[index])`` seconds, after appending one line per execution to the
    file named by $ARMATURE_STEP_LOG (``{"index", "event": "start"|"end", "pid"}``)."""
    import asyncio

    def log(event: str) -> None:
        path = os.environ.get("ARMATURE_STEP_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"index": index, "event": event, "pid": os.getpid()}) + "\n")

    log("start")
    await asyncio.sleep(float(delays.split(",")[index]))
    log("end")
    return {"index": index, "slept_s": float(delays.split(",")[index])}


def fake_fail_once(index: int, marks: str) -> dict[str, Any]:
    """A python tool that fails the first time it runs for ``index`` (a mark file remembers)."""
    mark = Path(marks) / f"ok-{index}"
    if not mark.exists():
        mark.touch()
        raise RuntimeError(f"child {index} fails on its first run")
    return {"index": index}


async def wait_for_gate(handle: Any, gate: str, timeout_s: float = 10.0) -> Any:
    """Poll the run's status query until ``gate`` is pending; returns that RunStatus."""
    import asyncio

    from armature_temporal.runtime.models import RunStatus

    for _ in range(int(timeout_s / 0.05)):
        status = await handle.query("status", result_type=RunStatus)
        if any(g.stage == gate for g in status.pending_gates):
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"gate {gate} never became pending in {handle.id}")


def replayer(workflows: list[type] | None = None, *, strict: bool = True) -> Replayer:
    """A replayer for ``workflows`` (default: the worker's), with the worker's data converter and
    sandbox (strict unless ``strict=False``)."""
    from armature_temporal.runtime.payloads import data_converter
    from worker import WORKFLOWS, workflow_runner

    return Replayer(
        workflows=workflows or WORKFLOWS,
        data_converter=data_converter(),
        workflow_runner=workflow_runner(strict=strict),
    )


async def assert_replays(client: Client, *workflow_ids: str) -> None:
    """Replay each workflow's whole history from the start on today's interpreter, in the strict
    sandbox, and fail naming each one whose commands come out different.

    The replay-safety check for runs made on a cached worker. Running them on a worker with
    ``max_cached_workflows=0`` (every task replayed live) was the old check; with local
    activities in flight, an eviction there can strand their markers and livelock the run (SDK
    core: temporalio/sdk-rust #1304, #1482), which hung a CI run's gated run-events test to its
    600 s timeout ("LA marker handling in invalid state MarkerCommandCreated").
    """
    assert workflow_ids, "name at least one workflow to replay"
    replayed: dict[str, str] = {}  # Temporal's run id -> workflow id

    async def histories() -> Any:
        for wid in workflow_ids:
            history = await client.get_workflow_handle(wid).fetch_history()
            assert len(history.events) > 2, f"{wid}: no history to replay"
            replayed[history.run_id] = wid
            yield history

    results = await replayer().replay_workflows(histories(), raise_on_replay_failure=False)
    assert list(replayed.values()) == list(workflow_ids)
    failed = {replayed[run]: str(err) for run, err in results.replay_failures.items()}
    assert not failed, f"do not replay: {failed}"


#: How many more times fake_record_traces_flaky fails before it lets writes through.
FLAKY_STORE = {"failures_left": 0}


@activity.defn(name="record_traces")
async def fake_record_traces_flaky(batch: TraceBatch) -> int:
    """The real record_traces, failing while FLAKY_STORE["failures_left"] > 0 (a store outage)."""
    from activities.traces import record_traces

    if FLAKY_STORE["failures_left"] > 0:
        FLAKY_STORE["failures_left"] -= 1
        raise RuntimeError("trace store unavailable (simulated outage)")
    return await record_traces(batch)


async def run_armature(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run the armature console script in a subprocess (repo root as cwd) without blocking
    the event loop, where an in-process worker may be running. Returns CompletedProcess."""
    import asyncio
    import subprocess
    import sys

    exe = str(Path(sys.executable).parent / "armature")
    return await asyncio.to_thread(
        subprocess.run,
        [exe, *args],
        capture_output=True,
        text=True,
        cwd=SPECS.parent,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


async def run_round_cli(
    client: Client, task_queue: str, command: str, spec: str, *extra: str
) -> dict[str, Any]:
    """``armature <command> SPEC [extra] --json`` against the test server and task queue, as
    a user starts a loop's round (finetune, learn, ...); its JSON answer (failing the test,
    with stderr, when it exits non-zero)."""
    import json

    addr = str(client.service_client.config.target_host)
    done = await run_armature(
        command,
        spec,
        "--json",
        *extra,
        "--address",
        addr,
        "--task-queue",
        task_queue,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def wait_serving(http: Any, proc: Any, path: str = "/health") -> None:
    """Poll ``GET path`` with the httpx client ``http`` until it answers 200, failing with the
    server's stderr if its process ``proc`` exits first."""
    import asyncio

    import httpx

    for _ in range(300):
        try:
            if (await http.get(path)).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.communicate()[1]
        await asyncio.sleep(0.1)
    raise AssertionError("the server did not come up")


def free_port() -> int:
    """A TCP port nothing listens on right now (127.0.0.1)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- adapters, memory and evaluations -------------------------------------------------------


def fake_adapter_sum(a: int, b: int) -> dict[str, Any]:
    """A python adapter: the sum of two integers (and their types, to show they stay ints)."""
    return {"sum": a + b, "types": [type(a).__name__, type(b).__name__]}


async def fake_adapter_words(text: str) -> list[str]:
    """A python adapter (a coroutine) returning a list, not an object."""
    return text.split()


def fake_adapter_seen(seen: Any) -> dict[str, Any]:
    """A python adapter returning what it was given: shows what a stage's template saw."""
    return {"seen": seen}


def fake_adapter_claims(subject: str, predicate: str, value: str, text: str) -> dict[str, Any]:
    """A python adapter stating one fact, as a stage whose output says what it knows."""
    return {"facts": [{"subject": subject, "predicate": predicate, "object": value, "text": text}]}


def fake_adapter_raises(reason: str) -> dict[str, Any]:
    """A python adapter that fails."""
    raise ValueError(reason)


@activity.defn(name="load_memory")
async def fake_load_memory_down(query: Any) -> Any:
    """load_memory while the trace store is unreachable."""
    raise RuntimeError("trace store unavailable (simulated outage)")


@activity.defn(name="capture_memory")
async def fake_capture_memory_down(capture: Any) -> int:
    """capture_memory while the trace store is unreachable."""
    raise RuntimeError("trace store unavailable (simulated outage)")


#: fake_llm_call_hanging hangs (no heartbeat, no answer) in this stage on Temporal attempts up
#: to this one.
HANGING_CALLS: dict[str, Any] = {"stage": None, "attempts": 0}


@activity.defn(name="llm_call")
async def fake_llm_call_hanging(inp: LLMCallInput) -> LLMCallResult:
    """The real llm_call, except that its first HANGING_CALLS["attempts"] Temporal attempts
    hang without heartbeating, as a call on a worker that froze or lost its server does, so
    the call times out that many times before it answers."""
    import asyncio

    if inp.stage.id == HANGING_CALLS["stage"] and activity.info().attempt <= int(
        HANGING_CALLS["attempts"]
    ):
        await asyncio.sleep(3600)  # cancelled when the attempt times out
    return await llm_call(inp)


def heuristic(
    spec_name: str,
    text: str,
    status: str = "promoted",
    stage: str | None = "answer",
    now: str = "2026-12-01T00:00:00+00:00",
) -> Heuristic:
    """A heuristic as a person or an older scanner left it in the store (no scan on the way in:
    the test puts it there with :meth:`TraceStore.add_heuristic`)."""
    return Heuristic(
        id=heuristic_id(spec_name, stage, text),
        spec_name=spec_name,
        stage_id=stage,
        kind="procedural",
        text=text,
        status=status,  # type: ignore[arg-type]
        source="person",
        provenance=[],
        created_at=now,
        updated_at=now,
    )


def fake_rebinding_dns(monkeypatch: Any, name: str, *answers: str) -> list[str]:
    """Make ``name`` resolve to each of ``answers`` in turn (the last one from then on), as a
    DNS server an attacker runs can (DNS rebinding); other names resolve as usual. Returns the
    list of answers given, in order, for the test to read."""
    import socket

    real = socket.getaddrinfo
    given: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        text = host.decode() if isinstance(host, bytes) else str(host)  # anyio passes bytes
        if text.lower().rstrip(".") != name:
            return real(host, port, *args, **kwargs)
        address = answers[min(len(given), len(answers) - 1)]
        given.append(address)
        return real(address, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return given
