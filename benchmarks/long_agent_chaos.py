"""A long tool loop under chaos (issue #28): one run whose agent takes N tool turns (1,000 by
default) while worker processes are SIGKILLed and the Temporal server is killed and restarted.

The parts are the chaos run's (tests/chaos.py): a dev server of its own with its state in a file
(tests/dev_server.py), two worker processes (tests/worker_process.py) with the real activities,
a replacement started for each one killed. The model is ``fake_agent_serving``
(tests/fake_agent.py) on loopback: on every turn it calls the ledger tool
(tests/tool_modules/chaos_ledger.py: each call appends one line naming its turn to a file), then
answers. The loop runs under ``context: {token_budget: 4000, keep_recent: 3}`` with the default
``segment_turns`` (100): it crosses from the run into its AgentLoop child, which continues as
new every 100 turns.

Checked, and printed:

* the run completed with the agent's answer after N turns;
* **the ledger**: one line per turn. A line more for a turn is a tool call run twice — which
  Temporal allows only when a worker died after the tool ran and before the server heard it
  finish (at-least-once); each is counted and shown, never hidden;
* **the transcript is whole**: the last request's window holds the newest turns in order, with
  no gap, and the compaction note accounts for every older one;
* **the trace chain** verifies (one chain across the run and every child execution), with one
  ``tool`` record per turn and one ``attempt`` record;
* the largest history among the run's and the child's executions (events, bytes).

``python benchmarks/long_agent_chaos.py [--turns 1000] [--kills 5] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

LEDGER_TOOL = "tests.tool_modules.chaos_ledger:chaos_append"
#: Seconds the fake agent takes to answer (so kills land in model calls as well as between).
THINK_S = 0.02

SPEC = """\
name: long-chaos
model_tiers:
  small: {{provider: openai, model: gpt-4o-mini, api_base: "{base}", api_key_env: FAKE_AGENT_KEY}}
context: {{token_budget: 4000, keep_recent: 3}}
stages:
  - id: agent
    role:
      description: Append to the ledger {turns} times, then say done.
      tools: ["{tool}"]
      max_turns: {max_turns}
"""


class LedgerAgent:
    """Calls the ledger tool on turns 1..N (naming the turn), then answers."""

    def __init__(self, run_id: str, turns: int) -> None:
        self.run_id, self.turns = run_id, turns
        self.last: dict[str, Any] = {}
        self.requests = 0
        self.lock = threading.Lock()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        from tests.fake_agent import text_reply, tool_call_reply, turn_of

        time.sleep(THINK_S)
        turn = turn_of(request["messages"])
        with self.lock:
            self.last, self.requests = request, self.requests + 1
        if turn <= self.turns:
            return tool_call_reply(turn, LEDGER_TOOL, {"run_id": self.run_id, "stage": str(turn)})
        return text_reply(f"done after {turn - 1} turns")


def window_is_whole(request: dict[str, Any], turns: int) -> tuple[bool, str]:
    """Whether the last request's window is the newest turns in order, the note covering the
    rest; and what it holds, in words."""
    messages = request.get("messages") or []
    kept = [
        int(c["id"].removeprefix("call_"))
        for m in messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    notes = [
        str(m.get("content")) for m in messages if "[Context compacted:" in str(m.get("content"))
    ]
    if not kept:
        return False, "no turn in the last window"
    whole = kept == list(range(kept[0], turns + 1))
    if kept[0] > 1:
        span = f"turns 1-{kept[0] - 1} ({kept[0] - 1} turns) are out of this window"
        whole = whole and len(notes) == 1 and span in notes[0]
    return whole, f"turns {kept[0]}-{kept[-1]} verbatim, {kept[0] - 1} in the note"


async def histories(client: Any, run_id: str) -> list[tuple[int, int]]:
    """``(events, bytes)`` of the run's history and each of its loop child's executions."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from long_agent import _histories

    return await _histories(client, run_id)


async def chaos(workdir: Path, turns: int, kills: int, seed: int, say: Any) -> dict[str, Any]:
    from armature_temporal.runtime.models import RunResult
    from armature_temporal.store import TraceStore
    from armature_temporal.store.keys import KEY_FILE
    from tests.chaos import Workers, result_of
    from tests.dev_server import dev_server
    from tests.fake_agent import fake_agent_serving
    from tests.fakes import plan_from, start

    rng = random.Random(seed)
    ledger = workdir / "ledger.jsonl"
    store_url = f"sqlite:///{workdir / 'traces.db'}"
    env = {
        "ARMATURE_HOME": str(workdir / "home"),
        "ARMATURE_DB_URL": store_url,
        "ARMATURE_CHAOS_LEDGER": str(ledger),
        "FAKE_AGENT_KEY": "fake-key",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    run_id = f"long-chaos-{uuid.uuid4().hex[:8]}"
    agent = LedgerAgent(run_id, turns)
    report: dict[str, Any] = {"turns": turns, "worker_kills": 0, "server_restarts": 0}
    began = time.monotonic()
    with fake_agent_serving(agent) as base:
        text = SPEC.format(base=base, turns=turns, tool=LEDGER_TOOL, max_turns=turns + 5)
        plan = plan_from(text)
        queue = f"long-chaos-{uuid.uuid4().hex[:6]}"
        async with dev_server(workdir / "temporal") as server:
            client = await server.client()
            workers = Workers(server, queue, workdir, env)
            try:
                for _ in range(2):
                    await workers.add()
                await start(client, plan, queue, run_id=run_id)
                # Kills spread over the loop's expected course (about 0.1 s a turn here); the
                # server goes down once, halfway.
                every = max(2.0, turns * 0.1 / (kills + 1))
                for n in range(1, kills + 1):
                    await asyncio.sleep(rng.uniform(0.5 * every, 1.5 * every))
                    await workers.kill_one(rng)
                    report["worker_kills"] += 1
                    say(
                        f"{time.monotonic() - began:6.1f}s  worker killed ({n}); "
                        f"{agent.requests} model requests so far"
                    )
                    if n == (kills + 1) // 2:
                        await server.restart(down_s=2.0)
                        report["server_restarts"] += 1
                        client = await server.client()
                        say(f"{time.monotonic() - began:6.1f}s  server killed and restarted")
                handle = client.get_workflow_handle(run_id, result_type=RunResult)
                result = await result_of(handle, within_s=600)
            finally:
                await workers.close()
            report["wall_s"] = round(time.monotonic() - began, 1)
            if isinstance(result, str):
                report["completed"] = False
                report["failure"] = result
            else:
                report["completed"] = result.state == "completed"
                report["answer"] = (result.outputs.get("agent") or {}).get("content")
            sizes = await histories(client, run_id)
            report["executions"] = len(sizes)
            report["max_history_events"] = max(e for e, _ in sizes)
            report["max_history_bytes"] = max(b for _, b in sizes)
    lines = Counter(
        json.loads(line)["stage"] for line in ledger.read_text(encoding="utf-8").splitlines()
    )
    report["ledger_missing_turns"] = [t for t in range(1, turns + 1) if lines[str(t)] == 0]
    report["ledger_turns_run_twice"] = sorted(int(t) for t, n in lines.items() if n > 1)
    whole, held = window_is_whole(agent.last, turns)
    report["transcript_whole"], report["last_window"] = whole, held
    store = TraceStore(store_url, key=workdir / "home" / KEY_FILE)
    try:
        records = store.records(run_id)
        _, breaks = store.verify([run_id])
    finally:
        store.close()
    report["chain_breaks"] = [f"{b.check} {b.problem}: {b.detail}" for b in breaks]
    report["tool_records"] = sum(1 for r in records if r.kind == "tool")
    report["attempt_records"] = sum(1 for r in records if r.kind == "attempt")
    report["ok"] = bool(
        report.get("completed")
        and report.get("answer") == f"done after {turns} turns"
        and not report["ledger_missing_turns"]
        and whole
        and not breaks
        and report["attempt_records"] == 1
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="tool turns of the loop")
    parser.add_argument("--kills", type=int, default=5, help="worker SIGKILLs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if not 1 <= args.turns <= 9_990:
        parser.error("--turns: between 1 and 9,990")
    with tempfile.TemporaryDirectory(prefix="long-chaos-") as tmp:
        report = asyncio.run(
            chaos(Path(tmp), args.turns, args.kills, args.seed, lambda m: print(m, file=sys.stderr))
        )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
