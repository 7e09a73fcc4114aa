"""The post-run evaluation's judge and verdict (pure): its schema asks one score in [0, 1] per
criterion and a rationale, the simulate provider answers it validly offline, and the verdict
keeps the scores in the criteria's order with their mean."""

from __future__ import annotations

import json

import pytest

from armature_temporal.runtime.evaluation import (
    JUDGED_OUTPUT_CHARS,
    evaluation_judge,
    evaluation_verdict,
    judged_output,
)
from armature_temporal.runtime.parsing import parse_output
from armature_temporal.runtime.simulate import simulate_completion

CRITERIA = ["response is factual", "no hallucinated citations", "response is factual"]


def test_the_judge_asks_one_bounded_score_per_distinct_criterion_and_a_rationale() -> None:
    judge = evaluation_judge("draft", CRITERIA, "frontier")
    assert judge.id == "draft__evaluation" and judge.kind == "llm"
    assert judge.role is not None and judge.role.type == "judge"
    assert judge.role.model_tier == "frontier"
    schema = judge.output_schema
    assert schema is not None
    assert schema["required"] == ["response is factual", "no hallucinated citations", "rationale"]
    assert schema["properties"]["response is factual"] == {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
    }
    # An answer on another scale is invalid, so the judge is asked again.
    bad = json.dumps({"response is factual": 7, "no hallucinated citations": 1, "rationale": "x"})
    assert not parse_output(bad, "json", schema).valid


@pytest.mark.parametrize("seed", [f"run-{n}/draft__evaluation/1/frontier" for n in range(20)])
def test_the_simulate_provider_answers_the_judge_validly_offline(seed: str) -> None:
    judge = evaluation_judge("draft", CRITERIA, "frontier")
    reply = simulate_completion(
        seed=seed,
        prompt="Evaluate the output of workflow stage draft",
        output_mode="json",
        output_schema=judge.output_schema,
        role_type="judge",
        valid_rate=1.0,
        quality=0.8,
    )
    parsed = parse_output(reply.text, "json", judge.output_schema)
    assert parsed.valid, (reply.text, parsed.error)
    verdict = evaluation_verdict(CRITERIA, parsed.value, "frontier")
    assert list(verdict["scores"]) == ["response is factual", "no hallucinated citations"]
    assert all(0.0 <= s <= 1.0 for s in verdict["scores"].values())


def test_the_verdict_keeps_scores_in_criteria_order_with_their_mean() -> None:
    answer = {"no hallucinated citations": 1, "response is factual": 0.5, "rationale": "ok"}
    verdict = evaluation_verdict(CRITERIA, answer, "large")
    assert verdict == {
        "scores": {"response is factual": 0.5, "no hallucinated citations": 1.0},
        "mean": 0.75,
        "rationale": "ok",
        "tier": "large",
    }


def test_the_judge_reads_text_as_text_and_the_rest_as_json_cut_to_a_bound() -> None:
    assert judged_output({"content": "Dear customer"}) == "Dear customer"
    assert judged_output({"label": "bug", "why": "é"}) == '{"label": "bug", "why": "é"}'
    long = judged_output({"content": "x" * (JUDGED_OUTPUT_CHARS + 10)})
    assert len(long) == JUDGED_OUTPUT_CHARS + len("...[truncated]")
    assert long.endswith("...[truncated]")
