"""The experience loop's pure parts: memory CI's Holm-adjusted decisions, the critic's view of
an output, and how trajectories split into successes and failures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from armature_temporal.experience.critic import (
    critic_tier,
    critic_view,
    output_text,
    read_critique,
)
from armature_temporal.experience.distill import Trajectory, distill_stage, split
from armature_temporal.experience.verify import FAMILY_ALPHA, PairedScores, decide


def _test(hid: str, gains: list[float]) -> PairedScores:
    base = [0.5] * len(gains)
    return PairedScores(
        heuristic_id=hid, baseline=base, candidate=[b + g for b, g in zip(base, gains, strict=True)]
    )


def test_a_clear_gain_is_promoted_and_a_zero_gain_rejected() -> None:
    good, useless = decide([_test("h-good", [0.1] * 6 + [0.0] * 2), _test("h-zero", [0.0] * 8)])
    assert good.verdict == "promoted" and good.figures["adj_ci_low"] > 0
    assert useless.verdict == "rejected" and useless.figures["delta"] == 0
    assert "not shown to help" in useless.reason
    for d in (good, useless):
        assert d.figures["m"] == 2 and d.figures["n"] == 8
    assert good.figures["holm_rank"] == 1 and good.figures["alpha_adj"] == FAMILY_ALPHA / 2
    assert useless.figures["holm_rank"] == 2 and useless.figures["alpha_adj"] == FAMILY_ALPHA


def test_holm_widens_the_interval_with_more_heuristics_tested() -> None:
    # Four gains in 16 pairs: a resample draws none of them 1% of the time, so the 95%
    # interval is above 0 but the 1 - 0.05/5 one (Holm's first of five) is not.
    weak = [0.1] * 4 + [0.0] * 12
    (alone,) = decide([_test("h-weak", weak)])
    assert alone.figures["ci_low"] > 0 and alone.verdict == "promoted"
    zeros = [_test(f"h-{k}", [0.0] * 16) for k in range(4)]
    crowd = decide([_test("h-weak", weak), *zeros])
    weak_then = crowd[0]
    assert weak_then.figures["ci_low"] == alone.figures["ci_low"]  # the 95% figures stay
    assert weak_then.figures["alpha_adj"] < FAMILY_ALPHA / 2
    assert weak_then.verdict == "rejected", weak_then.reason


def test_too_few_scored_pairs_reject() -> None:
    (d,) = decide(
        [PairedScores(heuristic_id="h-x", baseline=[0.5, None, None], candidate=[0.9, 0.9, None])]
    )
    assert d.verdict == "rejected" and "only 1 of 3" in d.reason


def test_the_critic_never_sees_self_assessment() -> None:
    output = {"answer": "Paris", "confidence": 0.99, "nested": [{"self_score": 10, "why": "x"}]}
    assert critic_view(output) == {"answer": "Paris", "nested": [{"why": "x"}]}
    assert "0.99" not in output_text(output) and "Paris" in output_text(output)


def test_a_real_critics_evidence_must_quote_the_output() -> None:
    got = read_critique({"score": 14, "evidence": ["Paris", "made up"]}, {"answer": "Paris"})
    assert got == (10.0, ["Paris"])
    assert read_critique({"score": "high"}, "x") is None


def test_failures_are_below_the_median_or_below_half() -> None:
    t = [
        Trajectory(run_id=f"r{i}", stage_id="s", text=str(i), critic=c)
        for i, c in enumerate([0.9, 0.8, 0.3, 0.7, None])
    ]
    successes, failures = split(t)
    assert [x.run_id for x in failures] == ["r2", "r3"]
    assert [x.run_id for x in successes] == ["r0", "r1"]
    all_low = [Trajectory(run_id="a", stage_id="s", text="", critic=0.2, judge=0.4)]
    assert split(all_low) == ([], all_low)


def _plan(extra: str = "") -> Any:
    from tests.fakes import plan_from

    return plan_from(
        "name: p\nmodel_tiers:\n  small: {provider: simulate}\n  mid: {provider: simulate}\n"
        f"  big: {{provider: simulate}}\nexperience: {{{extra}}}\nstages:\n"
        "  - {id: s, role: {name: S, model_tier: small, description: hi}}\n"
    )


def test_the_critic_is_never_the_actors_tier_when_another_exists() -> None:
    assert critic_tier(_plan(), "small") == "big"
    assert critic_tier(_plan(), "big") == "mid"
    assert critic_tier(_plan("critic_tier: mid"), "small") == "mid"
    assert critic_tier(_plan("critic_tier: small"), "small") == "big"


def test_a_real_distiller_answers_json_and_its_lessons_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from armature_temporal.runtime import llm

    seen: dict[str, Any] = {}

    async def fake_complete(tier: Any, messages: list[dict[str, Any]], **kw: Any) -> Any:
        seen["messages"] = messages
        answer = {"lessons": [{"text": "Quote the ticket.", "kind": "procedural"}, {"x": 1}]}
        return llm.Completion(text=json.dumps(answer), model="fake")

    monkeypatch.setattr(llm, "complete", fake_complete)
    plan = _plan()
    tier = plan.tiers["big"].model_copy(update={"provider": "openai"})
    bad = Trajectory(run_id="r1", stage_id="s", text="wrong answer", critic=0.2)
    good = Trajectory(run_id="r2", stage_id="s", text="right answer", critic=0.9)
    got = asyncio.run(distill_stage(plan.stages[0], tier, [good], [bad], seed="x"))
    assert [(g.text, g.kind, g.provenance) for g in got] == [
        ("Quote the ticket.", "procedural", ["r1"])
    ]
    user = seen["messages"][1]["content"]
    assert "score 0.20" in user and "wrong answer" in user and "right answer" in user
    # Nothing to learn from without failures: no call at all.
    seen.clear()
    assert asyncio.run(distill_stage(plan.stages[0], tier, [good], [], seed="x")) == []
    assert not seen


def test_render_learn_shows_each_decision_with_its_figures() -> None:
    from armature_temporal.commands.learn import render_learn
    from armature_temporal.experience.learning import AdmittedLesson, LearnResult

    (decision,) = decide([_test("h-good", [0.1] * 8)])
    result = LearnResult(
        status="learned",
        detail="1 of 1 promoted",
        admitted=[
            AdmittedLesson(
                heuristic_id="h-good",
                stage_id="s",
                text="Be brief.",
                kind="procedural",
                outcome="quarantined",
            )
        ],
        decisions=[decision],
    )
    lines = render_learn(result)
    assert lines[0] == "learned: 1 of 1 promoted"
    assert "distilled h-good [s] quarantined: Be brief." in lines[1]
    assert "h-good  promoted  delta +0.100  95% [+0.100, +0.100]  Holm alpha 0.0500" in lines[2]


def test_a_real_critic_is_shown_no_self_assessment_and_keeps_only_true_quotes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from activities import learn
    from armature_temporal.experience.critic import CritiqueInput
    from armature_temporal.runtime import llm

    seen: dict[str, Any] = {}

    async def fake_complete(tier: Any, messages: list[dict[str, Any]], **kw: Any) -> Any:
        seen["prompt"] = json.dumps(messages)
        answer = {"score": 7.5, "evidence": ["Paris is the capital", "not in the output"]}
        return llm.Completion(text=json.dumps(answer), model="fake-critic", cost_usd=0.01)

    monkeypatch.setattr(learn, "complete", fake_complete)
    tier = _plan().tiers["big"].model_copy(update={"provider": "openai"})
    got = asyncio.run(
        learn.critique(
            CritiqueInput(
                run_id="r",
                spec_name="p",
                stage_id="s",
                task="Name the capital of France.",
                output={"answer": "Paris is the capital.", "confidence": 0.97},
                tier=tier,
                seed="r/s/critic/big",
            )
        )
    )
    assert got.score == 7.5 and got.evidence == ["Paris is the capital"]
    assert got.model == "fake-critic" and got.cost_usd == 0.01 and got.critic_tier == "big"
    assert "confidence" not in seen["prompt"] and "0.97" not in seen["prompt"]
    assert "Name the capital of France." in seen["prompt"]


def test_the_distiller_is_the_declared_tier_else_the_largest() -> None:
    from armature_temporal.experience.distill import distiller_tier

    assert distiller_tier(_plan()) == "big"
    assert distiller_tier(_plan("distiller_tier: mid")) == "mid"


def test_promoted_lessons_due_for_re_verification_fill_the_slots_left_oldest_first() -> None:
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from activities.learn import _choose_tests, last_verified
    from armature_temporal.experience import Heuristic, heuristic_id
    from armature_temporal.experience.learning import LearnInput
    from armature_temporal.store import TraceStore
    from armature_temporal.store._base import table_of
    from armature_temporal.store.engine import database_url
    from armature_temporal.store.schema import HeuristicEventRow
    from tests.fakes import plan_from
    from tests.workflows.test_learning import SPEC

    store = TraceStore(database_url())
    now = datetime.now(UTC)
    events = table_of(HeuristicEventRow)

    def add(text: str, status: str, days: int) -> str:
        at = (now - timedelta(days=days)).isoformat()
        h = Heuristic(
            id=heuristic_id("pitfalls", "write", text),
            spec_name="pitfalls",
            stage_id="write",
            kind="procedural",
            text=text,
            status="quarantined",
            source="person",
            provenance=[],
            created_at=at,
            updated_at=at,
        )
        store.add_heuristic(h, by="person:t", reason="r")
        if status == "promoted":
            store.set_heuristic_status(h.id, "promoted", by="person:t", reason="r")
        with store.engine.begin() as conn:
            conn.execute(update(events).where(events.c.heuristic_id == h.id).values(at=at))
        return h.id

    waiting = add("q", "quarantined", 1)
    p40, p50, p10 = add("a", "promoted", 40), add("b", "promoted", 50), add("c", "promoted", 10)
    # A memory-CI event (a re-verification) after the person's promotion is the newest one.
    store.record_heuristic_event(p10, by="memory-ci", reason="still helps")
    assert last_verified(store, store.heuristic(p10)) > (now - timedelta(days=1)).isoformat()  # type: ignore[arg-type]
    plan = plan_from(SPEC)

    def choose(max_tests: int, plan: object = plan) -> tuple[list[str], list[str]]:
        inp = LearnInput(spec_text="", spec_path="x.yaml", max_tests=max_tests)
        _, tests, reverify, _ = _choose_tests(store, plan, inp, [], now)  # type: ignore[arg-type]
        return tests, [hid for hid, _ in reverify]

    assert choose(2) == ([waiting], [p50])
    assert choose(3) == ([waiting], [p50, p40])
    assert choose(1) == ([waiting], [])
    off = plan_from(SPEC.replace("experience:\n", "experience:\n  reverify_after_days: 0\n"))
    assert off.experience is not None and off.experience.reverify_after_days == 0
    assert choose(3, off) == ([waiting], [])
    soon = plan_from(SPEC.replace("experience:\n", "experience:\n  reverify_after_days: 45\n"))
    assert choose(3, soon) == ([waiting], [p50])


def test_a_re_verification_with_too_few_scored_replays_keeps_the_lesson_promoted(
    tmp_path: Any,
) -> None:
    """An outage that keeps replays from the store is no evidence: the lesson stays promoted,
    no event is recorded (so the next round is due again), and the round says so."""
    from activities.learn import _reverified
    from armature_temporal.experience.learning import LearnPrepared, LearnRecordInput
    from armature_temporal.experience.models import Heuristic, heuristic_id
    from armature_temporal.experience.verify import Decision
    from armature_temporal.store import TraceStore

    store = TraceStore(f"sqlite:///{tmp_path / 'traces.db'}")
    at = "2026-01-01T00:00:00+00:00"
    hid = heuristic_id("s", "write", "Be plain.")
    store.add_heuristic(
        Heuristic(
            id=hid, spec_name="s", stage_id="write", kind="procedural", text="Be plain.",
            status="quarantined", source="person", provenance=[], created_at=at, updated_at=at,
        ),
        by="person:test",
        reason="added",
    )  # fmt: skip
    store.set_heuristic_status(hid, "promoted", by="person:test", reason="trusted")
    before = store.heuristic_events(hid)
    decision = decide([_test(hid, [])])[0]  # no scored pairs at all
    assert decision.figures["n"] == 0
    inp = LearnRecordInput(
        learn_run_id="learn-1",
        prepared=LearnPrepared(reverify=[hid], last_verified={hid: at}),
        baseline_runs=[],
        candidate_runs=[],
    )
    out = _reverified(store, inp, Decision.model_validate(decision.model_dump()))
    assert out.verdict == "inconclusive" and "stays promoted" in out.reason
    current = store.heuristic(hid)
    assert current is not None and current.status == "promoted"
    assert store.heuristic_events(hid) == before
