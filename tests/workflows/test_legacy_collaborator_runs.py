"""Adapters, cross-run memory and post-run evaluation in real runs of the interpreter
(``RunSpecWorkflow``), as an armature-agents 0.7.0 spec uses them: a script adapter's JSON feeds
a model stage, the model stage's output is remembered and comes back in the next run's prompt
(with provenance ``memory``), its ``evaluate`` criteria are judged after the run and shown by
``armature report``, and a safety rule on an adapter's ``cmd`` stops it before it runs.

tests/workflows/test_adapters.py, test_memory.py and test_evaluations.py test the collaborators
themselves, case by case.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.models import SafetyRule
from armature_temporal.store import TraceStore
from tests.fakes import plan_from, run_armature, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: Prints the account (its argument) and what ARMATURE_CONTEXT says the topic is, as JSON.
LOOKUP = (
    "import json, os, sys; ctx = json.loads(os.environ['ARMATURE_CONTEXT']); "
    "print(json.dumps({'account': sys.argv[1], 'plan': 'gold', 'seen_topic': ctx['topic']}))"
)
SPEC = f"""\
name: legacy-collab
model_tiers:
  small: {{provider: simulate}}
  frontier: {{provider: simulate}}
memory:
  enabled: true
  capture:
    - {{stage: decide, key: verdict, max_entries: 2}}
adapters:
  lookup:
    name: lookup
    type: script
    cmd: [{json.dumps(sys.executable)}, "-c", {json.dumps(LOOKUP)}, "{{{{ topic }}}}"]
    parse: json
stages:
  - id: fetch
    adapter: lookup
  - id: decide
    role:
      name: Decider
      type: worker
      model_tier: small
      description: >-
        Decide what to do for account {{{{ fetch.account }}}} on plan {{{{ fetch.plan }}}}.
        Earlier verdicts: {{{{ _memory }}}}
    output_mode: json
    output_schema:
      type: object
      properties: {{verdict: {{type: string}}}}
      required: [verdict]
    evaluate: ["names the account", "is actionable"]
"""


async def run_once(client: Client, task_queue: str, topic: str) -> RunResult:
    plan = plan_from(SPEC)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {"topic": topic})
        result = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert isinstance(result, RunResult)
    return result


def prompt_of(run_id: str, stage: str) -> tuple[str, dict[str, str]]:
    attempt = next(
        r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == stage
    )
    return attempt.data["messages"][-1]["content"], attempt.inputs_provenance


async def test_an_adapter_feeds_a_model_stage_which_is_remembered_and_evaluated(
    client: Client, task_queue: str, armature_home: Path
) -> None:
    first = await run_once(client, task_queue, "acct-17")
    assert first.state == "completed", first.stages
    assert first.outputs["fetch"] == {"account": "acct-17", "plan": "gold", "seen_topic": "acct-17"}
    prompt, _ = prompt_of(first.run_id, "decide")
    assert "account acct-17 on plan gold" in prompt and "Earlier verdicts: {}" in prompt

    second = await run_once(client, task_queue, "acct-18")
    assert second.state == "completed", second.stages
    remembered = first.outputs["decide"]["verdict"]
    prompt, provenance = prompt_of(second.run_id, "decide")
    assert json.dumps(remembered)[1:-1] in prompt  # the first run's verdict, in this prompt
    assert provenance["_memory"] == "memory"
    assert [e.value for e in TraceStore().memory("legacy-collab")] == [
        remembered,
        second.outputs["decide"]["verdict"],
    ]

    evaluation = second.stages["decide"].evaluation
    assert evaluation is not None and list(evaluation["scores"]) == [
        "names the account",
        "is actionable",
    ]
    assert second.stages["fetch"].evaluation is None
    env = {"ARMATURE_HOME": str(armature_home), "ARMATURE_DB_URL": ""}
    shown = await run_armature("report", second.run_id, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    stages = {s["stage_id"]: s for s in json.loads(shown.stdout)["stages"]}
    assert stages["decide"]["evaluation"] == evaluation


async def test_a_rule_on_an_adapters_cmd_stops_the_run_before_the_script_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    text = f"""\
name: legacy-blocked
adapters:
  cleanup:
    type: script
    cmd: ["touch", "{marker}"]
stages:
  - id: clean
    adapter: cleanup
  - id: after
    role: {{name: After, description: "Say done."}}
    depends_on: [clean]
"""
    rule: dict[str, Any] = {
        "tool": "cleanup",
        "condition": {"field": "cmd", "op": "contains", "value": "touch"},
        "action": "block",
        "message": "no touching",
    }
    plan = plan_from(text)
    plan = plan.model_copy(update={"safety_rules": [SafetyRule.model_validate(rule)]})
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        result = await asyncio.wait_for(run_outcome(handle), timeout=60)
    assert isinstance(result, RunResult)
    assert result.state == "failed"
    clean = result.stages["clean"]
    assert clean.status == "failed" and clean.error_type == "policy_blocked"
    assert "no touching" in (clean.error or "")
    assert result.stages["after"].status == "skipped"
    assert not marker.exists()
