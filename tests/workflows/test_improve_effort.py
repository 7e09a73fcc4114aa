"""Honest effort on a real Temporal dev server: a round reports the proposals it tried and left
out, the verification runs and tokens it spent (equal to what the store holds for its runs),
why it stopped and that it has no held-out set; a round whose refiner is on the judge's tier
is flagged and says verification cannot use another judge. The report is in `armature
improve --json`, in the round's row in the store and in `armature improve history`."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.store.rounds import CALL_KINDS
from tests.fakes import run_armature, run_history
from worker import build_worker

# Two struggling stages (six rule-based candidates, three verified: the limit leaves three
# out), graded by a judge on frontier — the refiner's tier too.
SPEC = """\
name: effortful
model_tiers:
  small: {provider: simulate, valid_rate: 0.1, quality: 0.5, temperature: 0.9}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
self_improvement:
  editable_surfaces: [draft.model_tier, draft.temperature, draft.description,
                      title.model_tier, title.temperature, title.description]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 4
  refiner_tier: frontier
  refiner_proposals: 1
stages:
  - id: draft
    role:
      {name: Drafter, model_tier: small, description: "Write a headline about {{ inputs.topic }}."}
    output_mode: json
    output_schema: {type: object, properties: {headline: {type: string}}, required: [headline]}
    on_fail: {loop: {max: 2}, escalate: true}
  - id: title
    role: {name: Titler, model_tier: small, description: "Give a title for {{ inputs.topic }}."}
    output_mode: json
    output_schema: {type: object, properties: {title: {type: string}}, required: [title]}
    on_fail: {loop: {max: 2}, escalate: true}
  - id: grade
    depends_on: [draft, title]
    role:
      {name: Grader, type: judge, model_tier: frontier, description: "Score {{ draft.headline }}."}
"""


async def test_a_round_reports_the_runs_and_tokens_it_spent_and_flags_a_refiner_on_the_judge_tier(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "effortful.yaml"
    path.write_text(SPEC)
    addr = str(client.service_client.config.target_host)
    async with build_worker(client, task_queue):
        await run_history(client, task_queue, SPEC, "effortful", 8)
        done = await run_armature(
            "improve", str(path), "--json", "--address", addr, "--task-queue", task_queue
        )
    assert done.returncode == 0, done.stderr
    as_json = json.loads(done.stdout)
    round_id = as_json.pop("improve_id")
    result = ImproveResult.model_validate(as_json)
    effort = result.effort
    assert effort is not None, result.detail
    # Proposals: every candidate verified is counted (a combination too); the limit's leftovers.
    assert effort.proposals_tried == len(result.proposals) >= 4  # 3 rules + 1 refiner
    assert effort.proposals_left_out >= 1
    assert (effort.stop, effort.stop_detail.split(";")[0]) == (
        "budget",
        "verified what its limits allow",
    )
    # Runs and tokens: what the store holds for the round's runs, counted here independently.
    store = TraceStore(database_url())
    try:
        mine = [r for r in store.runs(spec="effortful", limit=1000) if r.parent_run_id == round_id]
        assert effort.runs == len(mine) == 4 * (1 + len(result.proposals))
        spent = sum(
            r.prompt_tokens + r.completion_tokens
            for run in mine
            for r in store.records(run.run_id)
            if r.kind in CALL_KINDS
        )
        assert spent > 0 and effort.refiner_tokens > 0
        assert effort.tokens == spent + effort.refiner_tokens
        (stored,) = store.rounds("effortful")
        assert stored.id == round_id and stored.effort == effort
    finally:
        store.close()
    # The refiner is on the judge's tier: flagged, and verification says it cannot swap judges.
    assert (effort.refiner_tier, effort.judge_tiers, effort.same_tier) == (
        "frontier",
        ["frontier"],
        True,
    )
    assert "cannot use another judge tier" in effort.judge_note
    assert "grade" in effort.judge_note
    assert effort.held_out_hqs is None and effort.held_out.startswith("none")
    # In words: `armature improve history` shows the report and the warning.
    shown = await run_armature("improve", "history", str(path))
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "WARNING same tier" in text
    assert f"{effort.runs} verification runs, {effort.tokens:,} tokens" in text
    assert "stopped: budget" in text and "held-out: none" in text


async def test_a_round_at_target_reports_it_converged_having_spent_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    text = (
        SPEC.replace("name: effortful", "name: settled")
        .replace("target_hqs: 0.99", "target_hqs: 0.0")
        .replace("valid_rate: 0.1, quality: 0.5", "valid_rate: 1.0, quality: 0.9")
    )
    path = tmp_path / "settled.yaml"
    path.write_text(text)
    async with build_worker(client, task_queue):
        await run_history(client, task_queue, text, "settled", 8)
        result = await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=text, spec_path=str(path)),
            id="improve-settled-1",
            task_queue=task_queue,
            result_type=ImproveResult,
        )
    assert result.status == "at_target", result.detail
    effort = result.effort
    assert effort is not None
    assert (effort.stop, effort.proposals_tried, effort.runs, effort.tokens) == (
        "converged",
        0,
        0,
        0,
    )
    # The refiner never ran, so nothing to flag.
    assert effort.refiner_tier is None and not effort.same_tier and effort.judge_note == ""
    store = TraceStore(database_url())
    try:
        (stored,) = store.rounds("settled")
        assert stored.effort == effort
    finally:
        store.close()
