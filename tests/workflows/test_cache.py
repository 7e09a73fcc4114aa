"""The answer cache in runs (``cache:``), on a real Temporal dev server and trace store: a
repeated deterministic run is served from the exact cache (traced ``cache: exact``, cost 0),
a non-deterministic stage is cached only when it opts in, a paraphrased task is a semantic hit
above the threshold and a different one is not, entries of failed, gate-rejected and low-judged
runs are never served, expired entries are not served, a verify tier that does not confirm a
semantic hit sends the call to the model, verification runs and workers with stage hooks
neither serve nor keep, and runs that miss and hit replay."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError

from activities.llm import llm_call
from armature_temporal.experience.embeddings import local_available
from armature_temporal.runtime.hooks import HookRegistry
from armature_temporal.runtime.models import LLMCallInput, LLMCallResult, RunInput, RunResult
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.spec.compiler import Plan
from armature_temporal.store import TraceStore
from armature_temporal.views import build_dashboard, load_runs
from tests.fakes import assert_replays, plan_from
from worker import ACTIVITIES, build_worker
from workflows.run_spec import WORKFLOW_NAME

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: What the fake provider charges per call, so that saved cost is visible.
PRICE = 0.0125


@activity.defn(name="llm_call")
async def fake_llm_call_priced(inp: LLMCallInput) -> LLMCallResult:
    """The real llm_call (simulate), charging :data:`PRICE` per call."""
    result = await llm_call(inp)
    return result.model_copy(update={"cost_usd": PRICE, "prompt_tokens": 40})


PRICED = [fake_llm_call_priced, *(a for a in ACTIVITIES if a is not llm_call)]


def spec(name: str, role: str = "temperature: 0", cache: str = "", extra: str = "") -> str:
    return f"""\
name: {name}
model_tiers:
  small: {{provider: simulate, quality: 0.8}}
  weak: {{provider: simulate, quality: 0.05}}
  strong: {{provider: simulate, quality: 0.95}}
  broken: {{provider: simulate, valid_rate: 0}}
inputs:
  question: {{type: string}}
stages:
  - id: answer
    role: {{name: A, description: "Answer: {{{{ inputs.question }}}}", model_tier: small, {role}}}
{cache}{extra}"""


async def run(
    client: Client, task_queue: str, plan: Plan, run_id: str, **given: Any
) -> RunResult | None:
    """Run to the end; None when the run failed (a failed or rejected workflow)."""
    async with build_worker(client, task_queue, activities=PRICED):
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            RunInput(plan=plan, **given),
            id=run_id,
            task_queue=task_queue,
            result_type=RunResult,
        )
        try:
            return await asyncio.wait_for(handle.result(), timeout=60)
        except WorkflowFailureError:
            return None


def attempts(run_id: str, stage: str = "answer") -> list[TraceRecord]:
    return [r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == stage]


def ask(question: str) -> dict[str, Any]:
    return {"inputs": {"question": question}}


async def test_a_repeated_deterministic_run_is_served_from_the_exact_cache(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(spec("cache-exact"))
    first = await run(client, task_queue, plan, "cache-exact-1", **ask("What is 2 + 2?"))
    second = await run(client, task_queue, plan, "cache-exact-2", **ask("What is 2 + 2?"))
    assert first is not None and second is not None and second.state == "completed"
    (miss,) = attempts("cache-exact-1")
    (hit,) = attempts("cache-exact-2")
    assert "cache" not in miss.data and miss.cost_usd == PRICE
    assert hit.data["cache"] == "exact" and hit.data["source_run"] == "cache-exact-1"
    assert hit.cost_usd == 0 and hit.prompt_tokens == 0 and hit.completion_tokens == 0
    assert hit.data["saved_cost_usd"] == PRICE and hit.latency_ms > 0
    assert hit.output == miss.output and second.outputs["answer"] == first.outputs["answer"]
    assert hit.inputs_hash == miss.inputs_hash  # the same rendered request
    (entry,) = TraceStore().cache_entries("cache-exact")
    assert entry.status == "servable" and entry.hits == 1 and hit.data["cache_entry"] == entry.id
    # A different question is a different request: the model answers it.
    await run(client, task_queue, plan, "cache-exact-3", **ask("What is 3 + 3?"))
    (other,) = attempts("cache-exact-3")
    assert "cache" not in other.data
    # The dashboard shows the hit and what it saved.
    board = build_dashboard("cache-exact", load_runs(TraceStore(), spec="cache-exact"))
    (version,) = board.versions
    assert version.cache is not None
    assert (version.cache.attempts, version.cache.hits, version.cache.exact) == (3, 1, 1)
    assert version.cache.saved_cost_usd == PRICE and version.cost_usd == 2 * PRICE


async def test_a_non_deterministic_stage_is_cached_only_when_it_opts_in(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(spec("cache-warm", role="temperature: 0.7"))
    for n in (1, 2):
        await run(client, task_queue, plan, f"cache-warm-{n}", **ask("Name a colour."))
    assert "cache" not in attempts("cache-warm-2")[0].data
    assert TraceStore().cache_entries("cache-warm") == []
    opted = plan_from(
        spec("cache-opt", role="temperature: 0.7", cache="    cache: {exact: true}\n")
    )
    for n in (1, 2):
        await run(client, task_queue, opted, f"cache-opt-{n}", **ask("Name a colour."))
    assert attempts("cache-opt-2")[0].data["cache"] == "exact"
    # exact: false turns the default off for a temperature-0 stage.
    off = plan_from(spec("cache-off", cache="    cache: {exact: false}\n"))
    for n in (1, 2):
        await run(client, task_queue, off, f"cache-off-{n}", **ask("Name a colour."))
    assert "cache" not in attempts("cache-off-2")[0].data


SEMANTIC = "    cache: {exact: false, semantic: true}\n"


async def test_a_paraphrase_is_a_semantic_hit_and_a_different_task_is_not(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(spec("cache-sem", cache=SEMANTIC))
    await run(client, task_queue, plan, "cache-sem-1", **ask("How do I reset my password?"))
    await run(client, task_queue, plan, "cache-sem-2", **ask("How can I reset my password?"))
    await run(client, task_queue, plan, "cache-sem-3", **ask("What is the capital of France?"))
    (hit,) = attempts("cache-sem-2")
    assert hit.data["cache"] == "semantic" and hit.data["source_run"] == "cache-sem-1"
    assert 0 < hit.data["similarity"] < 1 and hit.cost_usd == 0
    assert "cache" not in attempts("cache-sem-3")[0].data
    # Above the paraphrase's similarity, the threshold turns the hit into a miss.
    strict = plan_from(spec("cache-strict", cache=SEMANTIC.replace("}", ", threshold: 0.999}")))
    await run(client, task_queue, strict, "cache-strict-1", **ask("How do I reset my password?"))
    await run(client, task_queue, strict, "cache-strict-2", **ask("How can I reset my password?"))
    assert "cache" not in attempts("cache-strict-2")[0].data
    assert TraceStore().cache_entries("cache-strict")[0].status == "servable"
    hits = TraceStore().cache_hits("cache-sem")
    assert [(h["kind"], h["source_run"]) for h in hits] == [("semantic", "cache-sem-1")]
    assert "How can I" in hits[0]["task"] and "How do I" in hits[0]["source_task"]


@pytest.mark.skipif(not local_available(), reason="the pair model reads MiniLM cosines")
async def test_the_classifier_decider_serves_where_the_rule_at_its_threshold_does_not(
    client: Client, task_queue: str
) -> None:
    # The same paraphrase and the same threshold (0.999, above the pair's cosine): the rule
    # misses; the classifier ignores threshold and its model serves it.
    first, again = "How do I reset my password?", "How can I reset my password?"
    for decider in ("rule", "classifier"):
        cache = SEMANTIC.replace("}", f", threshold: 0.999, decider: {decider}}}")
        plan = plan_from(spec(f"cache-{decider}", cache=cache))
        await run(client, task_queue, plan, f"cache-{decider}-1", **ask(first))
        await run(client, task_queue, plan, f"cache-{decider}-2", **ask(again))
    assert "cache" not in attempts("cache-rule-2")[0].data
    (hit,) = attempts("cache-classifier-2")
    assert hit.data["cache"] == "semantic" and hit.data["source_run"] == "cache-classifier-1"
    assert 0.9 < hit.data["similarity"] < 0.999


async def test_a_verify_tier_that_does_not_confirm_sends_the_call_to_the_model(
    client: Client, task_queue: str
) -> None:
    """The simulate judge scores its own tier's quality when it judges no output: a weak
    (0.05) verify tier never confirms, a strong (0.95) one does."""
    for tier, served in (("weak", False), ("strong", True)):
        name = f"cache-verify-{tier}"
        cache = f"    cache: {{exact: false, semantic: true, verify_tier: {tier}}}\n"
        plan = plan_from(spec(name, cache=cache))
        await run(client, task_queue, plan, f"{name}-1", **ask("How do I reset my password?"))
        await run(client, task_queue, plan, f"{name}-2", **ask("How can I reset my password?"))
        (second,) = attempts(f"{name}-2")
        assert ("cache" in second.data) is served, tier
        assert (second.cost_usd == PRICE) is not served


GATE = "    gate: {type: human, timeout: 1s, on_timeout: reject, on_reject: continue}\n"
FAILS = """\
  - id: after
    depends_on: [answer]
    role: {name: B, description: "Check {{ answer.content }}", model_tier: broken}
"""
JUDGED = """\
  - id: grade
    depends_on: [answer]
    role: {name: J, type: judge, description: "Grade {{ answer.content }}", model_tier: strong}
"""


@pytest.mark.parametrize(
    ("case", "role", "extra", "reason"),
    [
        ("failed", "temperature: 0", FAILS, "the run ended failed"),
        ("gated", "temperature: 0", GATE, "rejected at answer"),
        ("judged", "temperature: 0, model_tier: weak", JUDGED, "judge grade scored it"),
    ],
)
async def test_entries_of_failed_rejected_and_low_judged_runs_are_never_served(
    client: Client, task_queue: str, case: str, role: str, extra: str, reason: str
) -> None:
    name = f"cache-{case}"
    text = spec(name, extra=extra).replace("model_tier: small, temperature: 0", role)
    plan = plan_from(text)
    for n in (1, 2):
        await run(client, task_queue, plan, f"{name}-{n}", **ask("What is 2 + 2?"))
    assert attempts(f"{name}-2") and "cache" not in attempts(f"{name}-2")[0].data
    entries = TraceStore().cache_entries(name, stage_id="answer")
    assert entries and {e.status for e in entries} == {"withheld"}
    assert all(reason in (e.reason or "") for e in entries), [e.reason for e in entries]


@pytest.mark.parametrize("cache", ["{ttl: 1ms}", "{exact: false, semantic: true, ttl: 1ms}"])
async def test_an_expired_entry_is_not_served(client: Client, task_queue: str, cache: str) -> None:
    name = "cache-ttl-sem" if "semantic" in cache else "cache-ttl"
    plan = plan_from(spec(name, cache=f"    cache: {cache}\n"))
    for n in (1, 2):
        await run(client, task_queue, plan, f"{name}-{n}", **ask("What is 2 + 2?"))
    assert "cache" not in attempts(f"{name}-2")[0].data
    assert len(TraceStore().cache_entries(name)) == 2


async def test_verification_runs_neither_serve_nor_keep(client: Client, task_queue: str) -> None:
    plan = plan_from(spec("cache-verif"))
    await run(client, task_queue, plan, "cache-verif-1", **ask("What is 2 + 2?"))
    await run(client, task_queue, plan, "cache-verif-2", verification=True, **ask("What is 2 + 2?"))
    assert "cache" not in attempts("cache-verif-2")[0].data
    assert [e.run_id for e in TraceStore().cache_entries("cache-verif")] == ["cache-verif-1"]


async def test_runs_that_miss_and_hit_replay_deterministically(
    client: Client, task_queue: str
) -> None:
    """Both runs' histories (lookup, keep, hit and settle markers) replay on today's code."""
    plan = plan_from(spec("cache-replay", cache="    cache: {semantic: true}\n"))
    for n in (1, 2):
        done = await run(client, task_queue, plan, f"cache-replay-{n}", **ask("What is 2 + 2?"))
        assert done is not None and done.state == "completed"
    assert attempts("cache-replay-2")[0].data["cache"] == "exact"
    await assert_replays(client, "cache-replay-1", "cache-replay-2")


async def test_a_worker_with_stage_hooks_neither_serves_nor_keeps(
    client: Client, task_queue: str
) -> None:
    """A pre_stage/post_stage hook may change what the model sees or says: no cache then."""
    registry = HookRegistry.default()
    registry.clear()
    registry.add("post_stage", lambda ctx: None, "allow-all")
    try:
        plan = plan_from(spec("cache-hooked"))
        for n in (1, 2):
            await run(client, task_queue, plan, f"cache-hooked-{n}", **ask("What is 2 + 2?"))
    finally:
        registry.clear()
    assert "cache" not in attempts("cache-hooked-2")[0].data
    assert TraceStore().cache_entries("cache-hooked") == []


UNSURE = """\
name: cache-unsure
version: "{version}"
model_tiers:
  small: {{provider: simulate, hedge_rate: 1.0}}
  frontier: {{provider: simulate, hedge_rate: 0.0}}
inputs:
  question: {{type: string}}
stages:
  - id: answer
    role: {{name: A, description: "Answer: {{{{ inputs.question }}}}", model_tier: small,
            temperature: 0}}
    on_fail: {{loop: {{max: 1}}, escalate: true}}
{extra}"""


async def test_an_answer_refused_for_its_confidence_is_never_kept_nor_served_twice(
    client: Client, task_queue: str
) -> None:
    """The cache and min_confidence together: a refused (hedged) answer is not kept, and an
    entry served and then refused is not served again in the same stage — the retry asks
    the model rather than being handed the refused answer once more."""
    # Version 1 has no threshold: the small tier's hedged answer is kept and settled.
    v1 = plan_from(UNSURE.format(version=1, extra=""))
    await run(client, task_queue, v1, "cache-unsure-1", **ask("Why is the sky blue?"))
    (kept,) = TraceStore().cache_entries("cache-unsure")
    assert kept.status == "servable" and kept.tier == "small"
    # Version 2 refuses answers under 0.6: the kept one is served once, refused, and the retry
    # on the same tier goes to the model (also refused); frontier's answer is kept.
    v2 = plan_from(UNSURE.format(version=2, extra="    min_confidence: 0.6\n"))
    result = await run(client, task_queue, v2, "cache-unsure-2", **ask("Why is the sky blue?"))
    assert result is not None and result.state == "completed"
    tried = attempts("cache-unsure-2")
    assert [(a.tier, a.data.get("cache"), a.error_type) for a in tried] == [
        ("small", "exact", "low_confidence"),
        ("small", None, "low_confidence"),
        ("frontier", None, None),
    ]
    entries = TraceStore().cache_entries("cache-unsure")
    assert sorted(e.tier for e in entries) == ["frontier", "small"]  # no second small entry
