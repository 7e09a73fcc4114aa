"""Fan-out to child workflows and the four fan-in strategies; continuation across runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from tests.fakes import start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

CHILD = """\
name: voter
inputs:
  type: object
  properties: {index: {type: integer}, answers: {type: string}}
stages:
  - id: vote
    tool: {name: "tests.fakes:fake_vote", args: {index: "{{ inputs.index }}",
                                                 answers: "{{ inputs.answers }}"}}
"""


def parent(tmp: Path, fan_in: str, fan_out: int = 4) -> Any:
    (tmp / "voter.yaml").write_text(CHILD)
    (tmp / "parent.yaml").write_text(f"""\
name: poll
inputs:
  type: object
  properties: {{answers: {{type: string}}}}
model_tiers: {{frontier: {{provider: simulate}}}}
stages:
  - {{id: ask, subagent_spec: voter.yaml, fan_out: {fan_out}, fan_in: {fan_in}}}
""")
    return compile_spec(load_spec(tmp / "parent.yaml"))


async def summaries(handle: WorkflowHandle[Any, Any], client: Client) -> list[str]:
    out = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            out.append(
                client.data_converter.payload_converter.from_payload(
                    event.user_metadata.summary, str
                )
            )
    return out


async def test_consensus_with_three_of_four_agreeing_needs_no_judge(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = parent(tmp_path, "consensus")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"answers": "yes,yes,no,yes"})
        result = await handle.result()
    verdict = result.outputs["ask"]
    assert verdict["value"] == {"answer": "yes"}
    assert verdict["majority"] is True and verdict["agreement"] == 0.75
    assert verdict["reconciled_by"] is None
    assert not any("__consensus" in s for s in await summaries(handle, client))


async def test_consensus_without_majority_asks_a_judge_tier_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = parent(tmp_path, "consensus")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"answers": "yes,no,yes,no"})
        result = await handle.result()
    verdict = result.outputs["ask"]
    assert verdict["majority"] is False
    assert verdict["reconciled_by"] == "frontier"
    assert verdict["value"] in ({"answer": "yes"}, {"answer": "no"})
    assert 0 <= verdict["agreement"] <= 1
    assert any(s.startswith("ask__consensus") for s in await summaries(handle, client))


async def test_list_keeps_child_order_and_merge_records_conflicts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with build_worker(client, task_queue):
        listed = await (
            await start(client, parent(tmp_path, "list", 3), task_queue, {"answers": "a,b,c"})
        ).result()
        merged = await (
            await start(client, parent(tmp_path, "merge", 3), task_queue, {"answers": "a,b,a"})
        ).result()
    assert listed.outputs["ask"] == [{"answer": "a"}, {"answer": "b"}, {"answer": "c"}]
    out = merged.outputs["ask"]
    assert out["answer"] == "a"  # the lowest child index wins a conflicting key
    assert out["_conflicts"] == [
        {"key": "answer", "kept_from": 0, "kept": "a", "dropped_from": 1, "dropped": "b"}
    ]


async def test_first_takes_the_fastest_child_and_cancels_the_rest(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "racer.yaml").write_text("""\
name: racer
inputs: {type: object, properties: {index: {type: integer}}}
stages:
  - id: run
    tool: {name: "tests.fakes:fake_slow_answer", args: {index: "{{ inputs.index }}"}}
""")
    (tmp_path / "race.yaml").write_text("""\
name: race
stages:
  - {id: go, subagent_spec: racer.yaml, fan_out: 3, fan_in: first}
""")
    plan = compile_spec(load_spec(tmp_path / "race.yaml"))
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, run_id="race-1")
        result = await handle.result()
        assert result.outputs["go"] == {"answer": "child-0"}
        for i in (1, 2):
            loser = client.get_workflow_handle(f"race-1/go/{i}", result_type=RunResult)
            outcome = await run_outcome(loser)
            desc = await loser.describe()
            assert desc.status is not None and desc.status.name == "CANCELED"
            assert outcome is None
            cancelled = [
                e
                async for e in loser.fetch_history_events()
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
            ]
            assert cancelled, f"child {i}'s running tool call was not asked to cancel"


async def test_empty_partition_runs_no_child(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "voter.yaml").write_text(CHILD)
    (tmp_path / "p.yaml").write_text("""\
name: empty
inputs: {type: object, properties: {items: {type: array, default: []}}}
stages:
  - {id: ask, subagent_spec: voter.yaml, fan_out: 4, partition_key: inputs.items}
""")
    plan = compile_spec(load_spec(tmp_path / "p.yaml"))
    async with build_worker(client, task_queue):
        result = await (await start(client, plan, task_queue, run_id="empty-1")).result()
    assert result.outputs["ask"] == []
    assert [w async for w in client.list_workflows("WorkflowId STARTS_WITH 'empty-1/'")] == []


async def test_continuation_carries_full_values_into_the_next_run(
    client: Client, task_queue: str, tmp_path: Path, armature_home: Path
) -> None:
    (tmp_path / "c.yaml").write_text("""\
name: carry
model_tiers: {small: {provider: simulate}}
continuation:
  carry_forward: {last: note.facts}
stages:
  - id: note
    role: {name: N, description: "before: {{ prior_run.last | tojson_compact }}"}
    output_mode: json
    output_schema:
      type: object
      properties: {facts: {type: array, items: {type: string}, minItems: 2, maxItems: 2}}
      required: [facts]
""")
    plan = compile_spec(load_spec(tmp_path / "c.yaml"))
    async with build_worker(client, task_queue):
        first = await (await start(client, plan, task_queue, run_id="carry-1")).result()
        await (await start(client, plan, task_queue, run_id="carry-2")).result()
    store = TraceStore()
    attempts = [r for r in store.records("carry-2") if r.kind == "attempt"]
    prompt = attempts[0].data["messages"][-1]["content"]
    import json

    assert f"before: {json.dumps(first.outputs['note']['facts'], ensure_ascii=False)}" in prompt
    first_prompt = next(r for r in store.records("carry-1") if r.kind == "attempt")
    assert "before: null" in first_prompt.data["messages"][-1]["content"]
    end = next(r for r in store.records("carry-2") if r.kind == "run_end")
    assert end.data["prior_run_id"] == "carry-1"
    assert attempts[0].inputs_provenance["prior_run"] == "prior_run"
