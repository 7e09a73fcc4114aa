"""The improvement loop's statistics on a real Temporal dev server: one round's candidates are
one Holm family, and a tier moved down for an easy stage verifies by non-inferiority (it
loses no HQS within the margin, and its runs cost less) while a tier up for a struggling
stage verifies by superiority."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.improve.render import render_proposal
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import plan_from, start
from worker import build_worker

# draft: a small tier that is almost never valid (a tier up verifies by superiority).
# title: an easy stage on the frontier tier; medium is as valid, so the paired runs score the
# same and the tier down costs less (simulate costs 0 USD: the proxy is tier units).
SPEC = """\
name: oversized
model_tiers:
  small: {provider: simulate, valid_rate: 0.1, quality: 0.5}
  medium: {provider: simulate, valid_rate: 1.0, quality: 0.9}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
self_improvement:
  editable_surfaces: [draft.model_tier, title.model_tier]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 8
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
  - id: title
    role:
      name: Titler
      model_tier: frontier
      description: |
        Give a one-word title for {{ inputs.topic }}.
    output_mode: json
    output_schema:
      type: object
      properties: {title: {type: string}}
      required: [title]
"""


async def test_a_tier_down_for_an_easy_stage_verifies_by_non_inferiority(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "oversized.yaml"
    path.write_text(SPEC)
    plan = plan_from(SPEC)
    async with build_worker(client, task_queue):
        for i in range(10):
            handle = await start(
                client, plan, task_queue, {"topic": f"topic {i}"}, run_id=f"oversized-{i}"
            )
            await handle.result()
        result = await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=SPEC, spec_path=str(path)),
            id="improve-oversized-1",
            task_queue=task_queue,
            result_type=ImproveResult,
        )
    assert result.status == "proposed", result.detail
    by_stage = {p.changes[0].stage: p for p in result.proposals if len(p.changes) == 1}
    assert set(by_stage) == {"draft", "title"}
    # Both verified, on different stages: the second wave verifies them combined
    # (improve/combine.py; tests/workflows/test_improve_combine.py).
    (both,) = [p for p in result.proposals if len(p.changes) == 2]
    assert {c.stage for c in both.changes} == {"draft", "title"}
    assert both.verdict == "verified", both.detail

    down = by_stage["title"]
    assert (down.changes[0].old, down.changes[0].new) == ("frontier", "medium")
    assert down.verdict == "verified", down.detail
    t = down.test
    assert t is not None and t.kind == "non_inferiority" and t.margin == 0.02
    assert t.m == 2 and t.holm_rank in (1, 2) and t.adj_ci_low > -0.02
    assert t.cost_unit == "tier units"
    assert t.baseline_cost is not None and t.candidate_cost is not None
    assert t.candidate_cost < t.baseline_cost
    assert down.detail.startswith("non-inferiority test (margin 0.02 HQS)")
    assert f"rank {t.holm_rank} of 2" in down.detail

    up = by_stage["draft"]
    assert (up.changes[0].old, up.changes[0].new) == ("small", "medium")
    assert up.verdict == "verified", up.detail
    assert up.test is not None and up.test.kind == "superiority" and up.test.margin == 0.0
    assert up.detail.startswith("superiority test:")
    assert {up.test.holm_rank, t.holm_rank} == {1, 2}

    # Kept in the store with its test, and shown by `armature proposals show`.
    store = TraceStore(database_url())
    try:
        kept = store.proposal(down.id)
    finally:
        store.close()
    assert kept is not None and kept.test == t
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(render_proposal(kept))
    shown = console.export_text()
    assert "test: non-inferiority, margin 0.02 HQS; Holm rank" in shown
    assert f"cost per run (current → changed): {t.baseline_cost:g} → " in shown
