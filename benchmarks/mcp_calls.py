"""What an MCP tool call costs the tools worker: milliseconds per call over the connection a
worker keeps (:func:`armature_temporal.mcp.calls.call_mcp`), against starting the server for
every call (a fresh sandboxed stdio connection, then the call: what a client that does not
keep its servers pays), measured in the same run.

One process, no Temporal: ``mcp-server-time`` (a dev dependency) in the tools sandbox,
``get_current_time`` called ``--calls`` times (default 50) per side, in ``--rounds`` rounds
(default 3) that alternate which side goes first. Reported: ms per call for each (median of
the rounds' means), the ratio (the target: a kept connection at least 10x cheaper than a
start per call), and the first call's cost (the start, the tool listing the drift check
reads, the call).

``python benchmarks/mcp_calls.py [--calls N] [--rounds R] [--json]``
"""

from __future__ import annotations

import argparse
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
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TARGET_RATIO = 10.0


def _server() -> Any:
    from armature_temporal.spec.mcp import PlanMcpServer

    command = Path(sys.executable).parent / "mcp-server-time"
    if not command.exists():
        raise SystemExit(f"{command} is not installed: pip install -e '.[dev]'")
    return PlanMcpServer(name="time", transport="stdio", command=str(command))


async def main(calls: int, rounds: int) -> dict[str, Any]:
    from armature_temporal.mcp.calls import call_mcp, close_all
    from armature_temporal.mcp.discovery import list_tools
    from armature_temporal.mcp.transport import open_client
    from armature_temporal.spec.mcp import PlanMcpTool, tool_hash

    server = _server()
    workspace = Path(tempfile.mkdtemp(prefix="armature-bench-mcp-"))
    async with open_client(server, workspace) as client:
        listed = {t.name: t for t in await list_tools(client)}
    t = listed["get_current_time"]
    tool = PlanMcpTool(
        server="time",
        name=t.name,
        call_name=t.name,
        description=t.description or "",
        input_schema=t.input_schema,
        hash=tool_hash(t.name, t.description or "", t.input_schema),
    )
    args = {"timezone": "UTC"}

    async def kept() -> None:
        result = await call_mcp(server, tool, args, workspace=workspace, key="bench", cap=64_000)
        assert result.ok, result

    async def fresh() -> None:
        async with open_client(server, workspace) as client:
            result = await client.call_tool(tool.name, args)
            assert not result.is_error, result

    started = time.perf_counter()
    await kept()  # the first call starts the server and lists its tools
    first_ms = (time.perf_counter() - started) * 1000
    means: dict[str, list[float]] = {"kept": [], "fresh": []}
    for r in range(rounds):
        order = [("kept", kept), ("fresh", fresh)]
        for name, run in order if r % 2 == 0 else list(reversed(order)):
            started = time.perf_counter()
            for _ in range(calls):
                await run()
            means[name].append((time.perf_counter() - started) * 1000 / calls)
    await close_all()
    kept_ms, fresh_ms = (statistics.median(means[k]) for k in ("kept", "fresh"))
    from armature_temporal.tools.sandbox import sandbox

    return {
        "calls": calls,
        "rounds": rounds,
        "sandbox": sandbox().kind,
        "kept_ms_per_call": round(kept_ms, 2),
        "fresh_ms_per_call": round(fresh_ms, 2),
        "ratio_fresh_over_kept": round(fresh_ms / kept_ms, 1),
        "first_call_ms": round(first_ms, 1),
        "target_ratio": TARGET_RATIO,
        "met": fresh_ms / kept_ms >= TARGET_RATIO,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    report = asyncio.run(main(opts.calls, opts.rounds))
    if opts.json:
        print(json.dumps(report))
    else:
        print(
            f"MCP calls in the {report['sandbox']} sandbox: kept connection "
            f"{report['kept_ms_per_call']} ms/call, a start per call "
            f"{report['fresh_ms_per_call']} ms/call: {report['ratio_fresh_over_kept']}x "
            f"(target ≥{TARGET_RATIO:g}x: {'met' if report['met'] else 'MISSED'}); first call "
            f"(start, listing, call) {report['first_call_ms']} ms"
        )
