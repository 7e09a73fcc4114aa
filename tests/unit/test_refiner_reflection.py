"""The refiner's prompt in a frontier search carries the failing cases (GEPA's reflection), and
the simulated refiner states a pitfall's lesson only when a failing case shows its symptom."""

from __future__ import annotations

import json

from armature_temporal.improve.cases import FailingCase
from armature_temporal.improve.models import Diagnosis
from armature_temporal.improve.refine import RefinerHistory, refiner_messages
from armature_temporal.runtime.simulate import simulate_refiner
from armature_temporal.spec.simulation import Pitfall
from tests.fakes import plan_from

SPEC = """\
name: hedgy
model_tiers:
  big: {provider: simulate}
stages:
  - id: draft
    role: {name: R, model_tier: big, description: "Report on {{ inputs.topic }}."}
self_improvement:
  editable_surfaces: [draft.description]
"""
HEDGING = Pitfall(
    id="hedging",
    penalty=0.3,
    rate=1.0,
    symptom="It is hard to say for sure.",
    lesson="State what was observed plainly, without hedging.",
)


def _prompt(output: str) -> str:
    plan = plan_from(SPEC)
    diagnosis = Diagnosis(
        spec_name="hedgy",
        spec_hash=plan.spec_hash,
        runs=0,
        mean_hqs=None,
        stages=[],
        sample_inputs=[],
    )
    failing = [
        FailingCase(
            case=0,
            description="tides reported plainly",
            vars={"topic": "tides"},
            stage="draft",
            output=output,
            assertion="not-icontains",
            reason="output contains 'hard to say for sure'",
        )
    ]
    messages = refiner_messages(
        plan, diagnosis, ["draft.description"], [], RefinerHistory(), [], 1, failing=failing
    )
    return "\n".join(m["content"] for m in messages)


def test_the_prompt_carries_each_failing_case_its_inputs_answer_and_reason() -> None:
    prompt = _prompt("Tides rise. It is hard to say for sure.")
    assert "Failing cases" in prompt and "'tides reported plainly'" in prompt
    assert "Tides rise. It is hard to say for sure." in prompt
    assert "failed not-icontains: output contains 'hard to say for sure'" in prompt
    assert '"topic": "tides"' in prompt


def test_the_simulated_refiner_states_a_lesson_only_when_shown_its_symptom() -> None:
    shown = json.loads(
        simulate_refiner(
            seed="s", prompt=_prompt("It is hard to say for sure."), quality=1.0, pitfalls=[HEDGING]
        )
    )["proposals"]
    assert [(p["stage"], p["surface"]) for p in shown] == [("draft", "description")]
    assert HEDGING.lesson in shown[0]["value"]
    unseen = json.loads(
        simulate_refiner(
            seed="s", prompt=_prompt("Tides rise twice a day."), quality=1.0, pitfalls=[HEDGING]
        )
    )["proposals"]
    assert all(HEDGING.lesson not in str(p["value"]) for p in unseen)
