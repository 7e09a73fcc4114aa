"""The tool-call sandbox's cost: milliseconds per program run in the sandbox, against a plain
process-group spawn measured in the same run.

One process, no server: :func:`armature_temporal.tools.sandbox.run_process` runs ``true``
``--calls`` times (default 200) one after another, in ``--rounds`` rounds (default 5) that
alternate which side goes first:

- **sandbox** — the sandbox this machine uses (``sandbox()``: ``$ARMATURE_SANDBOX``, else the
  best that works), with a workspace under a temporary ``ARMATURE_HOME`` so the hiding mounts
  are made as in a real call; ``--network`` also grants network (the egress proxy's unix socket
  is bound in and its forwarder started);
- **baseline** — the same ``run_process`` with ``Sandbox("process-group")``: a plain
  ``fork``/``exec`` in a new session, killed whole at the end (what ``ARMATURE_SANDBOX=none``
  does).

Reported: ms per call for each (median of the rounds' means), the ratio, the sandbox kind,
and the target: the sandbox within 2x of the ~17 ms per call that main measured before the
round-two hardening (``--before MS`` changes that figure). The ratio against the baseline says
what the sandbox itself costs here; the machine's speed moves both sides.

``python benchmarks/sandbox.py [--calls N] [--rounds R] [--network] [--before MS] [--json]``
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: ms per sandboxed call that main measured before the round-two hardening (issue #25).
BEFORE_MS = 17.0
TARGET_RATIO = 2.0


async def _timed(calls: int, run: Any) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        done = await run()
        if done.exit_code != 0:
            raise SystemExit(f"a benchmark call failed: {done}")
    return (time.perf_counter() - start) * 1000 / calls


async def measure(calls: int, rounds: int, network: bool) -> dict[str, Any]:
    from armature_temporal.tools.sandbox import Sandbox, run_process, sandbox

    home = Path(tempfile.mkdtemp(prefix="armature-bench-sandbox-"))
    os.environ["ARMATURE_HOME"] = str(home)
    workspace = home / "workspace" / "bench"
    workspace.mkdir(parents=True)
    box = sandbox()
    plain = Sandbox("process-group", (), "benchmark baseline")
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    extra: dict[str, Any] = {"network": True} if network else {}

    def call(which: Any) -> Any:
        more = extra if which is box else {}
        return lambda: run_process(
            ["true"], cwd=workspace, env=env, timeout_s=30, cap=1000, box=which, **more
        )

    await _timed(5, call(box))  # warm-up: the probe, the proxy, the page cache
    await _timed(5, call(plain))
    boxed: list[float] = []
    base: list[float] = []
    for r in range(rounds):
        order = [(boxed, box), (base, plain)]
        for into, which in order if r % 2 == 0 else reversed(order):
            into.append(await _timed(calls, call(which)))
    sandbox_ms, baseline_ms = statistics.median(boxed), statistics.median(base)
    return {
        "sandbox": box.kind,
        "network": network,
        "calls": calls,
        "rounds": rounds,
        "sandbox_ms_per_call": round(sandbox_ms, 2),
        "baseline_ms_per_call": round(baseline_ms, 2),
        "ratio_vs_baseline": round(sandbox_ms / baseline_ms, 2),
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="calls per side per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (alternating order)")
    parser.add_argument("--network", action="store_true", help="grant network to the calls")
    parser.add_argument(
        "--before", type=float, default=BEFORE_MS, help="ms per call before (the target's base)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args.calls, args.rounds, args.network))
    figures["before_ms_per_call"] = args.before
    figures["ratio_vs_before"] = round(figures["sandbox_ms_per_call"] / args.before, 2)
    figures["target_met"] = figures["ratio_vs_before"] <= TARGET_RATIO
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(
        f"sandbox ({figures['sandbox']}{', network' if args.network else ''}): "
        f"{figures['sandbox_ms_per_call']:.2f} ms/call"
    )
    print(f"baseline (process group):        {figures['baseline_ms_per_call']:.2f} ms/call")
    print(f"sandbox/baseline: {figures['ratio_vs_baseline']:.2f}x")
    print(
        f"sandbox/before ({args.before:g} ms): {figures['ratio_vs_before']:.2f}x "
        f"[{'ok' if figures['target_met'] else 'ABOVE TARGET'}] (target <= {TARGET_RATIO:g}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
