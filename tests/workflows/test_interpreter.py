"""The interpreter on a real Temporal dev server: every stage kind, failures, loops, fan-out."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

TIERS = """\
model_tiers:
  bad: {provider: simulate, valid_rate: 0.0}
  good: {provider: simulate, valid_rate: 1.0}
  slow: {provider: simulate, latency_ms: 400}
"""


async def run_to_end(
    client: Client, plan_text: str, task_queue: str, **inputs: object
) -> RunResult:
    plan = plan_from(plan_text)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, dict(inputs))
        result = await run_outcome(handle)
    assert result is not None
    return result


async def test_quickstart_completes_and_each_activity_is_named_after_its_stage(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "quickstart.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"topic": "tides"})
        result = await handle.result()
    assert result.state == "completed"
    assert set(result.outputs) == {"outline", "draft", "review"}
    assert len(result.outputs["outline"]["points"]) == 3
    assert 0 <= result.outputs["review"]["score"] <= 1
    summaries = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            payload = event.user_metadata.summary
            summaries.append(client.data_converter.payload_converter.from_payload(payload, str))
    # A stage may take more than one attempt (the simulator is sometimes invalid on purpose).
    assert list(dict.fromkeys(s.split(":")[0] for s in summaries)) == ["outline", "draft", "review"]
    assert "Outliner (worker, tier small" in summaries[0]
    desc = await handle.describe()
    assert await desc.memo_value("spec_hash") == plan.spec_hash
    assert (
        desc.typed_search_attributes.get(
            __import__(
                "armature_temporal.runtime.search_attributes"
            ).runtime.search_attributes.SPEC_NAME
        )
        == "quickstart"
    )


async def test_independent_stages_start_together_and_join_waits_for_both(
    client: Client, task_queue: str
) -> None:
    result = await run_to_end(
        client,
        TIERS
        + """\
name: diamond
stages:
  - {id: a, role: {name: A, description: x, model_tier: slow}}
  - {id: b, role: {name: B, description: x, model_tier: slow}}
  - {id: c, depends_on: [a, b], role: {name: C, description: "{{ a.content }} {{ b.content }}",
     model_tier: good}}
""",
        task_queue,
    )
    st = result.stages
    assert st["a"].started_at == st["b"].started_at
    assert st["c"].started_at is not None
    assert st["c"].started_at >= max(st["a"].finished_at or "", st["b"].finished_at or "")
    assert result.state == "completed"


async def test_condition_and_skip_if_skip_stages_and_dependents_still_run(
    client: Client, task_queue: str
) -> None:
    result = await run_to_end(
        client,
        TIERS
        + """\
name: cond
inputs:
  type: object
  properties: {mode: {type: string, default: fast}}
stages:
  - {id: deep, condition: "mode == 'deep'", role: {name: D, description: x, model_tier: good}}
  - {id: quick, skip_if: "mode == 'deep'", role: {name: Q, description: x, model_tier: good}}
  - {id: after, depends_on: [deep, quick], role: {name: F, description: x, model_tier: good}}
""",
        task_queue,
    )
    assert result.stages["deep"].status == "skipped"
    assert result.stages["quick"].status == "completed"
    assert result.stages["after"].status == "completed"


async def test_failed_stage_skips_dependents_cancels_siblings_and_fails_the_run(
    client: Client, task_queue: str
) -> None:
    plan = plan_from("""\
name: failfast
model_tiers:
  bad: {provider: simulate, valid_rate: 0.0}
  slow: {provider: simulate, latency_ms: 5000}
stages:
  - id: broken
    role: {name: B, description: x, model_tier: bad}
    output_mode: json
    output_schema: {type: object, properties: {a: {type: integer}}, required: [a]}
  - {id: sibling, role: {name: S, description: x, model_tier: slow}}
  - {id: dependent, depends_on: [broken], role: {name: D, description: x, model_tier: bad}}
""")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RunFailed"
    assert "stage 'broken' failed" in cause.message
    result = RunResult.model_validate(cause.details[0])
    assert result.stages["broken"].error_type == "output_invalid"
    assert result.stages["sibling"].status == "cancelled"
    assert result.stages["dependent"].status == "skipped"
    assert result.stages["dependent"].error_type == "dependency_failed"


async def test_invalid_output_is_retried_with_the_error_then_escalated(
    client: Client, task_queue: str
) -> None:
    result = await run_to_end(
        client,
        TIERS
        + """\
name: escalate
stages:
  - id: s
    role: {name: S, description: "attempt {{ _retry_attempt }} {{ _last_error }}",
           model_tier: bad}
    output_mode: json
    output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    on_fail: {loop: {max: 1}, escalate: true}
""",
        task_queue,
    )
    stage = result.stages["s"]
    assert result.state == "completed"
    assert stage.attempts == 3 and stage.escalated and stage.tier == "good"
    assert isinstance(result.outputs["s"]["n"], int)


async def test_always_invalid_output_fails_after_the_loop_with_output_invalid(
    client: Client, task_queue: str
) -> None:
    result = await run_to_end(
        client,
        """\
name: hopeless
stages:
  - id: s
    role: {name: S, description: x, model_tier: good}
    output_mode: json
    output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    on_fail: {loop: {max: 2}, escalate: true}
model_tiers:
  good: {provider: simulate, valid_rate: 0.0}
  better: {provider: simulate, valid_rate: 0.0}
""",
        task_queue,
    )
    stage = result.stages["s"]
    assert result.state == "failed"
    assert stage.error_type == "output_invalid"
    assert stage.attempts == 6 and stage.tier == "better" and stage.escalated
    assert "output invalid after 6 attempt(s) on tier(s) ['good', 'better']" in (stage.error or "")


async def test_loop_until_stops_at_the_third_iteration(client: Client, task_queue: str) -> None:
    result = await run_to_end(
        client,
        TIERS
        + """\
name: loop
stages:
  - id: s
    role: {name: S, description: "iteration {{ _iteration.num }}", model_tier: good}
    loop: {max_iterations: 5, until: "_iteration.num >= 3"}
""",
        task_queue,
    )
    assert result.stages["s"].iterations == 3
    assert result.stages["s"].attempts == 3


async def test_tool_stages_write_then_read_in_the_workspace(
    client: Client, task_queue: str
) -> None:
    result = await run_to_end(
        client,
        """\
name: files
inputs: [text]
stages:
  - id: write
    tool: {name: file_write, args: {path: out/note.txt, content: "hello {{ inputs.text }}"}}
  - id: read
    depends_on: [write]
    tool: {name: file_read, args: {path: out/note.txt}}
""",
        task_queue,
        text="world",
    )
    assert result.state == "completed"
    assert "hello world" in str(result.outputs["read"])


async def test_fan_out_runs_children_with_stable_ids_over_a_fair_partition(
    client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "research-fanout.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, run_id="fanout-test-1")
        result = await handle.result()
    assert result.state == "completed"
    research = result.outputs["research"]
    assert research["children"] == 4 and 0 < research["agreement"] <= 1
    children = [
        wf async for wf in client.list_workflows("WorkflowId STARTS_WITH 'fanout-test-1/research/'")
    ]
    assert sorted(w.id for w in children) == [f"fanout-test-1/research/{i}" for i in range(4)]
    sizes = []
    for i in range(4):
        child = await client.get_workflow_handle(
            f"fanout-test-1/research/{i}", result_type=RunResult
        ).result()
        assert child.spec_name == "researcher"
        desc = await client.get_workflow_handle(f"fanout-test-1/research/{i}").describe()
        assert desc.parent_id == "fanout-test-1"
        history = await client.get_workflow_handle(f"fanout-test-1/research/{i}").fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        payload = client.data_converter.payload_converter.from_payload(
            started.input.payloads[0], dict
        )
        sizes.append(len(payload["inputs"]["partition"]))
    assert sizes == [2, 2, 1, 1]


async def test_a_template_that_raises_fails_its_stage_at_once_as_a_template_error(
    client: Client, task_queue: str
) -> None:
    """``{{ inputs.topic / 0 }}`` is the spec's mistake, not the provider's: one attempt, no
    retries, ``template_error`` in the taxonomy (it was retried 5 times as provider_error)."""
    plan = plan_from(
        TIERS
        + """\
name: divides-by-zero
inputs: {type: object, properties: {topic: {type: number}}, required: [topic]}
stages:
  - {id: broken, role: {name: B, description: "{{ inputs.topic / 0 }}", model_tier: good}}
"""
    )
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"topic": 3})
        result = await run_outcome(handle)
        attempts = [
            event.activity_task_started_event_attributes.attempt
            async for event in handle.fetch_history_events()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
    assert result is not None
    assert result.state == "failed"
    broken = result.stages["broken"]
    assert broken.error_type == "template_error"
    assert "ZeroDivisionError: division by zero" in (broken.error or "")
    assert attempts == [1]
