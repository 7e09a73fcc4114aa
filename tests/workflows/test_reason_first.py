"""Reason before acting (``reason_first``), end to end on a real Temporal server under the
simulate provider: the private reasoning call is in the stage's trace and its cost, raises the
answer's latent quality by the stage's declared ``reasoning_gain``, and no later stage — its
template, its context, its prompt — ever sees the reasoning."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.spec.plan import Plan
from armature_temporal.store import TraceStore
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: reasoned
inputs: {type: object, properties: {topic: {type: string}}, required: [topic]}
model_tiers:
  small: {provider: simulate, quality: 0.5}
  judge: {provider: simulate, quality: 0.9}
stages:
  - id: think
    role: {name: T, description: "Work out the answer about {{ topic }}.", model_tier: small}
    arms:
      - {arm_id: reasoned, reason_first: true}
    simulate: {reasoning_gain: 0.2}
  - id: use
    depends_on: [think]
    role:
      name: U
      model_tier: small
      description: >-
        Use this: {{ think.content }}. Hidden: {{ think._reasoning | default('NONE') }}
        / {{ think.reasoning | default('NONE') }}.
  - id: grade
    depends_on: [think]
    role: {name: G, type: judge, description: "Grade: {{ think.content }}", model_tier: judge}
"""


def _attempt(run_id: str, stage_id: str) -> Any:
    return next(
        r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == stage_id
    )


async def _run(client: Client, task_queue: str, plan: Plan, run_id: str) -> RunResult:
    return await (await start(client, plan, task_queue, {"topic": "tides"}, run_id=run_id)).result()


async def test_reason_first_reasoning_is_private_costed_and_raises_quality(
    client: Client, task_queue: str
) -> None:
    reasoned = plan_from(SPEC)
    plain = plan_from(SPEC.replace("reason_first: true", "reason_first: false"))
    # reason_first on the role itself, no arms: the same private reasoning call.
    role = plan_from(
        SPEC.replace("model_tier: small}", "model_tier: small, reason_first: true}", 1).replace(
            "    arms:\n      - {arm_id: reasoned, reason_first: true}\n", ""
        )
    )
    think = role.stage("think")
    assert think.role is not None and think.role.reasoning is not None and not think.arms
    async with build_worker(client, task_queue):
        result = await _run(client, task_queue, reasoned, "rlp-on")
        await _run(client, task_queue, plain, "rlp-off")
        await _run(client, task_queue, role, "rlp-role")
    on, off = _attempt("rlp-on", "think"), _attempt("rlp-off", "think")
    assert _attempt("rlp-role", "think").data["reasoning"]["private"] is True
    private = on.data["reasoning"]
    assert private["private"] is True and private["tier"] == "small"
    text = private["text"]
    assert text.startswith("[simulated]") and len(text) > 40
    assert "reasoning" not in off.data
    # The answer's prompt carried it; its cost counts the reasoning call's tokens.
    assert text in json.dumps(on.data["messages"])
    reasoning_tokens = private["prompt_tokens"] + private["completion_tokens"]
    assert on.prompt_tokens + on.completion_tokens >= (
        off.prompt_tokens + off.completion_tokens + reasoning_tokens
    )
    # Same inputs, same draw: the declared gain is the whole difference.
    base = off.data["simulated_quality"]
    assert on.data["simulated_quality"] - base == pytest.approx(min(0.2, 1 - base))
    # Downstream never sees it: not in outputs, not in templates, not in any later prompt.
    assert text not in json.dumps(result.outputs)
    assert "Hidden: NONE / NONE." in json.dumps(_attempt("rlp-on", "use").data["messages"])
    for stage_id in ("use", "grade"):
        assert text not in json.dumps(_attempt("rlp-on", stage_id).data)
    stage = next(
        r for r in TraceStore().records("rlp-on") if r.kind == "stage" and r.stage_id == "think"
    )
    assert text not in json.dumps(stage.output) and stage.arm_id == "reasoned"


async def test_the_bandit_prefers_reasoning_only_where_it_pays_for_its_tokens(
    client: Client, task_queue: str
) -> None:
    """benchmarks/rlp.py's two tasks, 40 runs each: where reasoning raises latent quality by
    0.25 its arm ends with the higher posterior mean and most of the picks; where it raises
    nothing, the cost (reward_cost_per_1k_tokens) ranks it below the plain arm."""
    from activities.bandit import runtime_for
    from benchmarks.rlp import spec_text

    means: dict[str, dict[str, float]] = {}
    picks: dict[str, int] = {}
    async with build_worker(client, task_queue):
        for task in ("multistep", "lookup"):
            plan = plan_from(spec_text(task, "bandit"))
            for batch in range(8):
                handles = [
                    await start(
                        client,
                        plan,
                        task_queue,
                        {"problem": f"case {i}"},
                        run_id=f"rlp-{task}-{i}",
                    )
                    for i in range(batch * 5, batch * 5 + 5)
                ]
                for h in handles:
                    await h.result()
            arms = runtime_for(f"{plan.name}:solve").arms()
            means[task] = {a.arm_id: a.mean for a in arms}
            picks[task] = next(a.pulls for a in arms if a.arm_id == "reason")
    assert means["multistep"]["reason"] > means["multistep"]["plain"], means
    assert means["lookup"]["plain"] > means["lookup"]["reason"], means
    assert picks["multistep"] > picks["lookup"], picks
