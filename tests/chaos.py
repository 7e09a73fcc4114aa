"""The chaos run: many runs of a 6-stage spec on two worker processes, a worker SIGKILLed every
few seconds and the Temporal server killed and restarted once, then every run checked.

Used by ``benchmarks/chaos.py`` (the full shape: 40 runs, 2 minutes of kills) and by
``tests/workflows/test_chaos.py`` (a smaller one, in CI).

"No activity completed twice" is checked three ways, per run:

- **Temporal**: every scheduled activity has exactly one ``ActivityTaskCompleted`` and none
  failed; no stage's activity was scheduled again after it completed (one per stage here).
- **Trace store**: exactly one ``stage`` record per stage, one ``attempt`` record per LLM stage
  (each stage's first attempt: worker loss never costs an attempt) and one ``tool`` record for
  the tool stage; the chain verifies.
- **Side effect**: the tool stage appends one line to a ledger per execution. An execution
  that appended but whose worker was killed before Temporal heard of its completion is run
  again (at-least-once, as Temporal promises for any activity); such a line is counted as a
  re-executed side effect, and only a retried activity can explain one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from armature_temporal.runtime.models import RunResult
from armature_temporal.store import TraceStore
from armature_temporal.store.keys import KEY_FILE
from tests.dev_server import DevServer, dev_server
from tests.fakes import plan_from, start
from tests.worker_process import WorkerProcess, spawn

STAGES = ["s1", "s2", "s3", "s4", "s5", "s6"]
TOOL_STAGE = "s3"


def chaos_spec(latency_ms: int) -> str:
    llm = (
        "{{id: {sid}, depends_on: [{dep}], role: {{name: {name}, description: "
        '"{{{{ {dep}.content }}}}", model_tier: slow}}}}'
    )
    return f"""\
name: chaos
model_tiers:
  slow: {{provider: simulate, valid_rate: 1.0, latency_ms: {latency_ms}}}
stages:
  - {{id: s1, role: {{name: One, description: start, model_tier: slow}}}}
  - {llm.format(sid="s2", dep="s1", name="Two")}
  - id: s3
    depends_on: [s2]
    tool:
      name: "tests.tool_modules.chaos_ledger:chaos_append"
      args: {{run_id: "{{{{ run.id }}}}", stage: s3}}
  - {{id: s4, depends_on: [s3], role: {{name: Four, description: "{{{{ s2.content }}}}",
     model_tier: slow}}}}
  - {llm.format(sid="s5", dep="s4", name="Five")}
  - {llm.format(sid="s6", dep="s5", name="Six")}
"""


@dataclass
class ChaosConfig:
    runs: int = 40
    workers: int = 2
    kill_every_s: tuple[float, float] = (2.0, 5.0)
    kill_for_s: float = 120.0
    #: When the server is killed and restarted, seconds into the kills.
    server_restart_at_s: float = 60.0
    server_down_s: float = 2.0
    #: Runs start spread over this long, so that kills land on runs at every stage.
    start_over_s: float = 100.0
    latency_ms: int = 3000
    finish_within_s: float = 300.0
    seed: int = 14


@dataclass
class ChaosReport:
    runs: int
    completed: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    worker_kills: int = 0
    server_restarts: int = 0
    #: Activity executions Temporal retried (its attempt numbers past the first).
    activity_retries: int = 0
    #: The most attempts one activity took (the old retry policy allowed 5).
    max_activity_attempt: int = 0
    #: Scheduled activities completed more (or less) than once, or failed.
    duplicate_completions: int = 0
    missing_completions: int = 0
    failed_activities: int = 0
    #: Stages whose activity was scheduled more than once.
    rescheduled_stages: int = 0
    #: Trace records beyond one per stage / attempt / tool call.
    duplicate_records: int = 0
    #: LLM stages that used more than one attempt.
    stages_past_first_attempt: int = 0
    chain_breaks: int = 0
    #: What verify found, one line each (``run check problem: detail``).
    chain_findings: list[str] = field(default_factory=list)
    #: Ledger lines beyond one per tool call, and the tool retries that can explain them.
    reexecuted_side_effects: int = 0
    tool_retries: int = 0
    missing_side_effects: int = 0
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.completed == self.runs
            and self.duplicate_completions == self.missing_completions == 0
            and self.failed_activities == self.rescheduled_stages == 0
            and self.duplicate_records == self.stages_past_first_attempt == 0
            and self.chain_breaks == self.missing_side_effects == 0
            and self.reexecuted_side_effects <= self.tool_retries
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


class Workers:
    """``count`` worker processes; :meth:`kill_one` SIGKILLs one and starts its replacement."""

    def __init__(self, server: DevServer, queue: str, workdir: Path, env: dict[str, str]):
        self.server, self.queue, self.workdir, self.env = server, queue, workdir, env
        self.stack = contextlib.AsyncExitStack()
        self.live: list[WorkerProcess] = []
        self.starting: list[asyncio.Task[None]] = []
        self.spawned = 0

    async def add(self) -> None:
        self.spawned += 1
        log = self.workdir / f"worker-{self.spawned}.log"
        self.live.append(
            await self.stack.enter_async_context(
                spawn(self.server.address, self.queue, log, self.env)
            )
        )

    async def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a live worker (waiting for one, if replacements are still starting) and
        start its replacement in the background, so the kills keep their pace."""
        while not self.live:
            await asyncio.sleep(0.1)
        victim = self.live.pop(rng.randrange(len(self.live)))
        await victim.crash()
        self.starting.append(asyncio.create_task(self.add()))

    async def close(self) -> None:
        await asyncio.gather(*self.starting, return_exceptions=True)
        await self.stack.aclose()


async def result_of(handle: WorkflowHandle[Any, RunResult], within_s: float) -> RunResult | str:
    """The run's result, riding out the server's restart; a failure's reason as a string."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await asyncio.wait_for(
                handle.result(), timeout=max(1.0, deadline - time.monotonic())
            )
        except WorkflowFailureError as exc:
            return f"{exc.cause}"
        except (RPCError, RuntimeError):  # the server is restarting
            if time.monotonic() > deadline:
                return "no result: the server did not answer"
            await asyncio.sleep(1)
        except TimeoutError:
            return f"not finished within {within_s:g}s"


async def check_history(client: Client, run_id: str, report: ChaosReport) -> None:
    converter = client.data_converter.payload_converter
    stage_of: dict[int, str] = {}
    completed: Counter[int] = Counter()
    scheduled_stages: Counter[str] = Counter()
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = converter.from_payload(event.user_metadata.summary, str)
            stage_of[event.event_id] = summary.split(":")[0]
            scheduled_stages[stage_of[event.event_id]] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            retries = attrs.attempt - 1
            report.activity_retries += retries
            report.max_activity_attempt = max(report.max_activity_attempt, attrs.attempt)
            if stage_of[attrs.scheduled_event_id] == TOOL_STAGE:
                report.tool_retries += retries
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed[event.activity_task_completed_event_attributes.scheduled_event_id] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            report.failed_activities += 1
    for event_id in stage_of:
        if completed[event_id] > 1:
            report.duplicate_completions += completed[event_id] - 1
        elif completed[event_id] == 0:
            report.missing_completions += 1
    report.rescheduled_stages += sum(1 for n in scheduled_stages.values() if n > 1)


def check_records(store: TraceStore, run_id: str, report: ChaosReport) -> None:
    records = store.records(run_id)
    keys = Counter(
        (r.kind, r.stage_id, r.attempt) for r in records if r.kind in ("stage", "attempt", "tool")
    )
    report.duplicate_records += sum(n - 1 for n in keys.values() if n > 1)
    report.duplicate_records += max(0, sum(1 for r in records if r.kind == "run_end") - 1)
    report.stages_past_first_attempt += sum(
        1 for r in records if r.kind == "attempt" and (r.attempt or 1) > 1
    )


def check_ledger(ledger: Path, run_ids: list[str], report: ChaosReport) -> None:
    lines = Counter(
        json.loads(line)["run_id"]
        for line in (ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else [])
    )
    for run_id in run_ids:
        if lines[run_id] == 0:
            report.missing_side_effects += 1
        report.reexecuted_side_effects += max(0, lines[run_id] - 1)


async def chaos(workdir: Path, config: ChaosConfig, log: Any = None) -> ChaosReport:
    """Run the chaos shape under ``workdir`` (server state, worker logs, trace store, ledger)."""
    say = log or (lambda _msg: None)
    rng = random.Random(config.seed)
    report = ChaosReport(runs=config.runs)
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = workdir / "ledger.jsonl"
    store_url = f"sqlite:///{workdir / 'traces.db'}"
    env = {
        "ARMATURE_HOME": str(workdir / "home"),
        "ARMATURE_DB_URL": store_url,
        "ARMATURE_CHAOS_LEDGER": str(ledger),
    }
    plan = plan_from(chaos_spec(config.latency_ms))
    queue = f"chaos-{uuid.uuid4().hex[:8]}"
    began = time.monotonic()
    async with dev_server(workdir / "temporal") as server:
        client = await server.client()
        workers = Workers(server, queue, workdir, env)
        try:
            for _ in range(config.workers):
                await workers.add()
            handles: list[WorkflowHandle[Any, RunResult]] = []

            async def starter() -> None:
                gap = config.start_over_s / max(1, config.runs)
                for _ in range(config.runs):
                    while True:
                        try:
                            handles.append(await start(client, plan, queue))
                            break
                        except (RPCError, RuntimeError):  # the server is restarting
                            await asyncio.sleep(0.5)
                    await asyncio.sleep(gap)

            async def killer() -> None:
                t0 = time.monotonic()
                restarted = False
                while (elapsed := time.monotonic() - t0) < config.kill_for_s:
                    if not restarted and elapsed >= config.server_restart_at_s:
                        say(f"{elapsed:5.1f}s  server killed, restarting on its state")
                        await server.restart(down_s=config.server_down_s)
                        report.server_restarts += 1
                        restarted = True
                    await asyncio.sleep(rng.uniform(*config.kill_every_s))
                    await workers.kill_one(rng)
                    report.worker_kills += 1
                    say(f"{time.monotonic() - t0:5.1f}s  worker killed ({report.worker_kills})")

            await asyncio.gather(starter(), killer())
            say(f"kills over; waiting for {len(handles)} runs")
            results = await asyncio.gather(*(result_of(h, config.finish_within_s) for h in handles))
        finally:
            await workers.close()
        for handle, result in zip(handles, results, strict=True):
            if isinstance(result, RunResult) and result.state == "completed":
                report.completed += 1
            else:
                report.failed[handle.id] = result if isinstance(result, str) else str(result.reason)
            await check_history(client, handle.id, report)
        # The workers' key (under their ARMATURE_HOME) checks the MACs they wrote.
        store = TraceStore(store_url, key=workdir / "home" / KEY_FILE)
        try:
            for handle in handles:
                check_records(store, handle.id, report)
            _, breaks = store.verify([h.id for h in handles])
            report.chain_breaks = len(breaks)
            report.chain_findings = [
                f"{b.run_id} {b.check} {b.problem}: {b.detail}" for b in breaks
            ]
        finally:
            store.close()
        check_ledger(ledger, [h.id for h in handles], report)
    report.wall_s = round(time.monotonic() - began, 1)
    return report
