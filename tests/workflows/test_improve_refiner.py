"""The LLM refiner in an improvement round on a real Temporal dev server: a simulate refiner
tier reads the round's diagnosis and proposes changes beside the rules (never one of theirs),
verified in the same Holm family and kept with its own predictions; and `armature optimize`,
one round of refiner proposals only, recorded in the same history."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import run_armature, run_history
from worker import build_worker

# As tests/workflows/test_improve.py's drafty spec (valid_rate 0.1: the tier change verifies
# with near certainty), with a temperature to change and the refiner on its frontier tier.
SPEC = """\
name: refined
model_tiers:
  small: {provider: simulate, valid_rate: 0.1, quality: 0.5, temperature: 0.9}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
self_improvement:
  editable_surfaces: [draft.model_tier, draft.temperature, draft.description]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 8
  refiner_tier: frontier
  refiner_proposals: 1
stages:
  - id: draft
    role:
      name: Drafter
      model_tier: small
      description: |
        Write a headline about {{ inputs.topic }}.
    output_mode: json
    output_schema:
      type: object
      properties: {headline: {type: string}}
      required: [headline]
    on_fail:
      loop: {max: 2}
      escalate: true
"""


async def test_a_round_verifies_refiner_proposals_beside_the_rules_in_one_family(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "refined.yaml"
    path.write_text(SPEC)
    async with build_worker(client, task_queue):
        await run_history(client, task_queue, SPEC, "refined", 10)
        result = await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=SPEC, spec_path=str(path)),
            id="improve-refined-1",
            task_queue=task_queue,
            result_type=ImproveResult,
        )
    assert result.status == "proposed", result.detail
    rules = [p for p in result.proposals if p.changes[0].origin == "rules"]
    refined = [p for p in result.proposals if p.changes[0].origin == "refiner"]
    assert {p.changes[0].surface for p in rules} == {
        "draft.model_tier",
        "draft.temperature",
        "draft.description",
    }
    # The simulated refiner read the diagnosis (draft often invalid): its strongest option not
    # already proposed by the rules (tier up is theirs; they halve the temperature) is
    # temperature 0. K = 1.
    (mine,) = refined
    change = mine.changes[0]
    assert (change.surface, change.old, change.new) == ("draft.temperature", None, 0.0)
    assert change.why.startswith("[simulated]")
    assert all((c.surface, c.new) != (change.surface, change.new) for p in rules for c in p.changes)
    # Its own predictions, read off the failure codes in its prompt.
    assert mine.predicted_fixes and set(mine.predicted_fixes) <= {
        "output_invalid:draft",
        "escalated:draft",
        "stage_failed:draft",
    }
    assert mine.predicted_regressions == ["low_judge:draft"]
    # Verified like the rest: paired runs, one Holm family of all four candidates.
    assert len(mine.baseline_hqs) == len(mine.candidate_hqs) == 8
    assert all(p.test is not None and p.test.m == 4 for p in result.proposals)
    tier = next(p for p in rules if p.changes[0].field == "model_tier")
    assert tier.verdict == "verified", tier.detail
    store = TraceStore(database_url())
    try:
        kept = store.proposal(mine.id)
        assert kept is not None and kept.changes[0].origin == "refiner"
        children = [r for r in store.runs(spec="refined", limit=500) if r.parent_run_id]
        assert len(children) == 8 * (1 + len(result.proposals))
    finally:
        store.close()


async def test_optimize_runs_one_verified_refiner_round_recorded_in_the_history(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # No refiner_tier: optimize uses the highest tier (frontier); no refiner in improve rounds.
    text = (
        SPEC.replace("name: refined", "name: optimized")
        .replace("  refiner_tier: frontier\n", "")
        .replace("  refiner_proposals: 1\n", "")
    )
    path = tmp_path / "optimized.yaml"
    path.write_text(text)
    addr = str(client.service_client.config.target_host)
    async with build_worker(client, task_queue):
        await run_history(client, task_queue, text, "optimized", 10)
        done = await run_armature(
            "optimize", str(path), "--json", "--address", addr, "--task-queue", task_queue
        )
    assert done.returncode == 0, done.stderr
    as_json = json.loads(done.stdout)
    round_id = as_json.pop("improve_id")
    result = ImproveResult.model_validate(as_json)
    assert result.status == "proposed", result.detail
    (only,) = result.proposals  # K = 1, refiner only: no rule-based candidate
    change = only.changes[0]
    assert change.origin == "refiner"
    assert (change.surface, change.old, change.new) == ("draft.model_tier", "small", "frontier")
    assert only.verdict == "verified" and only.ci_low > 0, only.detail
    assert only.predicted_fixes == ["escalated:draft", "output_invalid:draft"]

    history = await run_armature("improve", "history", str(path), "--json")
    assert history.returncode == 0, history.stderr
    data = json.loads(history.stdout)
    (row,) = data["rounds"]
    assert row["id"] == round_id and row["status"] == "proposed"
    assert [p["id"] for p in row["proposals"]] == [only.id]
    assert row["proposals"][0]["changes"][0]["origin"] == "refiner"
