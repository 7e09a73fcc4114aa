"""What armature-agents 0.7.0 specs mean, run on Temporal: context flow, judges that block,
fail_as_value, skipped outputs, run limits, truncation, gate outputs to branch on, retry
until, per-item fan-out and bare partition keys."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import decide_gate, run_outcome
from armature_temporal.store.engine import database_url
from tests.fakes import plan_from, start, wait_for_gate
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

TIERS = """\
model_tiers:
  small: {provider: simulate, model: qwen2.5:7b, valid_rate: 1.0}
  frontier: {provider: simulate, model: claude-opus-4-7, valid_rate: 1.0}
  poor: {provider: simulate, quality: 0.05, valid_rate: 1.0}
  broken: {provider: simulate, valid_rate: 0.0}
"""


async def run_to_end(client: Client, text: str, task_queue: str, **inputs: Any) -> RunResult:
    plan = plan_from(TIERS + text)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, dict(inputs))
        result = await run_outcome(handle)
    assert result is not None
    return result


def attempt_messages(run_id: str, stage: str) -> list[dict[str, Any]]:
    from activities.traces import store_for

    records = store_for(database_url()).records(run_id=run_id)
    found = [r for r in records if r.stage_id == stage and r.kind == "attempt"]
    assert found, f"no attempt of {stage} traced"
    return list(found[-1].data["messages"])


async def test_a_stage_sees_the_accumulated_context_and_signature_narrows_it(
    client: Client, task_queue: str, armature_home: object
) -> None:
    result = await run_to_end(
        client,
        """\
name: triage
stages:
  - id: analyze
    role: {type: worker, model_tier: small, description: "Parse {{ request }}."}
    output_mode: guided_json
    output_schema:
      type: object
      required: [intent]
      properties: {intent: {type: string}}
  - id: draft
    depends_on: [analyze]
    role: {type: orchestrator, model_tier: frontier, description: Draft a reply using the analysis.}
  - id: narrow
    depends_on: [analyze]
    signature: {input: {request: the request}}
    role: {type: worker, model_tier: small, description: Summarise.}
""",
        task_queue,
        request="refund please",
    )
    assert result.state == "completed"
    intent = result.outputs["analyze"]["intent"]
    user = attempt_messages(result.run_id, "draft")[-1]["content"]
    assert "Context:" in user and "analyze" in user and intent in user
    assert "- request: refund please" in user
    narrow = attempt_messages(result.run_id, "narrow")[-1]["content"]
    assert "- request: refund please" in narrow and "analyze" not in narrow
    # The analyze stage quotes {{ request }}, so the context does not repeat it.
    first = attempt_messages(result.run_id, "analyze")[-1]["content"]
    assert "Context:" not in first


async def test_a_judge_below_block_below_stops_its_dependents(
    client: Client, task_queue: str
) -> None:
    spec = """\
name: judged
stages:
  - {id: work, role: {description: Write a haiku., model_tier: small}}
  - id: judge
    depends_on: [work]
    block_below: {threshold}
    role: {type: judge, model_tier: poor, description: "Judge {{ work.content }}"}
  - {id: publish, depends_on: [judge], role: {description: Publish it., model_tier: small}}
"""
    blocked = await run_to_end(client, spec.replace("{threshold}", "0.9"), task_queue)
    assert blocked.state == "failed"
    assert blocked.stages["judge"].error_type == "judge_blocked"
    assert "below block_below 0.9" in (blocked.reason or "")
    assert blocked.stages["judge"].output is not None  # the score itself is kept
    assert blocked.stages["publish"].status == "skipped"
    passed = await run_to_end(client, spec.replace("{threshold}", "0.0"), task_queue)
    assert passed.state == "completed" and passed.stages["publish"].status == "completed"


async def test_fail_as_value_and_skipped_stages_are_values_dependents_read(
    client: Client, task_queue: str
) -> None:
    result = await run_to_end(
        client,
        """\
name: values
stages:
  - id: flaky
    fail_as_value: true
    role: {description: Give a number., model_tier: broken}
    output_mode: json
    output_schema: {type: object, required: [n], properties: {n: {type: integer}}}
  - id: maybe
    skip_if: "{{ true }}"
    role: {description: Never runs., model_tier: small}
  - id: after
    depends_on: [flaky, maybe]
    condition: "{{ flaky._failed and maybe._skipped }}"
    role: {description: "Recover from {{ flaky.error_type }}.", model_tier: small}
""",
        task_queue,
    )
    assert result.state == "completed"
    flaky = result.outputs["flaky"]
    assert flaky["_failed"] is True and flaky["error_type"] == "output_invalid"
    assert result.outputs["maybe"] == {"_skipped": True}
    assert result.stages["after"].status == "completed"


async def test_max_llm_calls_aborts_the_run_with_a_clear_error(
    client: Client, task_queue: str
) -> None:
    result = await run_to_end(
        client,
        """\
name: limited
contracts: {max_llm_calls: 2}
stages:
  - {id: a, role: {description: one, model_tier: small}}
  - {id: b, depends_on: [a], role: {description: two, model_tier: small}}
  - {id: c, depends_on: [b], fail_as_value: true, role: {description: three, model_tier: small}}
""",
        task_queue,
    )
    assert result.state == "failed"
    assert result.stages["c"].error_type == "limit_exceeded"  # fail_as_value does not hide it
    assert "contracts.max_llm_calls (2)" in (result.reason or "")


async def test_output_max_chars_truncates_with_a_marker(client: Client, task_queue: str) -> None:
    result = await run_to_end(
        client,
        """\
name: short
contracts: {output_max_chars: 12}
stages:
  - {id: a, role: {description: Write at length., model_tier: small}}
  - {id: b, output_max_chars: 500, role: {description: Write at length., model_tier: small}}
""",
        task_queue,
    )
    a = result.outputs["a"]
    assert a["content"].endswith("...[truncated]") and len(a["content"]) == 12 + 14
    assert a["_truncated"] is True
    assert "_truncated" not in result.outputs["b"]


async def test_a_gate_others_branch_on_continues_after_rejection_with_its_feedback(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(
        TIERS
        + """\
name: branch
stages:
  - {id: draft, role: {description: Draft., model_tier: small}}
  - id: review
    depends_on: [draft]
    gate: human
    present: "Publish {{ draft.content }}?"
  - id: publish
    depends_on: [review]
    condition: "{{ review.approved }}"
    role: {description: Publish., model_tier: small}
  - id: revise
    depends_on: [review]
    skip_if: "{{ review.approved }}"
    role: {description: "Revise per {{ review.feedback }}", model_tier: small}
"""
    )
    assert plan.stage("review").gate is not None
    assert plan.stage("review").gate.on_reject == "continue"  # type: ignore[union-attr]
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        status = await wait_for_gate(handle, "review")
        assert (status.pending_gates[0].message or "").startswith("Publish ")
        await decide_gate(client, handle.id, "review", "reject", comment="too long")
        result = await handle.result()
    assert result.state == "completed"
    assert result.outputs["review"]["approved"] is False
    assert result.outputs["review"]["feedback"] == "too long"
    assert result.stages["publish"].status == "skipped"
    assert result.stages["revise"].status == "completed"


async def test_retry_until_and_per_item_partition_source(client: Client, task_queue: str) -> None:
    result = await run_to_end(
        client,
        """\
name: items
stages:
  - id: plan
    role: {description: Plan queries., model_tier: small}
    output_mode: json
    output_schema:
      type: object
      required: [queries]
      properties: {queries: {type: array, items: {type: string}, minItems: 2, maxItems: 4}}
  - id: search
    partition_source: "{{ plan.queries }}"
    partition_key: query
    fan_out: 2
    role: {description: "Search for {{ query }}", model_tier: small}
  - id: insist
    on_fail: {loop: {max: 2, until: "{{ content == 'never' }}"}}
    role: {description: Try., model_tier: small}
""",
        task_queue,
    )
    assert result.state == "completed"
    queries = result.outputs["plan"]["queries"]
    assert isinstance(result.outputs["search"], list)
    assert len(result.outputs["search"]) == len(queries)
    assert result.stages["search"].status == "completed"
    # until never holds: 1 + 2 retries, and the last valid output stands
    assert result.stages["insist"].attempts == 3 and "content" in result.outputs["insist"]


async def test_bare_partition_key_gives_each_child_its_share_by_name(
    client: Client, task_queue: str, tmp_path: Any
) -> None:
    child = tmp_path / "researcher.yaml"
    child.write_text(
        "name: researcher\nmodel_tiers: {large: {provider: simulate}}\nstages:\n"
        "  - id: look\n    role: {type: researcher, description: 'Look into {{ queries }}'}\n"
    )
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text

    loaded = load_spec_text(
        TIERS
        + """\
name: parent
stages:
  - id: research
    subagent_spec: researcher.yaml
    fan_out: 2
    partition_key: queries
  - {id: synthesize, depends_on: [research], role: {description: Synthesize., model_tier: small}}
""",
        base_dir=tmp_path,
    )
    # The child, validated on its own, reads {{ queries }} as a run input: a warning, not an error.
    assert any("'queries' is read as a run input" in str(w) for w in loaded.warnings)
    plan = compile_spec(loaded)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"queries": ["a", "b", "c"]})
        result = await run_outcome(handle)
    assert result is not None and result.state == "completed"
    kids = result.stages["research"].children
    assert len(kids) == 2
    first = attempt_messages(kids[0]["id"], "look")[-1]["content"]
    # Values print as JSON (0.7.0 printed Python's repr, ['a', 'b']): the same list to a model,
    # and the same form as the Context block beside it.
    assert 'Look into ["a", "b"]' in first


async def test_a_0_7_0_tools_module_serves_tool_stages_and_hqs_weights_are_recorded(
    client: Client, task_queue: str, armature_home: object
) -> None:
    result = await run_to_end(
        client,
        """\
name: moduled
tools:
  - module: tests.tool_modules.old_imports
hqs:
  weights: {judge: 0.5}
stages:
  - id: echo
    tool_call: {name: old_echo, args: {text: "{{ word }}"}}
  - {id: use, role: {description: "Use {{ echo.echo }}", model_tier: small}}
""",
        task_queue,
        word="hello",
    )
    assert result.state == "completed", result.reason
    assert result.outputs["echo"] == {"echo": "hello"}
    from activities.traces import store_for

    records = store_for(database_url()).records(run_id=result.run_id)
    start_record = next(r for r in records if r.kind == "run_start")
    assert start_record.data["hqs_weights"] == {"judge": 0.5}


async def test_inject_file_as_reads_each_item_in_the_workspace_and_text_conditions_read_as_0_7_0(
    client: Client, task_queue: str, armature_home: object
) -> None:
    from armature_temporal.settings import workspace_root

    workspace = workspace_root("files")
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "a.txt").write_text("alpha text")
    result = await run_to_end(
        client,
        """\
name: files
stages:
  - id: read_each
    partition_source: "{{ paths }}"
    partition_key: doc_path
    inject_file_as: doc_text
    fan_out: 2
    role: {description: "Summarise {{ doc_path }}: {{ doc_text }}", model_tier: small}
  - id: never
    condition: "{{ verdict }}"
    role: {description: Runs only on a yes., model_tier: small}
""",
        task_queue,
        paths=["a.txt", "../outside.txt"],
        verdict="false",
    )
    assert result.state == "completed", result.reason
    assert len(result.outputs["read_each"]) == 2
    prompts = [m[-1]["content"] for m in all_attempt_messages(result.run_id, "read_each")]
    assert any("Summarise a.txt: alpha text" in p for p in prompts)
    # Outside the workspace the file_read tool refuses: the text is "", as 0.7.0 gave.
    assert any(p.startswith("Summarise ../outside.txt:\n") for p in prompts)
    assert result.stages["never"].status == "skipped"  # the text "false" is false


def all_attempt_messages(run_id: str, stage: str) -> list[list[dict[str, Any]]]:
    from activities.traces import store_for

    records = store_for(database_url()).records(run_id=run_id)
    return [
        list(r.data["messages"]) for r in records if r.stage_id == stage and r.kind == "attempt"
    ]


async def test_the_design_documents_shell_rule_on_cmd_blocks_rm_rf_in_a_run(
    client: Client, task_queue: str, tmp_path: Any
) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("still here")
    result = await run_to_end(
        client,
        f"""\
name: guarded
safety_mode: strict
safety_rules:
  - tool: file_read
    condition: {{ field: path, op: truthy, value: "" }}
    action: allow
  - tool: shell
    condition: {{ field: cmd, op: matches_regex, value: "rm\\\\s+-rf" }}
    action: block
    message: "Destructive rm -rf is not permitted"
  - tool: "*"
    condition: {{ field: _tool_reversibility, op: equals, value: "none" }}
    action: require_approval
stages:
  - id: wipe
    tool_call: {{name: shell, args: {{cmd: "rm -rf {canary}"}}}}
""",
        task_queue,
    )
    assert result.state == "failed"
    assert result.stages["wipe"].error_type == "policy_blocked"
    assert "Destructive rm -rf is not permitted" in (result.stages["wipe"].error or "")
    assert (canary / "keep.txt").read_text() == "still here"
