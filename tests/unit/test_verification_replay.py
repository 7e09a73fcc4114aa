"""What verification runs replay and how they are scored (issue 25, item 4), pure: a run in
which a gate was rejected is never replayed by any loop's input selection, and a paired
comparison scores both sides over the stages both executed, so stopping at a gate (or not)
cannot make a version look better."""

from __future__ import annotations

from typing import Any

import pytest

from activities.learn import recent_inputs
from armature_temporal.finetune.models import Example
from armature_temporal.finetune.verify import heldout_inputs
from armature_temporal.improve.diagnose import diagnose
from armature_temporal.improve.replay import left_out, rejected, replay_inputs
from armature_temporal.runtime.hqs import not_executed, run_hqs
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.views.report import RunTrace
from tests.fakes import plan_from
from tests.unit.test_improve_core import record

PLAN = plan_from("""\
name: replayed
inputs: {type: object, properties: {ticket: {type: string}}}
stages:
  - {id: draft, role: {name: D, description: "{{ inputs.ticket }}"}}
  - {id: approve, depends_on: [draft], gate: {type: human}}
  - {id: after, depends_on: [approve], role: {name: A, description: "{{ draft.content }}"}}
  - {id: review, depends_on: [after], role: {name: R, type: judge, description: x}}
""")


def gate(stage: str, decision: str, by: str = "alice") -> TraceRecord:
    return record("gate", stage_id=stage, status=decision, data={"decision": decision, "by": by})


def run(ticket: str, *records: TraceRecord, status: str = "completed", minute: int = 0) -> RunTrace:
    rid = f"run-{ticket}"
    chain = [record("run_start", data={"inputs": {"ticket": ticket}}), *records]
    chain.append(record("run_end", status=status))
    return RunTrace(
        run_id=rid,
        spec_name=PLAN.name,
        spec_hash=PLAN.spec_hash,
        status=status,
        started_at=f"2025-01-01T00:{minute:02d}:00+00:00",
        finished_at=f"2025-01-01T00:{minute:02d}:30+00:00",
        records=[r.model_copy(update={"run_id": rid, "seq": i}) for i, r in enumerate(chain)],
    )


def history() -> list[RunTrace]:
    """Four approved runs and, newest, three a gate rejected: at the stage gate (the run
    ended rejected), at a tool approval (the run went on and completed), and by a gate's
    timeout (on_timeout: reject)."""
    approved = [run(f"ok {i}", gate("approve", "approve"), minute=i) for i in range(4)]
    turned_down = [
        run("secret stage gate", gate("approve", "reject"), status="rejected", minute=10),
        run("secret tool call", gate("draft#1", "reject"), gate("approve", "approve"), minute=11),
        run("secret timeout", gate("approve", "reject", by="timeout"), minute=12),
    ]
    return approved + turned_down


OK = {f"ok {i}" for i in range(4)}


def test_a_run_with_any_rejected_gate_is_rejected_and_its_inputs_are_never_replayed() -> None:
    runs = history()
    assert [rejected(r) for r in runs] == [False] * 4 + [True] * 3
    assert [replay_inputs(r) for r in runs[4:]] == [None, None, None]
    assert replay_inputs(runs[0]) == {"ticket": "ok 0"}


def test_improve_and_optimize_sample_no_input_of_a_rejected_run() -> None:
    sampled = diagnose(PLAN, history()).sample_inputs
    assert {i["ticket"] for i in sampled} == OK
    assert diagnose(PLAN, history()).runs == 7  # still diagnosed: only never replayed


def test_memory_ci_replays_no_input_of_a_rejected_run() -> None:
    assert {i["ticket"] for i in recent_inputs(history(), 20)} == OK


def test_finetune_pairs_replay_no_input_of_a_rejected_run() -> None:
    runs = {r.run_id: r for r in history()}
    examples = [
        Example(messages=[{"role": "user", "content": rid}], reply="x", run_id=rid, stage="draft")
        for rid in runs
    ]
    # Everything held out (eval_share 1 would train on nothing; 0.99 keeps one training row).
    held = heldout_inputs(examples, 0.99, lambda rid: replay_inputs(runs[rid]))
    assert held and {i["ticket"] for i in held} <= OK


# --- scoring: the stages both sides executed ---------------------------------------------------


def attempt(stage: str, valid: bool, n: int = 1, role_type: str = "worker") -> TraceRecord:
    return record(
        "attempt", stage_id=stage, attempt=n, role_type=role_type, output_valid=valid, tier="t"
    )


def stage(stage_id: str, status: str = "completed", **fields: Any) -> TraceRecord:
    return record("stage", stage_id=stage_id, status=status, role_type="worker", **fields)


def held(stage_id: str, at: str = "approve", role_type: str | None = "worker") -> TraceRecord:
    return record(
        "stage",
        stage_id=stage_id,
        status="skipped",
        error_type="verification_gate",
        role_type=role_type,
        data={"verification_gate": at},
    )


def verification_run(*records: TraceRecord, status: str = "completed") -> list[TraceRecord]:
    return [record("run_start"), *records, record("run_end", status=status, latency_ms=10.0)]


# The draft is valid at its second try in every version, so HQS has room to move.
DRAFT = [attempt("draft", False), attempt("draft", True, 2), stage("draft", attempt=2)]
#: The spec as it is: the run stops at the gate; after and review are not executed.
STOPPED = verification_run(
    *DRAFT, held("approve", role_type=None), held("after"), held("review", role_type="judge")
)
#: A version without the gate (or with after moved before it): after and its judge run well.
PAST_THE_GATE = verification_run(
    *DRAFT,
    attempt("after", True),
    stage("after"),
    attempt("review", True, role_type="judge"),
    record("stage", stage_id="review", status="completed", role_type="judge", judge_score=1.0),
)
#: The same, but after fails, and with it the run.
FAILED_PAST_THE_GATE = verification_run(
    *DRAFT,
    attempt("after", False),
    stage("after", status="failed", error_type="output_invalid"),
    status="failed",
)


def test_the_stages_after_a_held_gate_are_not_executed_and_not_scored() -> None:
    assert not_executed(STOPPED) == {"after", "review"}  # the gate itself ran up to its gate
    scored = run_hqs(STOPPED, None)
    assert scored.components == {"success": 1.0, "output_valid": 0.5, "happy_path": 0.0}


def test_a_gated_llm_stage_that_ran_first_time_is_on_the_happy_path() -> None:
    gated = verification_run(attempt("draft", True), held("draft", at="draft"))
    assert not_executed(gated) == frozenset()
    assert run_hqs(gated, None).components["happy_path"] == 1.0


@pytest.mark.parametrize("other", [PAST_THE_GATE, FAILED_PAST_THE_GATE], ids=["good", "failed"])
def test_a_version_that_runs_past_the_gate_gains_and_loses_nothing_by_it(
    other: list[TraceRecord],
) -> None:
    alone = run_hqs(other, None).hqs
    assert alone != run_hqs(STOPPED, None).hqs  # scored alone, the extra stages would count
    (skip,) = left_out([[STOPPED], [other]])
    assert skip == {"after", "review"}
    assert run_hqs(other, None, left_out=skip) == run_hqs(STOPPED, None, left_out=skip)


def test_pairs_are_left_out_index_by_index() -> None:
    skips = left_out([[STOPPED, PAST_THE_GATE], [PAST_THE_GATE, PAST_THE_GATE]])
    assert skips == [frozenset({"after", "review"}), frozenset()]
