"""Combining verified changes on a real Temporal dev server (issue #17, item 4): two stages
each on an often-invalid tier, so a round verifies a tier change for each; the second wave
runs both changes together on the same inputs, the combination verifies against the baseline
and is no worse than the best single, and it is settled (to ``<spec>.pending.yaml``: a tier
change to another endpoint is review lane) instead of either single."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from armature_temporal.improve.pending import read_pending
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import assert_replays, plan_from, start
from tests.workflows.test_improve import _improve
from worker import build_worker

SPEC = """\
name: two-drafts
model_tiers:
  small: {provider: simulate, valid_rate: 0.1, quality: 0.5}
  frontier:
    {provider: simulate, api_base: "https://frontier.example/v1", valid_rate: 1.0, quality: 0.95}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
self_improvement:
  editable_surfaces: [head.model_tier, body.model_tier]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 8
  auto_apply: true
stages:
  - id: head
    role: {name: Headliner, model_tier: small, description: "A headline on {{ inputs.topic }}."}
    output_mode: json
    output_schema: {type: object, properties: {headline: {type: string}}, required: [headline]}
    on_fail: {loop: {max: 2}, escalate: true}
  - id: body
    role: {name: Writer, model_tier: small, description: "A paragraph on {{ inputs.topic }}."}
    output_mode: json
    output_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    on_fail: {loop: {max: 2}, escalate: true}
"""


async def test_two_verified_tier_changes_are_verified_combined_and_settled_together(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "two-drafts.yaml"
    path.write_text(SPEC)
    plan = plan_from(SPEC)
    async with build_worker(client, task_queue):
        for i in range(10):
            handle = await start(client, plan, task_queue, {"topic": f"t{i}"}, run_id=f"two-{i}")
            await handle.result()
        result = await _improve(client, task_queue, SPEC, path, "improve-two-drafts")
    assert result.status == "proposed", result.detail
    singles = [p for p in result.proposals if len(p.changes) == 1]
    (combined,) = [p for p in result.proposals if len(p.changes) == 2]
    assert all(p.verdict == "verified" for p in singles), [p.detail for p in singles]
    assert {p.changes[0].stage for p in singles} == {"head", "body"}
    assert combined.verdict == "verified", combined.detail
    assert {(c.stage, c.new) for c in combined.changes} == {
        ("head", "frontier"),
        ("body", "frontier"),
    }
    assert combined.test is not None and combined.test.m == 3 and combined.test.alpha_adj == 0.01667
    assert len(combined.candidate_hqs) == len(combined.baseline_hqs) == 8
    best = max(singles, key=lambda p: p.ci_low)
    assert f"vs the best single {best.id}" in combined.detail
    # The combination beats each single on the same inputs.
    assert sum(combined.candidate_hqs) > max(sum(p.candidate_hqs) for p in singles)
    assert combined.predicted_fixes == sorted({f for p in singles for f in p.predicted_fixes})
    assert combined.lane == "review"
    settled = result.settled
    assert settled is not None and settled.applied is None and settled.pending == combined.id
    assert path.read_text() == SPEC
    pending = read_pending(path)
    assert pending.proposal_id == combined.id and pending.text == combined.spec_text
    new_plan = compile_spec(load_spec_text(pending.text, str(path), base_dir=tmp_path))
    assert {s.role.model_tier for s in new_plan.stages if s.role} == {"frontier"}
    assert "the combination" in result.detail and "settled instead of the singles" in result.detail
    store = TraceStore(database_url())
    try:
        kept = store.proposal(combined.id)
        assert kept is not None and kept.changes == combined.changes
        children = [r for r in store.runs(spec="two-drafts", limit=500) if r.parent_run_id]
        assert len(children) == 8 * (1 + len(singles)) + 8  # baseline, singles, combination
    finally:
        store.close()
    # The round and every run it made replay from their histories: the second wave's commands
    # come out the same on a worker that has to rebuild it.
    await assert_replays(client, "improve-two-drafts", *(r.run_id for r in children))
