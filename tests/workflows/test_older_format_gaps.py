"""The older-format gaps of issue #30, each with the spec shape that failed: a prompt that
quotes one field of an upstream output still sees the rest; a loop's ``until`` names the
stage's own id; ``carry_forward`` as a list of ``name: stage.field`` pairs; a condition naming
a stage that does not exist is a warning and renders false; an error points at the offending
field's own line."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client

from armature_temporal.errors import SpecError
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from tests.fakes import start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

TRIAGE = """\
name: triage-quoted
model_tiers: {small: {provider: simulate}, frontier: {provider: simulate}}
inputs:
  type: object
  properties: {request: {type: string, default: "I was charged twice in March."}}
stages:
  - id: analyze_request
    role: {type: worker, model_tier: small, description: "Classify {{ inputs.request }}."}
    output_mode: json
    output_schema:
      type: object
      properties:
        intent: {type: string}
        entities: {type: array, items: {type: string}}
        ambiguity_score: {type: number, minimum: 0, maximum: 1}
      required: [intent, entities, ambiguity_score]
  - id: draft_response
    depends_on: [analyze_request]
    role:
      type: orchestrator
      model_tier: frontier
      description: |
        Draft a response to the {{ analyze_request.intent }} request. If ambiguity_score >
        0.7, ask one clarifying question instead.
"""


def _prompt(run_id: str, stage: str) -> str:
    attempts = [
        r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == stage
    ]
    assert attempts, f"no attempt of {stage} was traced"
    return json.dumps(attempts[-1].data["messages"], ensure_ascii=False)


def _plan(text: str) -> object:
    return compile_spec(load_spec_text(text, "test.yaml"))


async def test_quoting_one_field_of_an_analysis_does_not_hide_the_others(
    client: Client, task_queue: str
) -> None:
    async with build_worker(client, task_queue):
        handle = await start(client, _plan(TRIAGE), task_queue)  # type: ignore[arg-type]
        result = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert result is not None and result.state == "completed", result
    analysis = result.outputs["analyze_request"]
    prompt = _prompt(handle.id, "draft_response")
    assert f"Draft a response to the {analysis['intent']} request" in prompt  # quoted
    assert "ambiguity_score" in prompt and "entities" in prompt  # and the rest, in Context
    assert json.dumps(analysis["ambiguity_score"]) in prompt
    context = prompt.split("Context:", 1)[1]
    assert '"intent"' not in context  # the quoted field is not repeated


async def test_a_loops_until_may_name_the_stages_own_id(client: Client, task_queue: str) -> None:
    spec = """\
name: loop-self
model_tiers: {small: {provider: simulate}}
stages:
  - id: draft
    role: {description: Write a short draft.}
    output_mode: json
    output_schema:
      type: object
      properties: {text: {type: string, minLength: 1}}
      required: [text]
    loop:
      max_iterations: 3
      until: "{{ draft.text | length > 0 }}"
"""
    async with build_worker(client, task_queue):
        handle = await start(client, _plan(spec), task_queue)  # type: ignore[arg-type]
        result = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert result is not None and result.state == "completed", result
    # draft.text is the iteration's (non-empty) text: met at once. Were `draft` not the
    # current output it would render empty, and the loop would run all 3 iterations.
    attempts = [
        r for r in TraceStore().records(handle.id) if r.kind == "attempt" and r.stage_id == "draft"
    ]
    assert len(attempts) == 1, [r.data.get("iteration") for r in attempts]


async def test_carry_forward_as_a_list_of_name_stage_field_pairs(
    client: Client, task_queue: str
) -> None:
    spec = """\
name: carry-pairs
model_tiers: {small: {provider: simulate}}
continuation:
  carry_forward:
    - last_facts: note.facts
    - first_fact: note.facts
stages:
  - id: note
    role: {description: "before: {{ prior_run.last_facts | tojson_compact }}"}
    output_mode: json
    output_schema:
      type: object
      properties: {facts: {type: array, items: {type: string}, minItems: 2, maxItems: 2}}
      required: [facts]
"""
    plan = _plan(spec)
    assert plan.continuation is not None  # type: ignore[attr-defined]
    assert plan.continuation.carry_forward == {  # type: ignore[attr-defined]
        "last_facts": "note.facts",
        "first_fact": "note.facts",
    }
    async with build_worker(client, task_queue):
        first = await (await start(client, plan, task_queue, run_id="pairs-1")).result()  # type: ignore[arg-type]
        await (await start(client, plan, task_queue, run_id="pairs-2")).result()  # type: ignore[arg-type]
    facts = json.dumps(first.outputs["note"]["facts"], ensure_ascii=False)
    (said,) = [
        r.data["messages"][-1]["content"]
        for r in TraceStore().records("pairs-2")
        if r.kind == "attempt"
    ]
    assert f"before: {facts}" in said
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec.replace("first_fact: note.facts", "last_facts: note.other"))
    assert "carries 'last_facts' twice" in str(caught.value)


async def test_a_condition_naming_no_stage_warns_and_renders_false(
    client: Client, task_queue: str
) -> None:
    spec = """\
name: cond-missing
model_tiers: {small: {provider: simulate}}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
stages:
  - id: draft
    role: {description: "Write about {{ inputs.topic }}."}
  - id: gated
    depends_on: [draft]
    condition: "{{ reviewer.approved }}"
    role: {description: Polish it.}
  - id: always
    depends_on: [draft]
    skip_if: "{{ missing_stage.flag }}"
    role: {description: Sum it up.}
"""
    loaded = load_spec_text(spec, "test.yaml")
    said = {w.path: w.message for w in loaded.warnings}
    assert "reads 'reviewer'" in said["stages[1].condition"]
    assert "the condition is false" in said["stages[1].condition"]
    assert "the skip_if is false" in said["stages[2].skip_if"]
    async with build_worker(client, task_queue):
        handle = await start(client, compile_spec(loaded), task_queue)
        result = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert result is not None
    assert result.state == "completed", {k: (v.status, v.error) for k, v in result.stages.items()}
    assert result.stages["gated"].status == "skipped"  # its condition rendered false
    assert result.stages["always"].status == "completed"  # its skip_if rendered false
