"""A spec's own cases in an improvement round (self_improvement.cases), on a real Temporal dev
server: every version runs each case × repeat with shared noise, and each proposal keeps, with
its decision, every case's pass rate on both sides and the cases it fixed and broke."""

from __future__ import annotations

import contextlib
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError

from armature_temporal.improve.cases import noise
from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import start
from worker import build_worker

# A drafter whose small tier rarely writes valid JSON and has no retry: runs on small fail.
SPEC = """\
name: cased
model_tiers:
  small: {provider: simulate, valid_rate: 0.1, quality: 0.5}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
self_improvement:
  editable_surfaces: [draft.model_tier]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 6
  cases: evals/cased.cases.yaml
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
"""

CASES = """\
tests:
  - description: a headline about tides
    vars: {topic: tides}
    assert: [{type: is-json}, {type: contains-json}]
  - description: a headline about the moon
    vars: {topic: moon}
    assert: [{type: is-json}]
repeat: 3
"""


async def test_a_round_runs_the_cases_and_keeps_fixed_and_broken_with_the_decision(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "cased.yaml"
    path.write_text(SPEC)
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "cased.cases.yaml").write_text(CASES)
    plan = compile_spec(load_spec_text(SPEC, str(path), base_dir=tmp_path))
    async with build_worker(client, task_queue):
        for i in range(10):
            handle = await start(client, plan, task_queue, {"topic": f"t{i}"}, run_id=f"cased-{i}")
            with contextlib.suppress(WorkflowFailureError):  # a failed run is history too
                await handle.result()
        result = await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=SPEC, spec_path=str(path)),
            id="improve-cased-1",
            task_queue=task_queue,
            result_type=ImproveResult,
        )
    (tier,) = [p for p in result.proposals if p.changes[0].surface == "draft.model_tier"]
    assert tier.changes[0].new == "frontier"
    assert tier.test is not None and tier.test.cases is not None, tier.detail
    check = tier.test.cases
    assert check.repeat == 3 and check.cases_file.endswith("cased.cases.yaml")
    # Frontier writes valid JSON every time: both cases pass on every repeat.
    assert check.candidate_rates == [1.0, 1.0]
    assert check.broken == []
    # Small fails its JSON often, with no retry: each case it fails beyond its noise is fixed.
    names = ["a headline about tides", "a headline about the moon"]
    assert all(b is not None and b < 1.0 for b in check.base_rates)
    assert check.fixed == [
        n
        for n, b in zip(names, check.base_rates, strict=True)
        if b is not None and b + noise(b, 3) < 1.0
    ]
    assert check.fixed  # at 10% valid, small passes neither case every time
    assert "cases fixed" in tier.detail
    store = TraceStore(database_url())
    try:
        kept = store.proposal(tier.id)
        assert kept is not None and kept.test is not None and kept.test.cases == check
        stored = store.stored_proposal(tier.id)
        assert stored is not None and stored.trusted  # the MAC covers the case figures
        case_runs = [r.run_id for r in store.runs(spec="cased", limit=500) if "/case-" in r.run_id]
        assert len(case_runs) == 2 * 3 * (1 + len(result.proposals))
    finally:
        store.close()
