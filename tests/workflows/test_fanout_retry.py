"""A failed child follows the fan-out stage's on_fail policy and shows in the parent's status."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from tests.fakes import start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

CHILD = """\
name: flaky-child
inputs: {type: object, properties: {index: {type: integer}, marks: {type: string}}}
stages:
  - id: work
    tool: {name: "tests.fakes:fake_fail_once", args: {index: "{{ inputs.index }}",
                                                      marks: "{{ inputs.marks }}"}}
"""


def parent(tmp: Path, retries: int | None) -> object:
    (tmp / "child.yaml").write_text(CHILD)
    on_fail = f"    on_fail: {{loop: {{max: {retries}}}}}\n" if retries else ""
    (tmp / "parent.yaml").write_text(f"""\
name: retrying
inputs: {{type: object, properties: {{marks: {{type: string}}}}}}
stages:
  - id: fan
    subagent_spec: child.yaml
    fan_out: 3
{on_fail}""")
    return compile_spec(load_spec(tmp / "parent.yaml"))


async def test_failed_children_are_retried_under_on_fail(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = parent(tmp_path, 2)
    marks = tmp_path / "marks"
    marks.mkdir()
    (marks / "ok-0").touch()  # child 0 succeeds at once; 1 and 2 fail once
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"marks": str(marks)}, run_id="retry-1")
        result = await run_outcome(handle)
    assert result is not None and result.state == "completed", result and result.reason
    children = result.stages["fan"].children
    assert [c["id"] for c in children] == ["retry-1/fan/0", "retry-1/fan/1~2", "retry-1/fan/2~2"]
    assert all(c["status"] == "completed" for c in children)
    assert len(result.outputs["fan"]) == 3


async def test_without_retries_a_failed_child_fails_the_stage_and_is_named(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = parent(tmp_path, None)
    marks = tmp_path / "marks"
    marks.mkdir()
    (marks / "ok-0").touch()
    (marks / "ok-2").touch()
    async with build_worker(client, task_queue):
        result = await run_outcome(
            await start(client, plan, task_queue, {"marks": str(marks)}, run_id="retry-2")
        )
    assert result is not None and result.state == "failed"
    stage = result.stages["fan"]
    assert stage.error_type == "dependency_failed"
    assert "1 of 3 child run(s) failed" in (stage.error or "")
    assert "retry-2/fan/1" in (stage.error or "")
    assert [c["status"] for c in stage.children] == ["completed", "failed", "completed"]
