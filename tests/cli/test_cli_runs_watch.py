"""`armature runs watch RUN`: the console script in a subprocess, following a gated run on a
real dev server while it waits, is approved and ends."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.service.client import decide_gate
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, run_armature, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_runs_watch_prints_every_event_until_the_run_ends_and_resumes_after_n(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    addr = str(temporal_env.client.service_client.config.target_host)
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        watching = asyncio.create_task(
            run_armature("runs", "watch", handle.id, "--json", "--address", addr)
        )
        await wait_for_gate(handle, "approve_reply")
        await decide_gate(client, handle.id, "approve_reply", "approve", by="cli-test")
        watched = await asyncio.wait_for(watching, 120)
        resumed = await run_armature("runs", "watch", handle.id, "--after", "3", "--address", addr)
        end = str(len(watched.stdout.splitlines()))
        at_end = await run_armature("runs", "watch", handle.id, "--after", end, "--address", addr)
        past = await run_armature("runs", "watch", handle.id, "--after", "99", "--address", addr)
        missing = await run_armature("runs", "watch", "nope-42", "--address", addr)
    assert watched.returncode == 0, watched.stderr
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "run_complete"
    decided = [e for e in events if e["type"] == "gate_decided"]
    assert decided and decided[0]["data"]["by"] == "cli-test"
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stdout.splitlines()
    assert len(lines) == len(events) - 3
    assert lines[0].split()[0] == "4" and "run_complete" in lines[-1]
    assert missing.returncode == 2 and "no run 'nope-42'" in missing.stderr
    # At or past the end of a completed run: nothing printed, exit 0, where it ended said on
    # stderr (past the end printed an invented run_failed and exited 1).
    for done in (at_end, past):
        assert done.returncode == 0, done.stderr
        assert done.stdout == ""
        assert f"ended at event {len(events)} (run_complete)" in done.stderr
