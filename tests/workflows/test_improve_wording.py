"""A wording-only flaw fixed by an improvement round on a real Temporal dev server: the workers
are already on the best tier, and one of them falls into a declared pitfall whose lesson no
prompt carries. The simulated refiner, shown the symptom in the worst runs' outputs, adds the
lesson to that stage's description; paired runs on shared noise verify it (interval above 0)
and the round applies it without touching a tier. Its plausible rewording of the other stage,
which carries no lesson, changes nothing the runs can measure and is rejected."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.runtime.simulate._refiner import GENERIC_WORDINGS
from armature_temporal.spec.loader import load_spec_text
from tests.fakes import plan_from, start
from worker import build_worker

LESSON = "State the unit of every number you give."
# As benchmarks/specs/improve-wording.yaml: one judge reads both writers, so both are judged
# low while `answer` falls into its pitfall; only `answer`'s outputs show the symptom.
SPEC = f"""\
name: worded
model_tiers:
  small: {{provider: simulate, valid_rate: 1.0, quality: 0.5}}
  grader: {{provider: simulate, valid_rate: 1.0, quality: 0.65}}
  large: {{provider: simulate, valid_rate: 1.0, quality: 0.9}}
inputs:
  type: object
  properties: {{question: {{type: string, default: flow}}}}
self_improvement:
  editable_surfaces: [answer.model_tier, answer.description, note.model_tier, note.description]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 10
  auto_apply: true
  refiner_tier: large
stages:
  - id: answer
    role:
      name: Engineer
      model_tier: large
      description: |
        Answer this question about the pump: {{{{ inputs.question }}}}
    output_mode: json
    output_schema:
      type: object
      properties: {{answer: {{type: string}}}}
      required: [answer]
    simulate:
      pitfalls:
        - id: units
          penalty: 0.6
          rate: 0.9
          symptom: "The answer gives numbers without units."
          lesson: "{LESSON}"
  - id: note
    role:
      name: Scribe
      model_tier: large
      description: |
        Write a one-line maintenance note about: {{{{ inputs.question }}}}
    output_mode: json
    output_schema:
      type: object
      properties: {{note: {{type: string}}}}
      required: [note]
  - id: review
    depends_on: [answer, note]
    role:
      name: Reviewer
      type: judge
      model_tier: grader
      description: "Score the answer and the note from 0 to 1: {{{{ answer.answer }}}}"
"""


async def test_a_round_verifies_a_description_carrying_the_lesson_and_rejects_a_rewording(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "worded.yaml"
    path.write_text(SPEC)
    plan = plan_from(SPEC)
    async with build_worker(client, task_queue):
        for i in range(10):
            handle = await start(
                client, plan, task_queue, {"question": f"pump {i}"}, run_id=f"worded-hist-{i}"
            )
            await handle.result()
        result = await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=SPEC, spec_path=str(path)),
            id="improve-worded-1",
            task_queue=task_queue,
            result_type=ImproveResult,
        )
    assert result.status == "proposed", result.detail
    by_surface = {p.changes[0].surface: p for p in result.proposals if len(p.changes) == 1}
    fix = by_surface["answer.description"]
    change = fix.changes[0]
    assert change.origin == "refiner" and LESSON in str(change.new)
    assert LESSON not in str(change.old)
    # Verified on paired runs: superiority, the interval above zero.
    assert fix.verdict == "verified", fix.detail
    assert fix.test is not None and fix.test.kind == "superiority"
    assert fix.ci_low > 0 and fix.delta > 0
    assert len(fix.baseline_hqs) == len(fix.candidate_hqs) == 10
    # The rewording: a generic exhortation on the other judged-low stage, no lesson in it.
    reword = by_surface["note.description"]
    added = str(reword.changes[0].new).removeprefix(str(reword.changes[0].old)).strip()
    assert added in GENERIC_WORDINGS
    assert reword.verdict == "not_better", reword.detail
    # Words that carry no lesson move no latent quality: on shared noise every pair ties.
    assert reword.baseline_hqs == reword.candidate_hqs and reword.delta == 0.0
    # Tiers untouched: nothing verified changes a tier, and the applied text keeps them.
    assert all(
        c.field != "model_tier"
        for p in result.proposals
        if p.verdict == "verified"
        for c in p.changes
    )
    assert result.settled is not None and result.settled.applied == fix.id
    written = load_spec_text(path.read_text(), str(path)).spec
    original = load_spec_text(SPEC, "worded.yaml").spec
    assert LESSON in written.stages[0].role.description  # type: ignore[union-attr]
    assert [s.role.model_tier for s in written.stages if s.role] == [
        s.role.model_tier for s in original.stages if s.role
    ]
    assert written.model_tiers == original.model_tiers
