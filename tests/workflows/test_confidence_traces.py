"""Every LLM attempt record carries a confidence in [0, 1] and its source (real Temporal)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.store import TraceStore
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: confident
model_tiers:
  shaky: {provider: simulate, valid_rate: 0.5, hedge_rate: 0.5}
  sure: {provider: simulate}
  tokens: {provider: simulate, logprobs: true}
stages:
  - id: text
    role: {name: T, description: "Say something about tides.", model_tier: shaky}
  - id: stated
    role: {name: S, description: "Rate tides.", model_tier: sure}
    output_mode: json
    output_schema:
      type: object
      properties:
        answer: {type: string}
        confidence: {type: integer, minimum: 0, maximum: 100}
      required: [answer, confidence]
  - id: retried
    role: {name: R, description: "List tides.", model_tier: shaky}
    output_mode: json
    output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    on_fail: {loop: {max: 4}}
  - id: scored
    role: {name: L, description: "Name a tide.", model_tier: tokens}
"""


async def test_every_attempt_record_carries_confidence_and_source(
    client: Client, task_queue: str, armature_home: Path
) -> None:
    plan = plan_from(SPEC)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue, {}, run_id="confident-1")
        await handle.result()
    attempts = [r for r in TraceStore().records("confident-1") if r.kind == "attempt"]
    assert {r.stage_id for r in attempts} == {"text", "stated", "retried", "scored"}
    for record in attempts:
        assert 0.0 <= record.data["confidence"] <= 1.0, record
        assert record.data["confidence_source"] in ("logprobs", "stated", "hedging")
    by_stage = {r.stage_id: r for r in attempts}
    assert by_stage["stated"].data["confidence_source"] == "stated"
    assert by_stage["scored"].data["confidence_source"] == "logprobs"
    assert by_stage["text"].data["confidence_source"] == "hedging"
    # The simulator's ground truth rides along where an output hedged (hedge_rate 0.5).
    hedged = [r for r in attempts if r.data.get("simulated_hedged")]
    assert hedged and all(r.tier == "shaky" for r in hedged)
    assert all(r.data["confidence"] < 0.5 for r in hedged if r.stage_id == "text")
    stated = by_stage["stated"].output["confidence"] / 100
    assert by_stage["stated"].data["confidence"] == pytest.approx(stated)


CACHED = """\
name: confident-cached
model_tiers:
  small: {provider: simulate}
stages:
  - id: answer
    role: {name: A, description: "Answer about tides.", model_tier: small, temperature: 0}
"""


async def test_a_cache_hit_attempt_carries_the_stored_answers_confidence(
    client: Client, task_queue: str, armature_home: Path
) -> None:
    plan = plan_from(CACHED)
    async with build_worker(client, task_queue):
        for run_id in ("cached-1", "cached-2"):
            await (await start(client, plan, task_queue, {}, run_id=run_id)).result()
    (miss,) = [r for r in TraceStore().records("cached-1") if r.kind == "attempt"]
    (hit,) = [r for r in TraceStore().records("cached-2") if r.kind == "attempt"]
    assert hit.data["cache"] == "exact"
    assert hit.data["confidence_source"] == miss.data["confidence_source"] == "hedging"
    assert hit.data["confidence"] == pytest.approx(miss.data["confidence"])
