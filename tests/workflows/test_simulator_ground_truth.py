"""The simulate provider's declared world, end to end on a real Temporal server: a judge scores
the output it judges, so it can teach a bandit; noise is seeded by inputs and replicate."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.service.client import prepare_inputs, start_run
from armature_temporal.store import TraceStore
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

THREE_ARMS = """\
name: graded
inputs:
  type: object
  properties:
    topic: {type: string}
  required: [topic]
model_tiers:
  weak: {provider: simulate, quality: 0.3}
  fair: {provider: simulate, quality: 0.5}
  good: {provider: simulate, quality: 0.8}
  judge: {provider: simulate, quality: 0.9}
stages:
  - id: answer
    role: {name: A, description: "Answer about {{ topic }}.", model_tier: weak}
    arms:
      - {arm_id: weak, model_tier: weak}
      - {arm_id: fair, model_tier: fair}
      - {arm_id: good, model_tier: good}
  - id: grade
    depends_on: [answer]
    role: {name: G, type: judge, description: "Grade: {{ answer.content }}", model_tier: judge}
"""

SEEDED = """\
name: seeded
inputs:
  type: object
  properties:
    topic: {type: string}
model_tiers:
  t: {provider: simulate, quality: 0.6}
stages:
  - id: s
    role: {name: S, description: "About {{ topic }}.", model_tier: t}
"""


def _pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return cov / (sx * sy)


async def test_a_judge_rewarded_bandit_finds_the_best_of_three_arms(
    client: Client, task_queue: str, armature_home: Path
) -> None:
    plan = plan_from(THREE_ARMS)
    run_ids = [f"graded-{i}" for i in range(90)]
    async with build_worker(client, task_queue):
        for batch in range(9):
            handles = [
                await start(client, plan, task_queue, {"topic": f"case {i}"}, run_id=run_ids[i])
                for i in range(batch * 10, batch * 10 + 10)
            ]
            await asyncio.gather(*(h.result() for h in handles))
    store = TraceStore()
    chosen, latent, scores = [], [], []
    for run_id in run_ids:
        records = store.records(run_id)
        stage = next(r for r in records if r.kind == "stage" and r.stage_id == "answer")
        chosen.append(stage.arm_id)
        attempt = next(r for r in records if r.kind == "attempt" and r.stage_id == "answer")
        graded = next(r for r in records if r.kind == "attempt" and r.stage_id == "grade")
        latent.append(attempt.data["simulated_quality"])
        scores.append(graded.output["score"])
    late = chosen[60:]
    assert late.count("good") / len(late) >= 0.8, chosen
    # The judge scores the output it judged (declared noise sd 0.25 * (1 - 0.9) + 0.02).
    assert _pearson(latent, scores) > 0.9
    assert max(abs(s - q) for s, q in zip(scores, latent, strict=True)) < 0.25


async def test_noise_follows_inputs_and_replicate_not_the_run_id(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(SEEDED)

    async def run(run_id: str, topic: str, replicate: int) -> tuple[str, float]:
        handle = await start_run(
            client,
            plan,
            prepare_inputs(plan, {"topic": topic}),
            task_queue=task_queue,
            run_id=run_id,
            replicate=replicate,
        )
        result = await handle.result()
        attempt = next(
            r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == "s"
        )
        return result.outputs["s"]["content"], attempt.data["simulated_quality"]

    async with build_worker(client, task_queue):
        first = await run("seeded-a", "tides", 0)
        again = await run("seeded-b", "tides", 0)
        other = await run("seeded-c", "tides", 1)
        moved = await run("seeded-d", "reefs", 0)
    assert first == again  # another run id, same inputs and replicate: the same draw
    assert other[1] != first[1]  # another replicate: other noise
    assert moved[1] != first[1]  # other inputs: other noise


PITFALL = """\
name: invoices
model_tiers:
  t: {provider: simulate, quality: 0.7}
stages:
  - id: total
    role: {name: T, description: "Total the invoice.", model_tier: t}
    simulate:
      pitfalls:
        - {id: tax, penalty: 0.4, symptom: "The total leaves out sales tax",
           lesson: "Always add sales tax to the total.", rate: 1.0}
"""


async def test_a_stage_pitfall_shows_in_the_run_and_its_lesson_avoids_it(
    client: Client, task_queue: str
) -> None:
    plain = plan_from(PITFALL)
    taught = plan_from(
        PITFALL.replace(
            "Total the invoice.", "Total the invoice. Always add sales tax to the total."
        )
    )
    async with build_worker(client, task_queue):
        fell = await (await start(client, plain, task_queue, run_id="pitfall-1")).result()
        avoided = await (await start(client, taught, task_queue, run_id="pitfall-2")).result()
    assert "The total leaves out sales tax" in fell.outputs["total"]["content"]
    assert "The total leaves out sales tax" not in avoided.outputs["total"]["content"]

    def quality(run_id: str) -> float:
        return next(
            r.data["simulated_quality"]
            for r in TraceStore().records(run_id)
            if r.kind == "attempt" and r.stage_id == "total"
        )

    attempts = {
        run_id: next(
            r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == "total"
        )
        for run_id in ("pitfall-1", "pitfall-2")
    }
    assert attempts["pitfall-1"].data["pitfalls_hit"] == ["tax"]
    assert "pitfalls_hit" not in attempts["pitfall-2"].data
    # Same inputs, replicate 0: the same draw, less the penalty where the run fell in.
    assert quality("pitfall-2") - quality("pitfall-1") == pytest.approx(0.4)


EVALUATED = """\
name: evaluated-world
inputs:
  type: object
  properties:
    topic: {type: string}
  required: [topic]
model_tiers:
  small: {provider: simulate, quality: 0.5}
  frontier: {provider: simulate, quality: 0.9}
stages:
  - id: draft
    role: {name: W, description: "Write about {{ topic }}.", model_tier: small}
    evaluate: ["is accurate", "is concise"]
    simulate:
      pitfalls:
        - {id: vague, penalty: 0.3, symptom: "Some say this and some say that.",
           lesson: "Be specific.", rate: 0.5}
"""


async def test_an_evaluate_judge_scores_the_latent_quality_of_the_stage_it_evaluates(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(EVALUATED)
    async with build_worker(client, task_queue):
        results = [
            await (
                await start(
                    client, plan, task_queue, run_id=f"evaluated-{i}", inputs={"topic": f"t{i}"}
                )
            ).result()
            for i in range(16)
        ]
    latent: list[float] = []
    judged: list[float] = []
    for i, result in enumerate(results):
        evaluation = result.stages["draft"].evaluation
        assert evaluation is not None and "error" not in evaluation
        quality = next(
            r.data["simulated_quality"]
            for r in TraceStore().records(f"evaluated-{i}")
            if r.kind == "attempt" and r.stage_id == "draft"
        )
        latent.append(quality)
        judged.append(evaluation["mean"])
        # Each criterion is the judged quality plus the frontier judge's declared noise
        # (sd 0.25 * 0.1 + 0.02 = 0.045): never far from it.
        assert all(abs(s - quality) < 0.25 for s in evaluation["scores"].values())
    assert max(latent) - min(latent) > 0.2  # the pitfall spreads the latent quality
    assert _pearson(latent, judged) > 0.9
