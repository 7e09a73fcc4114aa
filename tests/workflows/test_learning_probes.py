"""Memory admission end to end (issue #25, item 11), on a real Temporal dev server and store
(quarantine is not admission, in runs: tests/workflows/test_lessons.py).

- The twelve review probes, distilled by a learning round (the simulated distiller states a
  pitfall's lesson, and here the pitfalls' lessons are the probes): none admitted, every one
  rejected by the scan with its findings; a probe that waited quarantined under the older
  scanner is rejected when the round screens the memory again, and never replayed.
- A lesson aimed at the judge that the scan lets through (it mentions the judge, addresses
  no one) cannot raise its own judged score: the simulator declares a judge reads only the
  latent quality of what it judges, the paired replays score exactly the same, and memory
  CI rejects it with the figures.
"""

from __future__ import annotations

import pytest
from temporalio.client import Client

from armature_temporal.commands.learn import render_learn
from armature_temporal.experience import admit, get_embedder
from armature_temporal.experience.learning import LearnInput, LearnResult
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import heuristic, plan_from, start
from tests.lesson_probes import PASSED_BEFORE, PROBES
from worker import build_worker
from workflows.learn import LEARN_WORKFLOW

pytestmark = pytest.mark.asyncio(loop_scope="session")
NOW = "2026-12-01T00:00:00+00:00"
JUDGE_AIMED = "The judge stage rewards concise answers; keep replies short."


def put(spec_name: str, text: str, status: str, stage: str | None = "answer") -> str:
    """A heuristic stored as it is (no scan): what an older scanner left, or a person."""
    h = heuristic(spec_name, text, status, stage)
    return TraceStore().add_heuristic(h, by="person:test", reason="test").id


def attempts(run_id: str, stage: str) -> list[TraceRecord]:
    return [r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == stage]


def system_of(record: TraceRecord) -> str:
    return str(record.data["messages"][0]["content"])


def probe_spec() -> str:
    """A writer whose declared pitfalls have the review's probes as their lessons, so the
    simulated distiller states every probe once it has seen the symptoms."""
    pitfalls = "\n".join(
        f"        - {{id: p{i}, penalty: 0.01, rate: 1.0, symptom: 'Symptom {i} showed.', "
        f"lesson: {_yaml(text)}}}"
        for i, (text, _, _) in enumerate(PROBES)
    )
    return f"""\
name: probes
model_tiers:
  small: {{provider: simulate, valid_rate: 1.0, quality: 0.7}}
  frontier: {{provider: simulate, valid_rate: 1.0, quality: 0.95}}
inputs:
  type: object
  properties: {{topic: {{type: string}}}}
  required: [topic]
experience: {{verify_runs: 4, embedding_model: lexical}}
stages:
  - id: write
    role: {{name: Writer, model_tier: small, description: "Write about {{{{ inputs.topic }}}}."}}
    simulate:
      pitfalls:
{pitfalls}
  - id: review
    depends_on: [write]
    role: {{name: Editor, type: judge, model_tier: frontier, description: "Score it 0 to 1."}}
"""


def _yaml(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string is a YAML flow scalar


async def test_a_learning_round_admits_none_of_the_probes(client: Client, task_queue: str) -> None:
    store = TraceStore(database_url())
    spec_text = probe_spec()
    plan = plan_from(spec_text)
    # Left quarantined by the older scanner (it passed then): screened again, never replayed.
    old = put("probes", PROBES[PASSED_BEFORE - 1][0] + " Always.", "quarantined", stage="write")
    # Mentions the judge, addresses no one: the scan lets it through, memory CI measures it.
    aimed = admit(
        store,
        spec_name="probes",
        stage_id="write",
        text=JUDGE_AIMED,
        kind="strategic",
        source="person",
        provenance=[],
        by="person:test",
        embedder=get_embedder("lexical"),
        now=NOW,
    )
    assert aimed.outcome == "quarantined"
    async with build_worker(client, task_queue):
        before = []
        for i in range(4):
            handle = await start(client, plan, task_queue, {"topic": f"t{i}"}, f"probes-{i}")
            before.append((await handle.result()).run_id)
        result = await client.execute_workflow(
            LEARN_WORKFLOW,
            LearnInput(spec_text=spec_text, spec_path="probes.yaml", max_tests=4),
            id="learn-probes",
            task_queue=task_queue,
            result_type=LearnResult,
            execution_timeout=None,
        )
        after = await start(client, plan, task_queue, {"topic": "t0"}, "probes-after")
        await after.result()
    assert result.status == "learned", result.detail
    # 12 probes distilled, 0 admitted: each rejected by the scan, never quarantined.
    by_text = {a.text: a for a in result.admitted}
    for text, form, category in PROBES:
        got = by_text[text]
        assert got.outcome == "rejected", (form, text)
        assert any(f.startswith(category) for f in got.findings), (form, got.findings)
        h = store.heuristic(got.heuristic_id)
        assert h is not None and h.status == "rejected"
        assert [e.to_status for e in store.heuristic_events(h.id)] == ["candidate", "rejected"]
    # The old waiting probe: rejected by today's scan before the replays.
    assert [(r.heuristic_id, r.status) for r in result.rescreened] == [(old, "rejected")]
    shown = "\n".join(render_learn(result))
    assert f"{old}  rejected (screened again)" in shown and "scan: prompt_injection" in shown
    decided = {d.heuristic_id: d for d in result.decisions}
    probe_ids = {by_text[text].heuristic_id for text, _, _ in PROBES}
    assert old not in decided and not probe_ids & set(decided)
    # The judge-aimed lesson: replayed, exactly no change, rejected with the evidence.
    verdict = decided[aimed.heuristic.id]
    assert verdict.verdict == "rejected"
    assert verdict.figures["delta"] == 0.0 and verdict.figures["n"] == 4
    assert verdict.figures["candidate_hqs"] == verdict.figures["baseline_hqs"]
    event = store.heuristic_events(aimed.heuristic.id)[-1]
    assert (event.by, event.to_status) == ("memory-ci", "rejected")
    assert event.figures["candidate_runs"] == verdict.figures["candidate_runs"]
    # No prompt ever carried a probe: not the replays, not a run after the round.
    for run_id in [*verdict.figures["baseline_runs"], *verdict.figures["candidate_runs"]]:
        for record in attempts(run_id, "write"):
            assert not any(text in system_of(record) for text, _, _ in PROBES)
    final = system_of(attempts("probes-after", "write")[0])
    assert not any(text in final for text, _, _ in PROBES) and JUDGE_AIMED not in final
