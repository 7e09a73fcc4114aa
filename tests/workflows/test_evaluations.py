"""Post-run evaluation (a stage's ``evaluate`` criteria) on a real Temporal dev server with the
simulate provider: each completed stage with criteria is judged once on the judge tier, its
scores land on the stage's result and in the trace (and in ``armature report``), and an
evaluation that fails is recorded as such without failing the run. The interpreter's
``Evaluations`` runs here through the harness, after the stages, like the interpreter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.store import TraceStore
from tests.fakes import plan_from, run_armature
from tests.workflows.collaborators_harness import harness_worker, start_harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: evaluated
model_tiers:
  small: {{provider: simulate}}
  frontier: {{provider: simulate, valid_rate: {judge_valid_rate}}}
stages:
  - id: draft
    role: {{name: Writer, model_tier: small, description: "Draft a reply."}}
    evaluate: ["addresses the customer's question", "polite tone", "polite tone"]
  - id: classify
    role: {{name: Classifier, model_tier: small, description: "Classify it."}}
    output_mode: json
    evaluate: ["the label is one of billing, bug, other"]
  - id: notes
    role: {{name: Noter, model_tier: small, description: "Take notes."}}
  - id: lost
    role: {{name: Lost, model_tier: small, description: "Never runs here."}}
    evaluate: ["never judged: the stage did not complete"]
"""
GIVEN = {
    "draft": {"content": "Thanks for writing in! Your refund is on its way."},
    "classify": {"label": "billing"},
    "notes": {"content": "nothing to judge"},
}


async def run(client: Client, task_queue: str, judge_valid_rate: float = 1.0) -> RunResult:
    plan = plan_from(SPEC.format(judge_valid_rate=judge_valid_rate))
    async with harness_worker(client, task_queue):
        handle = await start_harness(client, task_queue, plan, given=GIVEN)
        result: RunResult = await asyncio.wait_for(handle.result(), timeout=60)
    return result


def evaluations(run_id: str) -> dict[str, Any]:
    return {r.stage_id: r for r in TraceStore().records(run_id) if r.kind == "evaluation"}


async def test_each_completed_stage_with_criteria_is_scored_on_the_judge_tier(
    client: Client, task_queue: str
) -> None:
    result = await run(client, task_queue)
    assert result.state == "completed"
    draft = result.stages["draft"].evaluation
    assert draft is not None and draft["tier"] == "frontier"
    # One score in [0, 1] per criterion (a repeated criterion is judged once), their mean.
    assert list(draft["scores"]) == ["addresses the customer's question", "polite tone"]
    assert all(0.0 <= s <= 1.0 for s in draft["scores"].values())
    assert draft["mean"] == pytest.approx(sum(draft["scores"].values()) / 2)
    assert draft["rationale"].startswith("[simulated]")
    classify = result.stages["classify"].evaluation
    assert classify is not None and list(classify["scores"]) == [
        "the label is one of billing, bug, other"
    ]
    # No criteria, or not completed: not judged.
    assert result.stages["notes"].evaluation is None
    assert result.stages["lost"].status == "skipped" and result.stages["lost"].evaluation is None

    traced = evaluations(result.run_id)
    assert set(traced) == {"draft", "classify"}
    record = traced["draft"]
    assert record.status == "completed" and record.output == draft
    assert record.tier == "frontier" and record.model and record.judge_score == draft["mean"]
    assert record.prompt_tokens > 0 and record.data["criteria"] == list(draft["scores"])
    # The judge read the stage's output.
    prompt = record.data["messages"][-1]["content"]
    assert "Your refund is on its way." in prompt and "polite tone" in prompt
    # The judge's tokens count in the run's totals.
    row = TraceStore().run(result.run_id)
    assert row is not None
    assert row.prompt_tokens == sum(r.prompt_tokens for r in traced.values())


async def test_an_evaluation_that_fails_is_recorded_and_the_run_still_completes(
    client: Client, task_queue: str
) -> None:
    result = await run(client, task_queue, judge_valid_rate=0.0)
    assert result.state == "completed"
    draft = result.stages["draft"].evaluation
    assert draft is not None and set(draft) == {"error", "tier"}
    assert draft["error"].startswith("evaluation failed after 2 attempt(s):")
    record = evaluations(result.run_id)["draft"]
    assert record.status == "failed" and record.attempt == 2
    assert record.error == draft["error"]


async def test_the_report_shows_each_stages_criteria_scores_and_mean(
    client: Client, task_queue: str, armature_home: Path
) -> None:
    result = await run(client, task_queue)
    env = {"ARMATURE_HOME": str(armature_home), "ARMATURE_DB_URL": ""}
    as_json = await run_armature("report", result.run_id, "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    stages = {s["stage_id"]: s for s in json.loads(as_json.stdout)["stages"]}
    assert stages["draft"]["evaluation"] == result.stages["draft"].evaluation
    assert stages["notes"]["evaluation"] is None
    shown = await run_armature("report", result.run_id, env={**env, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    mean = result.stages["draft"].evaluation["mean"]  # type: ignore[index]
    assert f"{mean:.2f} (2 criteria)" in shown.stdout
    assert "evaluations" in shown.stdout and "polite tone" in shown.stdout
    score = result.stages["classify"].evaluation["scores"]  # type: ignore[index]
    assert f"{score['the label is one of billing, bug, other']:.2f}" in shown.stdout
