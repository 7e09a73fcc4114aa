"""Lifecycle hooks run in the engine for every stage and tool call, whatever the safety mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.hooks import HookContext, HookRegistry, HookResult, register_hook
from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import decide_gate, run_outcome
from armature_temporal.store import TraceStore
from tests.fakes import plan_from, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

WRITE = """\
name: hooked
model_tiers: {small: {provider: simulate}}
stages:
  - id: write
    tool: {name: file_write, args: {path: notes/a.txt, content: hello}}
  - id: talk
    depends_on: [write]
    role: {name: T, description: "say hi"}
"""


@pytest.fixture
def hooks() -> Iterator[HookRegistry]:
    registry = HookRegistry.default()
    registry.clear()
    yield registry
    registry.clear()


async def run(client: Client, task_queue: str, text: str = WRITE) -> RunResult:
    async with build_worker(client, task_queue):
        result = await run_outcome(await start(client, plan_from(text), task_queue))
    assert result is not None
    return result


async def test_pre_tool_hook_blocks_and_the_trace_names_it(
    client: Client, task_queue: str, hooks: HookRegistry
) -> None:
    @register_hook("pre_tool", name="no-writes")
    def no_writes(ctx: HookContext) -> HookResult | None:
        if ctx.tool == "file_write":
            return HookResult(action="block", reason="read-only day")
        return None

    result = await run(client, task_queue)
    stage = result.stages["write"]
    assert stage.status == "failed" and stage.error_type == "policy_blocked"
    assert "blocked by hook no-writes: read-only day" in (stage.error or "")
    tool = next(r for r in TraceStore().records(result.run_id) if r.kind == "tool")
    assert tool.data["hooks"]["pre_tool"]["hook"] == "no-writes"


async def test_pre_tool_modify_and_post_tool_modify(
    client: Client, task_queue: str, hooks: HookRegistry, armature_home: Path
) -> None:
    register_hook(
        "pre_tool",
        lambda ctx: HookResult(action="modify", args={**ctx.args, "path": "notes/redirected.txt"}),
    )
    register_hook(
        "post_tool", lambda ctx: HookResult(action="modify", output={**ctx.output, "checked": True})
    )
    result = await run(client, task_queue)
    assert result.state == "completed"
    assert result.outputs["write"]["checked"] is True
    assert (armature_home / "workspace" / "hooked" / "notes" / "redirected.txt").exists()
    assert not (armature_home / "workspace" / "hooked" / "notes" / "a.txt").exists()


async def test_pre_tool_require_approval_waits_for_a_person(
    client: Client, task_queue: str, hooks: HookRegistry
) -> None:
    register_hook(
        "pre_tool", lambda ctx: HookResult(action="require_approval", reason="writes need a look")
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(WRITE), task_queue)
        status = await wait_for_gate(handle, "write")
        assert "writes need a look" in (status.pending_gates[0].message or "")
        await decide_gate(client, handle.id, "write", "approve")
        result = await handle.result()
    assert result.state == "completed"


async def test_stage_hooks_modify_messages_and_output_and_can_block(
    client: Client, task_queue: str, hooks: HookRegistry
) -> None:
    seen: list[str] = []

    def pre(ctx: HookContext) -> HookResult:
        seen.append(ctx.stage_id)
        extra = {"role": "user", "content": "Be brief."}
        return HookResult(action="modify", messages=[*ctx.messages, extra])

    def post(ctx: HookContext) -> HookResult | None:
        return HookResult(action="modify", output={"content": "[checked] " + ctx.output["content"]})

    register_hook("pre_stage", pre)
    register_hook("post_stage", post)
    result = await run(client, task_queue)
    assert seen == ["talk"]
    assert result.outputs["talk"]["content"].startswith("[checked] ")
    attempt = next(r for r in TraceStore().records(result.run_id) if r.kind == "attempt")
    assert attempt.data["messages"][-1] == {"role": "user", "content": "Be brief."}

    hooks.clear()

    def boom(ctx: HookContext) -> Any:
        raise RuntimeError("hook crashed")

    register_hook("pre_stage", boom)
    failed = await run(client, task_queue)
    stage = failed.stages["talk"]
    assert stage.status == "failed" and stage.error_type == "policy_blocked"
    assert "raised RuntimeError: hook crashed" in (stage.error or "")


async def test_pre_stage_require_approval_opens_a_gate(
    client: Client, task_queue: str, hooks: HookRegistry
) -> None:
    register_hook(
        "pre_stage", lambda ctx: HookResult(action="require_approval", reason="costly model")
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(WRITE), task_queue)
        await wait_for_gate(handle, "talk#1")
        await decide_gate(client, handle.id, "talk#1", "reject", comment="too costly")
        result = await run_outcome(handle)
    assert result is not None and result.state == "failed"
    assert result.stages["talk"].error_type == "policy_blocked"


async def test_a_subagent_policy_can_only_tighten_its_parents(
    client: Client, task_queue: str, tmp_path: Path, hooks: HookRegistry
) -> None:
    (tmp_path / "child.yaml").write_text("""\
name: loose-child
safety_mode: permissive
safety_rules:
  - {tool: "*", action: allow, message: the child tries to allow everything}
stages:
  - id: wipe
    tool: {name: shell, args: {argv: [rm, -rf, scratch]}}
""")
    (tmp_path / "parent.yaml").write_text("""\
name: careful-parent
safety_rules:
  - tool: shell
    condition: {field: argv, op: matches_regex, value: "\\\\brm\\\\b"}
    action: block
    message: no rm anywhere below this run
stages:
  - {id: delegate, subagent_spec: child.yaml}
""")
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec

    plan = compile_spec(load_spec(tmp_path / "parent.yaml"))
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, run_id="tighten-1")
        result = await run_outcome(handle)
        child = await run_outcome(
            client.get_workflow_handle("tighten-1/delegate/0", result_type=RunResult)
        )
    assert result is not None and result.state == "failed"
    assert child is not None
    assert child.stages["wipe"].error_type == "policy_blocked"
    assert "no rm anywhere below this run" in (child.stages["wipe"].error or "")
