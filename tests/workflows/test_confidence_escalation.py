"""Escalation on low confidence, on a real Temporal dev server with the simulate provider.

The spec's tiers hedge at declared rates (small 0.5, frontier 0.05). The same 30 inputs run as
version 1 (no min_confidence) and version 2 (``confidence: {min: {worker: 0.6}}``): in version
2 hedged outputs are refused (``low_confidence``) and escalate to frontier, and the hedging rate
of the final outputs — what ``armature dashboard SPEC --json`` shows per version — drops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client

from activities.llm import llm_call
from armature_temporal.runtime.confidence import Confidence
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult
from armature_temporal.store import TraceStore
from armature_temporal.views.calibration import final_attempts
from tests.fakes import plan_from, run_armature, start
from worker import ACTIVITIES, build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: hedgy
version: "{version}"
inputs: {{type: object, properties: {{question: {{type: string}}}}, required: [question]}}
model_tiers:
  small: {{provider: simulate, hedge_rate: 0.5}}
  frontier: {{provider: simulate, hedge_rate: 0.05}}
{confidence}stages:
  - id: answer
    role: {{name: Answerer, description: "Answer: {{{{ inputs.question }}}}", model_tier: small}}
    on_fail: {{escalate: true}}
  - id: review
    depends_on: [answer]
    role:
      name: Reviewer
      type: judge
      model_tier: frontier
      description: "Score this answer: {{{{ answer.content }}}}"
"""
INPUTS = 30


async def run_version(client: Client, task_queue: str, version: int, confidence: str) -> list[str]:
    plan = plan_from(SPEC.format(version=version, confidence=confidence))
    run_ids = []
    async with build_worker(client, task_queue):
        for i in range(INPUTS):
            run_id = f"hedgy-v{version}-{i}"
            handle = await start(
                client, plan, task_queue, {"question": f"what moves tide {i}?"}, run_id=run_id
            )
            result = await handle.result()
            assert result.state == "completed"
            run_ids.append(run_id)
    return run_ids


#: The ends of the simulator's hedging sentences (runtime/simulate/_confidence.py): its own
#: declaration of which outputs hedged, which the detector behind the dashboard never sees.
HEDGE_TAILS = (
    "so this may be wrong.",
    "but I could be mistaken about",
    "It is hard to say without more information.",
    "though I cannot be certain.",
    "you may want to double-check",
)


def hedged(record: Any) -> bool:
    text = json.dumps(record.output)
    return any(tail in text for tail in HEDGE_TAILS)


async def test_hedged_outputs_escalate_and_the_final_hedging_rate_drops(
    client: Client, task_queue: str, armature_home: Path
) -> None:
    plain = await run_version(client, task_queue, 1, "")
    strict = await run_version(client, task_queue, 2, "confidence: {min: {worker: 0.6}}\n")
    store = TraceStore()

    def answers(run_id: str) -> list[Any]:
        return [r for r in store.records(run_id) if r.kind == "attempt" and r.stage_id == "answer"]

    # Without a threshold: one attempt each, on small; nothing is refused.
    for run_id in plain:
        (only,) = answers(run_id)
        assert only.tier == "small" and only.error_type is None
    # With one: every refused attempt is a valid output below 0.6, traced low_confidence, and
    # the next attempt is on the next tier up.
    refused = 0
    for run_id in strict:
        attempts = answers(run_id)
        for k, a in enumerate(attempts):
            if a.error_type == "low_confidence":
                refused += 1
                assert a.output_valid is True and a.data["confidence"] < 0.6
                assert a.data["min_confidence"] == 0.6
                if k + 1 < len(attempts):
                    assert (a.tier, attempts[k + 1].tier) == ("small", "frontier")
        # The same inputs: the first attempt is the same draw in both versions.
        first = attempts[0]
        twin = answers(run_id.replace("-v2-", "-v1-"))[0]
        assert first.output == twin.output
    assert refused >= INPUTS // 4  # about half of small's outputs hedge
    # By the simulator's own declaration: the share of final outputs that hedge drops.
    finals_plain = [final_attempts(store.records(r))["answer"] for r in plain]
    finals_strict = [final_attempts(store.records(r))["answer"] for r in strict]
    truly_plain = sum(map(hedged, finals_plain))
    truly_strict = sum(map(hedged, finals_strict))
    assert truly_plain >= INPUTS // 4 and truly_strict <= truly_plain // 2, (
        truly_plain,
        truly_strict,
    )

    shown = await run_armature(
        "dashboard",
        "hedgy",
        "--json",
        env={"ARMATURE_HOME": str(armature_home), "ARMATURE_DB_URL": ""},
    )
    assert shown.returncode == 0, shown.stderr
    board = json.loads(shown.stdout)
    v1, v2 = board["versions"]
    assert (v1["spec_version"], v2["spec_version"]) == ("1", "2")
    cal1 = next(c for c in v1["calibration"] if c["stage_id"] == "answer")
    cal2 = next(c for c in v2["calibration"] if c["stage_id"] == "answer")
    assert cal1["final_outputs"] == cal2["final_outputs"] == INPUTS
    assert cal1["min_confidence"] is None and cal2["min_confidence"] == 0.6
    assert cal2["low_confidence_attempts"] == refused
    assert v2["taxonomy"]["low_confidence"] == refused
    # The hedging rate of the final outputs drops, on the same inputs.
    assert cal1["hedging_rate"] >= 0.3
    assert cal2["hedging_rate"] <= cal1["hedging_rate"] - 0.2
    # Both are calibrated against the judge.
    assert cal1["judged"] == cal2["judged"] == INPUTS and cal1["outcome"] == "judge"
    assert cal1["brier"] is not None and sum(b["outputs"] for b in cal1["bins"]) == INPUTS
    text = await run_armature(
        "dashboard",
        "hedgy",
        env={"ARMATURE_HOME": str(armature_home), "ARMATURE_DB_URL": "", "COLUMNS": "200"},
    )
    assert text.returncode == 0, text.stderr
    assert "confidence calibration" in text.stdout and "Brier" in text.stdout


# --- the attempt loop, with declared confidences -------------------------------------------

DECLARED = """\
name: declared
model_tiers:
  small: {provider: simulate}
  medium: {provider: simulate}
  frontier: {provider: simulate}
stages:
  - id: answer
    role: {name: A, description: "confidence %s", model_tier: small}
%s"""


@activity.defn(name="llm_call")
async def fake_llm_call_declared_confidence(inp: LLMCallInput) -> LLMCallResult:
    """The real llm_call, its confidence replaced by the one the prompt declares for the tier
    and attempt (``small=0.3,0.5 frontier=0.9``: small's first attempt 0.3, later ones 0.5)."""
    result = await llm_call(inp)
    declared = dict(part.split("=") for part in inp.prompt_template.split()[1:])
    values = [float(v) for v in declared[inp.tier.name].split(",")]
    value = values[min(len(values), inp.attempt) - 1]  # inp.attempt: the stage's, from 1
    return result.model_copy(update={"confidence": Confidence(value=value, source="stated")})


async def run_declared(
    client: Client, task_queue: str, confidences: str, on_fail: str
) -> tuple[Any, list[Any]]:
    plan = plan_from(DECLARED % (confidences, on_fail))
    activities = [fake_llm_call_declared_confidence, *(a for a in ACTIVITIES if a is not llm_call)]
    async with build_worker(client, task_queue, activities=activities):
        handle = await start(client, plan, task_queue, {})
        result = await handle.result()
    records = TraceStore().records(result.run_id)
    return result, [r for r in records if r.kind == "attempt"]


async def test_a_low_confidence_output_escalates_up_the_ladder_like_an_invalid_one(
    client: Client, task_queue: str
) -> None:
    result, attempts = await run_declared(
        client,
        task_queue,
        "small=0.3 medium=0.5 frontier=0.9",
        "    min_confidence: 0.6\n    on_fail: {escalate: true}\n",
    )
    assert result.state == "completed"
    assert [(a.tier, a.error_type) for a in attempts] == [
        ("small", "low_confidence"),
        ("medium", "low_confidence"),
        ("frontier", None),
    ]
    assert "below the stage's min_confidence 0.6" in (attempts[0].error or "")
    stage = result.stages["answer"]
    assert (stage.tier, stage.escalated, stage.attempts) == ("frontier", True, 3)
    assert stage.output == attempts[-1].output


async def test_when_every_output_is_unsure_the_most_confident_stands(
    client: Client, task_queue: str
) -> None:
    result, attempts = await run_declared(
        client,
        task_queue,
        "small=0.2,0.4 medium=0.1 frontier=0.4",
        "    min_confidence: 0.6\n    on_fail: {escalate: true, loop: {max: 1}}\n",
    )
    assert result.state == "completed"  # retries spent: the stage does not fail
    assert [(a.tier, a.data["confidence"]) for a in attempts] == [
        ("small", 0.2),
        ("small", 0.4),
        ("medium", 0.1),
        ("medium", 0.1),
        ("frontier", 0.4),
        ("frontier", 0.4),
    ]
    assert all(a.error_type == "low_confidence" for a in attempts)
    # The earliest of the most confident (small's second attempt), as the dashboard reads it.
    stage = result.stages["answer"]
    assert stage.output == attempts[1].output
    assert (stage.tier, stage.escalated, stage.attempts) == ("small", False, 6)
    assert final_attempts(attempts)["answer"].seq == attempts[1].seq


async def test_without_a_threshold_confidence_changes_nothing(
    client: Client, task_queue: str
) -> None:
    result, attempts = await run_declared(
        client, task_queue, "small=0.1 frontier=0.9", "    on_fail: {escalate: true}\n"
    )
    assert [(a.tier, a.error_type) for a in attempts] == [("small", None)]
    assert "min_confidence" not in attempts[0].data
    assert result.stages["answer"].output == attempts[0].output
