"""The armature-agents 0.7.0 spec corpus (tests/fixtures/legacy, issue 12) runs to its end on a
real Temporal dev server with every tier on the simulate provider, as ``armature submit
--simulate`` runs it (failure injection off, see simulated_plan): each spec with the inputs its
documentation runs it with, every human gate and tool approval approved as it comes up.

Specs that need something outside the corpus, or that 0.7.0 itself cannot finish as they are
written, are listed in NOT_RUN with the reason. The design documents' two acceptance specs also
get their issue's checks: draft_response's rendered prompt holds the analysis, and each research
child gets its own share of ``queries``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from armature_temporal.runtime.models import RunResult, RunStatus
from armature_temporal.service.client import GateError, decide_gate, run_outcome
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.spec.offline import simulated
from armature_temporal.store import TraceStore
from tests.fakes import start
from tests.unit.test_legacy_corpus import LEGACY, corpus_id, corpus_specs
from worker import build_worker

#: The async tests share the session loop of the Temporal dev server fixture.
on_session_loop = pytest.mark.asyncio(loop_scope="session")

#: Corpus specs not run here, and why. Everything else must run to completion.
NOT_RUN = {
    "guide/declarative_control_flow__complete_example_all_four_mechanisms_together.yaml": (
        "external tools: tool_call stages fetch https://queue.example.com/pending (http_get) "
        "and read /policies/content_policy_v3.md (read_file), outside the corpus"
    ),
    "guide/fan_in_fan_out__a_complete_example_document_compliance_pipeline.yaml": (
        "0.7.0 cannot finish it as written: list_documents is a text stage (its output is "
        "{content}), so partition_source '{{ list_documents.documents }}' is undefined and "
        "0.7.0 fails review_each ('partition_source resolved to ChainableUndefined, expected "
        "list')"
    ),
    "guide/memory_and_context__a_complete_memory_enabled_workflow.yaml": (
        "0.7.0 cannot finish it as written: fetch_filings is a text stage, so partition_source "
        "'{{ fetch_filings.filings }}' is undefined and 0.7.0 fails analyse_each"
    ),
    "guide/judge_pattern__escalation_gate_retry_until_a_judge_defined_condition_is_satisfied"
    ".yaml": (
        "0.7.0 cannot finish it as written: summarize's on_fail.loop.until '{{ score >= 0.85 }}' "
        "reads score, which only the judge's output has (on_fail.loop.stage: judge_summary, "
        "which 0.7.0 ignores: it retries the failing stage), and 0.7.0 raises UndefinedError"
    ),
    "guide/role_taxonomy__a_complete_example.yaml": (
        "0.7.0 cannot finish it as written: gather_competitors is a text stage, so "
        "partition_source '{{ gather_competitors.competitors }}' is undefined and 0.7.0 fails "
        "profile_each"
    ),
}

QUERIES = [f"query {i}: why do tides happen on day {i}?" for i in range(8)]

#: Run inputs, as each spec's documentation runs it (its usage comment or the 0.7.0 guide).
#: A required input not given here gets a value from its declared type (see run_inputs).
INPUTS: dict[str, dict[str, Any]] = {
    "shipped/00_hello_ollama.yml": {"topic": "what a DAG is"},
    "shipped/01_hello_world.yml": {"topic": "quantum computing"},
    "shipped/02_research_pipeline.yml": {
        "topic": "Impact of remote work on urban real estate",
        "audience": "executive leadership",
    },
    "shipped/03_deliberation_standard.yml": {
        "objective": "Should we migrate our auth system to OAuth 2.0?",
        "documents": "Current auth system uses session cookies stored server-side.",
    },
    "shipped/04_fan_out.yml": {"company": "Acme Corp", "industry": "developer tooling"},
    "shipped/05_enterprise_slm_tiers.yml": {
        "contract_text": "This Agreement between Acme (Provider) and Beta (Client) starts on "
        "2026-01-01 for 12 months. Liability is unlimited. It renews automatically."
    },
    "shipped/06_human_in_the_loop.yml": {"ticket": "I was charged twice for March. Fix it."},
    "shipped/07_lora_adapter.yml": {"feature": "password reset"},
    "shipped/11_iterative_refinement.yml": {"topic": "tide pools"},
    "shipped/12_agent_reference.yml": {"topic": "durable workflows"},
    "shipped/optimizer_workflow.yaml": {"traces_json": "[]"},
    "shipped/starter_template.yml": {"topic": "impact of remote work on urban planning"},
    "guide/architecture__customer_triage.yaml": {
        "request": "My invoice for March shows two charges for the same seat."
    },
    "guide/architecture__customer_triage_simulate.yaml": {
        "request": "My invoice for March shows two charges for the same seat."
    },
    "guide/architecture__research_fanout.yaml": {"queries": QUERIES},
    "guide/architecture__research_fanout_simulate.yaml": {"queries": QUERIES},
    "guide/build_first_workflow__the_workflow_spec.yaml": {
        "topic": "impact of remote work on urban density",
        "audience": "general reader",
    },
    "guide/chatbot_and_streaming__a_complete_example_customer_support_assistant.yaml": {
        "user_query": "How do I change the card I pay with?"
    },
    "guide/chatbot_and_streaming__enabling_token_streaming.yaml": {
        "user_query": "Why was I billed twice?"
    },
    "guide/checkpoint_and_resume__a_complete_example_checkpointed_compliance_pipeline.yaml": {},
    "guide/judge_pattern__consensus_judge_running_the_same_prompt_n_times.yaml": {
        "customer_message": "The new release broke my exports and nobody answers my emails."
    },
    "guide/judge_pattern__escalation_gate_retry_until_a_judge_defined_condition_is_satisfied"
    ".yaml": {"document": "Tides are caused by the Moon's gravity pulling on the oceans."},
    "guide/judge_pattern__gated_pipeline.yaml": {
        "product_name": "Trailblazer 40L backpack",
        "requirements": "Mention the waterproof zips; under 500 words; friendly tone.",
    },
    "guide/model_tiers__full_example.yaml": {"title": "Competitor launches API", "url": "x.io"},
    "guide/user_guide__deliberative_teams_minimal_working_example.yaml": {
        "objective": "Should we open-source our SDK?"
    },
    "guide/user_guide__jinja2_variables_in_specs.yaml": {
        "objective": "Evaluate the vendor contract"
    },
    "guide/role_taxonomy__a_complete_example.yaml": {
        "company_name": "Acme Corp",
        "market_segment": "developer tooling",
    },
    "guide/user_guide__quickstart_your_first_workflow.yaml": {"topic": "renewable energy"},
    "guide/user_guide__spec_structure.yaml": {"topic": "renewable energy"},
    "guide/workflow_packages__a_worked_example.yaml": {"topic": "heat pumps"},
    "own/support_desk.yaml": {
        "ticket": "I was charged twice for March and I want my money back.",
        "customer_tier": "pro",
    },
    "own/research_loop.yaml": {"topic": "how tides work"},
    "own/tools_and_adapters.yaml": {
        "subject": "invoices",
        "text": "Invoices are kept for seven years and then deleted.",
        "label": "retention",
    },
    "own/memory_digest.yaml": {"feed": "Rates held steady; a storm is due on Friday."},
    "own/platform_fields.yaml": {
        "topic": "heat pumps",
        "angle": "running costs",
        "internal_notes": "do not show",
    },
}

#: A value for a required input the table does not give, by its JSON Schema type.
BY_TYPE: dict[str, Any] = {
    "string": "a sample value",
    "integer": 3,
    "number": 0.5,
    "boolean": True,
    "array": ["first", "second", "third", "fourth"],
    "object": {},
}

RUN = [p for p in corpus_specs() if corpus_id(p) not in NOT_RUN]


def test_not_run_names_corpus_specs() -> None:
    """NOT_RUN and INPUTS cannot go stale: every name is a spec of the corpus."""
    every = {corpus_id(p) for p in corpus_specs()}
    assert set(NOT_RUN) <= every
    assert set(INPUTS) <= every


def simulated_plan(path: Path) -> Plan:
    """The spec as ``armature submit --simulate`` runs it (every tier on simulate), with the
    simulator's failure injection off (``valid_rate`` 1.0): these runs check that the 0.7.0
    format runs here, not how a spec copes with a simulated invalid reply."""
    loaded = load_spec(path)
    if loaded.spec.mcp_servers and not any(
        s.role is not None and s.role.tools for s in loaded.spec.stages
    ):
        # own/platform_fields.yaml names MCP servers that do not exist here and no stage calls
        # them: run the rest (planning them is checked in tests/unit/test_legacy_corpus.py)
        spec = loaded.spec.model_copy(update={"mcp_servers": []})
        loaded = dataclasses.replace(loaded, spec=spec)
    return always_valid(simulated(compile_spec(loaded)))


def always_valid(plan: Plan) -> Plan:
    tiers = {name: t.model_copy(update={"valid_rate": 1.0}) for name, t in plan.tiers.items()}
    children = {sid: always_valid(child) for sid, child in plan.children.items()}
    return plan.model_copy(update={"tiers": tiers, "children": children})


def run_id(path: Path) -> str:
    """A fixed id per spec: the simulator is deterministic in it, so each run is repeatable."""
    return "legacy-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", corpus_id(path).rsplit(".", 1)[0])


def run_inputs(path: Path, plan: Plan) -> dict[str, Any]:
    given = dict(INPUTS.get(corpus_id(path), {}))
    schema = plan.inputs_schema if isinstance(plan.inputs_schema, dict) else {}
    props = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in given and "default" not in props.get(name, {}):
            given[name] = BY_TYPE.get(props.get(name, {}).get("type", "string"), "a sample value")
    return given


async def run_to_end(
    client: Client, handle: WorkflowHandle[Any, RunResult], timeout_s: float = 180.0
) -> RunResult | None:
    """Wait for the run, approving every human gate and tool approval as it comes up."""

    async def approve_what_waits() -> None:
        while True:
            try:
                status = await handle.query("status", result_type=RunStatus)
            except Exception:  # the run has closed (or not started its first task yet)
                status = None
            for gate in status.pending_gates if status else []:
                # GateError: decided meanwhile (a timeout, or our previous pass).
                with contextlib.suppress(GateError):
                    await decide_gate(
                        client,
                        handle.id,
                        gate.stage,
                        "approve",
                        comment="approved by test_legacy_corpus_runs",
                        by="test_legacy_corpus_runs",
                    )
            await asyncio.sleep(0.1)

    approver = asyncio.create_task(approve_what_waits())
    try:
        return await asyncio.wait_for(run_outcome(handle), timeout_s)
    finally:
        approver.cancel()


def failures(result: RunResult) -> dict[str, str]:
    return {
        stage: f"{res.error_type}: {res.error}"
        for stage, res in result.stages.items()
        if res.error_type or res.status == "failed"
    }


async def run_corpus_spec(client: Client, task_queue: str, path: Path) -> RunResult:
    plan = simulated_plan(path)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, run_inputs(path, plan), run_id(path))
        result = await run_to_end(client, handle)
    assert result is not None, f"{corpus_id(path)}: the run ended without a result"
    return result


@on_session_loop
@pytest.mark.parametrize("path", RUN, ids=corpus_id)
async def test_corpus_spec_runs_to_completion_under_simulate(
    client: Client, task_queue: str, path: Path
) -> None:
    result = await run_corpus_spec(client, task_queue, path)
    assert result.state == "completed", (result.reason, failures(result))


@on_session_loop
async def test_design_customer_triage_draft_response_sees_the_analysis(
    client: Client, task_queue: str
) -> None:
    """Issue 12's acceptance: in the trace, draft_response's rendered prompt contains the
    analysis (0.7.0 shows every LLM stage the accumulated context), although its template
    ("Draft a response using the analysis") names none of it."""
    path = LEGACY / "guide" / "architecture__customer_triage_simulate.yaml"
    result = await run_corpus_spec(client, task_queue, path)
    assert result.state == "completed", (result.reason, failures(result))
    analysis = result.outputs["analyze_request"]
    attempts = [
        r
        for r in TraceStore().records(result.run_id)
        if r.kind == "attempt" and r.stage_id == "draft_response"
    ]
    assert attempts, "no attempt of draft_response was traced"
    prompt = json.dumps(attempts[-1].data.get("messages"), ensure_ascii=False)
    for field in ("intent", "entities", "ambiguity_score"):
        assert field in prompt, f"draft_response's prompt lacks the analysis' {field}"
    assert str(analysis["intent"]) in prompt


@on_session_loop
async def test_design_research_fanout_splits_queries_across_the_children(
    client: Client, task_queue: str
) -> None:
    """The design documents' fan-out: ``partition_key: queries`` splits the run's ``queries``
    across 4 children, each reading its share as ``{{ queries }}``."""
    path = LEGACY / "guide" / "architecture__research_fanout_simulate.yaml"
    result = await run_corpus_spec(client, task_queue, path)
    assert result.state == "completed", (result.reason, failures(result))
    children = result.stages["parallel_research"].children
    assert len(children) == 4
    prompts = []
    for child in children:
        records = TraceStore().records(str(child["id"]))
        attempts = [r for r in records if r.kind == "attempt"]
        assert attempts, f"child {child['id']} traced no attempt"
        prompts.append(json.dumps([r.data.get("messages") for r in attempts]))
    for query in QUERIES:
        holders = [i for i, prompt in enumerate(prompts) if query in prompt]
        assert len(holders) == 1, f"{query!r} reached children {holders}, not exactly one"


#: NOT_RUN specs that 0.7.0 itself cannot finish as written, and the stage where it fails.
FAILS_AS_IN_0_7_0 = {
    "guide/fan_in_fan_out__a_complete_example_document_compliance_pipeline.yaml": "review_each",
    "guide/memory_and_context__a_complete_memory_enabled_workflow.yaml": "analyse_each",
    "guide/judge_pattern__escalation_gate_retry_until_a_judge_defined_condition_is_satisfied"
    ".yaml": "summarize",
    "guide/role_taxonomy__a_complete_example.yaml": "profile_each",
}


def test_fails_as_in_0_7_0_names_not_run_specs() -> None:
    assert set(FAILS_AS_IN_0_7_0) <= set(NOT_RUN)


@on_session_loop
@pytest.mark.parametrize("name", sorted(FAILS_AS_IN_0_7_0))
async def test_specs_0_7_0_cannot_finish_fail_here_at_the_same_stage_with_the_reason(
    client: Client, task_queue: str, name: str
) -> None:
    """They run here too, and stop where 0.7.0 stops, with an error that says why."""
    result = await run_corpus_spec(client, task_queue, LEGACY / name)
    stage = FAILS_AS_IN_0_7_0[name]
    assert result.state == "failed", result.state
    assert result.stages[stage].status == "failed", failures(result)
    error = result.stages[stage].error or ""
    assert "partition_source" in error or "until" in error, error
