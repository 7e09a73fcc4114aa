"""A round's reflective frontier search (self_improvement.search_runs) on a real Temporal dev
server. Two independent stages, each failing its JSON on the small tier, with cases on two
answers of one and one of the other: the frontier keeps the candidate that fixes the single
case of the second stage though its mean is lower, the search merges the two complementary
candidates, and a budget too small for one more candidate stops it, saying so. And a stage
that always hedges: the refiner, shown the failing cases' answers, states the lesson."""

from __future__ import annotations

import contextlib
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError

from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.improve.models import SearchMember as Member
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import assert_replays, start
from worker import build_worker

SPEC = """\
name: {name}
model_tiers:
  small: {{provider: simulate, valid_rate: 0.1, quality: 0.5}}
  frontier: {{provider: simulate, valid_rate: 1.0, quality: 0.95}}
inputs:
  type: object
  properties: {{topic: {{type: string, default: tides}}}}
self_improvement:
  editable_surfaces: [draft.model_tier, title.model_tier]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 6
  refiner_tier: frontier
  refiner_proposals: 1
  cases: evals/two.cases.yaml
  search_runs: {budget}
stages:
  - id: draft
    role:
      name: Drafter
      model_tier: small
      description: |
        Write a headline about {{{{ inputs.topic }}}}.
    output_mode: json
    output_schema:
      type: object
      properties: {{headline: {{type: string}}}}
      required: [headline]
    fail_as_value: true
  - id: title
    role:
      name: Titler
      model_tier: small
      description: |
        Write a title about {{{{ inputs.topic }}}}.
    output_mode: json
    output_schema:
      type: object
      properties: {{title: {{type: string}}}}
      required: [title]
    fail_as_value: true
"""

CASES = """\
tests:
  - description: a draft about tides
    vars: {topic: tides}
    stage: draft
    assert: [{type: not-contains, value: _failed}]
  - description: a draft about the moon
    vars: {topic: moon}
    stage: draft
    assert: [{type: not-contains, value: _failed}]
  - description: a title about waves
    vars: {topic: waves}
    stage: title
    assert: [{type: not-contains, value: _failed}]
repeat: 3
"""


async def _round(
    client: Client, task_queue: str, tmp_path: Path, name: str, budget: int
) -> ImproveResult:
    text = SPEC.format(name=name, budget=budget)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    (tmp_path / "evals").mkdir(exist_ok=True)
    (tmp_path / "evals" / "two.cases.yaml").write_text(CASES)
    plan = compile_spec(load_spec_text(text, str(path), base_dir=tmp_path))
    async with build_worker(client, task_queue):
        for i in range(10):
            handle = await start(client, plan, task_queue, {"topic": f"t{i}"}, run_id=f"{name}-{i}")
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()
        return await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=text, spec_path=str(path)),
            id=f"improve-{name}",
            task_queue=task_queue,
            result_type=ImproveResult,
        )


def _by_change(result: ImproveResult) -> dict[tuple[tuple[str, object], ...], Member]:
    assert result.search is not None, result.detail
    return {tuple(sorted((c.surface, c.new) for c in m.changes)): m for m in result.search.members}


TITLE = (("title.model_tier", "frontier"),)
DRAFT = (("draft.model_tier", "frontier"),)
BOTH = (("draft.model_tier", "frontier"), ("title.model_tier", "frontier"))


async def test_a_budget_too_small_for_one_candidate_stops_the_search_and_keeps_the_niche_winner(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # 3 cases x 3 repeats = 9 runs per candidate; a budget of 8 buys none.
    result = await _round(client, task_queue, tmp_path, "budgeted", 8)
    search = result.search
    assert search is not None
    assert (search.stop_reason, search.spent_runs, search.tried) == ("budget", 0, 0)
    assert "spent 0 of 8 case runs on 0 candidate(s) and stopped: budget" in result.detail
    members = _by_change(result)
    title, draft = members[TITLE], members[DRAFT]
    # The title fix wins only the title case: its mean is lower, and the frontier keeps it.
    assert title.scores == [0.0, 0.0, 1.0] and draft.scores == [1.0, 1.0, 0.0]
    assert title.mean < draft.mean
    assert set(search.frontier) == {title.id, draft.id}
    assert "current" not in search.frontier  # dominated on every case


async def test_the_search_merges_complementary_candidates_and_stops_when_one_passes_every_case(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    result = await _round(client, task_queue, tmp_path, "merged", 18)
    search = result.search
    assert search is not None
    members = _by_change(result)
    merged, title, draft = members[BOTH], members[TITLE], members[DRAFT]
    # Merged from the two frontier members that win different cases (the lower-mean one too).
    assert merged.origin == "merged" and set(merged.parents) == {title.id, draft.id}
    assert merged.scores == [1.0, 1.0, 1.0]
    assert search.stop_reason == "converged" and search.frontier == [merged.id]
    assert search.spent_runs == 9 * search.tried <= search.budget_runs
    # Every decision of the round, the combination wave's too, carries the case check.
    assert all(p.test is not None and p.test.cases is not None for p in result.proposals)
    # The merged candidate is verified like any other, and lists the cases it fixed.
    (proposal,) = [
        p
        for p in result.proposals
        if tuple(sorted((c.surface, c.new) for c in p.changes)) == BOTH
        and p.test is not None
        and p.test.cases is not None
    ]
    assert proposal.verdict == "verified", proposal.detail
    assert proposal.test is not None and proposal.test.cases is not None
    assert proposal.test.cases.fixed == search.cases and proposal.test.cases.broken == []
    # Every step of the search replays from history, so it must be deterministic (its parent
    # draws are seeded from the spec_hash): the round and every run it made replay, in the
    # strict sandbox, on a worker that has to rebuild them (what a worker with no cache did
    # live at every workflow task, once each here).
    store = TraceStore(database_url())
    try:
        children = [r.run_id for r in store.runs(spec="merged", limit=1000) if r.parent_run_id]
    finally:
        store.close()
    assert len(children) >= 9 * search.tried, children
    await assert_replays(client, "improve-merged", *children)


REFLECTIVE_TEMPLATE = """\
name: reflective
model_tiers:
  small: {provider: simulate, quality: 0.6}
  editor: {provider: simulate, quality: 0.95}
  big: {provider: simulate, quality: 0.9}  # last on the ladder: no tier above the drafter's
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
self_improvement:
  editable_surfaces: [draft.description, draft.model_tier]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 6
  refiner_tier: big
  refiner_proposals: 1
  cases: evals/{cases}
  search_runs: 8
stages:
  - id: draft
    role:
      name: Reporter
      model_tier: big
      description: |
        Report on {{ inputs.topic }}.
    simulate:
      pitfalls:
        - id: hedging
          penalty: 0.3
          rate: 1.0
          symptom: It is hard to say for sure.
          lesson: State what was observed plainly, without hedging.
  - id: review
    depends_on: [draft]
    role:
      name: Editor
      type: judge
      model_tier: editor  # not the refiner's tier: the proposer does not judge
      description: "Score this report from 0 to 1 for plain statement: {{ draft }}"
"""

HEDGE = """\
tests:
  - description: tides reported plainly
    vars: {topic: tides}
    stage: draft
    assert: [{type: not-icontains, value: hard to say for sure}]
  - description: waves reported plainly
    vars: {topic: waves}
    stage: draft
    assert: [{type: not-icontains, value: hard to say for sure}]
repeat: 2
"""


async def _reflective(
    client: Client, task_queue: str, tmp_path: Path, name: str, cases: str, budget: int = 8
) -> ImproveResult:
    text = (
        REFLECTIVE_TEMPLATE.replace("{cases}", f"{name}.cases.yaml")
        .replace("name: reflective", f"name: reflective-{name}")
        .replace("search_runs: 8", f"search_runs: {budget}")
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / f"{name}.cases.yaml").write_text(cases)
    plan = compile_spec(load_spec_text(text, str(path), base_dir=tmp_path))
    async with build_worker(client, task_queue):
        for i in range(10):
            await (await start(client, plan, task_queue, {"topic": f"t{i}"})).result()
        return await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=text, spec_path=str(path)),
            id=f"improve-reflective-{name}",
            task_queue=task_queue,
            result_type=ImproveResult,
        )


async def test_the_lesson_a_failing_case_shows_is_stated_and_fixes_both_cases(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Every report hedges: the refiner, shown the symptom (in the worst runs' transcripts
    before the search, else in the failing cases the search reflects on), states the lesson;
    the version carrying it passes both cases and is verified with both listed as fixed."""
    result = await _reflective(client, task_queue, tmp_path, "hedge", HEDGE)
    search = result.search
    assert search is not None, result.detail
    current, child = search.members
    assert current.scores == [0.0, 0.0]  # every report hedges (rate 1.0)
    assert child.origin in ("proposed", "reflected") and child.parents == ["current"]
    (change,) = child.changes
    assert change.surface == "draft.description"
    assert "State what was observed plainly, without hedging." in str(change.new)
    assert child.scores == [1.0, 1.0]
    assert (search.stop_reason, search.frontier) == ("converged", [child.id])
    # Reflection runs only when the first wave left something to find.
    assert search.spent_runs == (4 if child.origin == "reflected" else 0)
    (proposal,) = result.proposals
    assert proposal.verdict == "verified", proposal.detail  # the judge reads the quality back
    assert proposal.test is not None and proposal.test.cases is not None
    assert proposal.test.cases.fixed == search.cases


IMPOSSIBLE = """\
tests:
  - description: mentions a zebra crossing
    vars: {topic: tides}
    stage: draft
    assert: [{type: icontains, value: zebra crossing}]
  - description: mentions a zebra crossing again
    vars: {topic: waves}
    stage: draft
    assert: [{type: icontains, value: zebra crossing}]
repeat: 2
"""


async def test_a_search_that_makes_nothing_new_stops_with_no_candidate_and_proposes_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    # A budget for 25 candidates: what stops it is that the refiner runs out of new ideas.
    result = await _reflective(client, task_queue, tmp_path, "impossible", IMPOSSIBLE, 100)
    search = result.search
    assert search is not None, result.detail
    assert search.stop_reason == "no_candidate", search.model_dump_json()
    assert search.spent_runs == 4 * search.tried <= search.budget_runs
    # Nothing passes any case: the frontier is the current spec, so the search's own
    # candidates (rewordings that carry no lesson) are never verified.
    assert search.frontier == ["current"]
    assert all(m.scores == [0.0, 0.0] for m in search.members)
    searched = [m.changes for m in search.members if m.origin == "reflected"]
    assert searched and all(p.changes not in searched for p in result.proposals)
    # What the first wave's refiner read off the transcripts (the hedging lesson) is verified
    # on the paired HQS on its own: the cases can block a change, never verify one.
    assert all("without hedging" in str(c.new) for p in result.proposals for c in p.changes), (
        result.detail
    )
    assert "stopped: no_candidate" in result.detail
