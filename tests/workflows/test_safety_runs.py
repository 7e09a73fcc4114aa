"""The safety policy in real runs of ``specs/safe-shell.yaml``: a blocked command fails the run
before anything executes and the trace names the rule, and a rejected approval fails the stage.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import decide_gate, run_outcome
from armature_temporal.spec.compiler import load_plan
from armature_temporal.store import TraceStore
from tests.fakes import SPECS, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_destructive_command_is_blocked_by_rule_0_and_the_trace_says_so(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "safe-shell.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"command": "rm -rf /"})
        result = await asyncio.wait_for(run_outcome(handle), timeout=30)
    assert result is not None
    assert result.state == "failed"
    inspect = result.stages["inspect"]
    assert inspect.status == "failed" and inspect.error_type == "policy_blocked", inspect
    assert "destructive rm is never allowed" in (inspect.error or "")
    assert "inspect" in (result.reason or "")
    for later in ("record", "archive", "summarize"):
        assert result.stages[later].status == "skipped", result.stages[later]

    records = TraceStore().records(handle.id)
    tools = [r for r in records if r.kind == "tool" and r.stage_id == "inspect"]
    assert len(tools) == 1, tools
    tool = tools[0]
    assert tool.data["policy_action"] == "block"
    assert tool.data["policy_rule"] == 0
    assert tool.data["tool"] == "shell"
    assert tool.status == "failed" and tool.error_type == "policy_blocked"
    assert len(plan.policy_version) == 64
    assert tool.policy_version == plan.policy_version
    # The blocked call never ran: the trace has no tool call past the block.
    assert [r.stage_id for r in records if r.kind == "tool"] == ["inspect"]


async def test_rejecting_the_archive_approval_fails_the_stage_as_policy_blocked(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "safe-shell.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        status = await wait_for_gate(handle, "archive")
        assert status.stages["record"].status == "completed"
        assert status.stages["archive"].status == "waiting_gate"
        answer = await decide_gate(
            client, handle.id, "archive", "reject", comment="keep the notes", by="tester"
        )
        assert answer == "archive: rejected"
        result = await asyncio.wait_for(run_outcome(handle), timeout=30)
    assert isinstance(result, RunResult)
    assert result.state == "failed"
    archive = result.stages["archive"]
    assert archive.status == "failed" and archive.error_type == "policy_blocked", archive
    assert "rejected by tester: keep the notes" in (archive.error or "")
    assert result.stages["summarize"].status == "skipped"
    assert "archive" not in result.outputs


async def test_a_rejected_tool_approval_is_kept_as_a_gate_decision_with_who_and_why(
    client: Client, task_queue: str
) -> None:
    """``armature report`` shows gate decisions (who, when, why) from the store's
    gate_decisions; a tool call's approval gate is a gate like any other."""
    plan = load_plan(SPECS / "safe-shell.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "archive")
        await decide_gate(
            client, handle.id, "archive", "reject", comment="keep the notes", by="tester"
        )
        result = await asyncio.wait_for(run_outcome(handle), timeout=30)
    assert result is not None and result.state == "failed"
    decisions = [
        (g.stage_id, g.decision, g.decided_by, g.comment)
        for g in TraceStore().gate_decisions(handle.id)
    ]
    assert decisions == [("archive", "reject", "tester", "keep the notes")]
