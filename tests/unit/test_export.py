"""SFT and DPO export from trace records written straight into a TraceStore (SQLite under the
test's ARMATURE_HOME): which attempts become rows, which are skipped, and what rows hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from armature_temporal.finetune.export import (
    JSON_CONTRACT_MARKER,
    dpo_rows,
    judged_scores,
    reply_text,
    sft_rows,
    write_jsonl,
)
from armature_temporal.runtime.prompts import build_messages
from armature_temporal.runtime.traces import TraceChain, TraceRecord
from armature_temporal.store import TraceStore
from armature_temporal.views import RunTrace, load_runs

SPEC = "writer"
OUTLINE = [
    {"role": "system", "content": f"You are Outliner, a worker. {JSON_CONTRACT_MARKER} ..."},
    {"role": "user", "content": "Outline tides."},
]
OUTLINE_RETRY = [*OUTLINE[:1], {"role": "user", "content": "Outline tides. Fix: not JSON"}]
DRAFT = [
    {"role": "system", "content": "You are Writer, a worker."},
    {"role": "user", "content": "Write about tides."},
]


def _judge_messages(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": f"You are Editor, a judge. {JSON_CONTRACT_MARKER}"},
        {"role": "user", "content": f"Score: {text}"},
    ]


class Run:
    """Builds one run's sealed chain the way the interpreter workflow does."""

    def __init__(self, run_id: str) -> None:
        self.chain = TraceChain(run_id, SPEC, "hash-v1", "policy")
        self.minute = 0
        self.add("run_start", data={"spec_version": "1", "inputs": {"topic": "tides"}})

    def add(self, kind: Any, **fields: Any) -> None:
        self.minute += 1
        self.chain.add(kind, f"2026-01-01T00:{self.minute:02d}:00+00:00", **fields)

    def attempt(
        self,
        stage: str,
        output: Any,
        *,
        valid: bool = True,
        messages: list[dict[str, Any]] | None = None,
        inputs_hash: str,
        role_type: str = "worker",
        reads: tuple[str, ...] = (),
        text: str | None = None,
        attempt: int = 1,
    ) -> None:
        data: dict[str, Any] = {}
        if messages is not None:
            data["messages"] = messages
        if text is not None:
            data["text"] = text
        self.add(
            "attempt",
            stage_id=stage,
            attempt=attempt,
            role=stage.title(),
            role_type=role_type,
            tier="small",
            model="simulate",
            inputs_hash=inputs_hash,
            inputs_provenance={s: f"stage:{s}" for s in reads},
            output=output,
            output_valid=valid,
            error_type=None if valid else "output_invalid",
            prompt_tokens=10,
            completion_tokens=5,
            data=data,
        )

    def stage(self, stage: str, output: Any, *, status: str = "completed", **fields: Any) -> None:
        self.add(
            "stage", stage_id=stage, status=status, output=output, data={"kind": "llm"}, **fields
        )

    def judged(self, score: float) -> None:
        review = {"score": score, "rationale": "ok"}
        self.attempt(
            "review",
            review,
            messages=_judge_messages(str(score)),
            inputs_hash=f"judge-{score}",
            role_type="judge",
            reads=("outline", "draft"),
        )
        self.stage("review", review, role="Review", role_type="judge", judge_score=score)

    def end(self, status: str = "completed") -> list[TraceRecord]:
        self.add("run_end", status=status, latency_ms=0.0)
        return self.chain.take()


def _write_runs() -> list[RunTrace]:
    r1 = Run("writer-1")  # outline invalid then valid; draft judged 0.9
    r1.attempt("outline", None, valid=False, messages=OUTLINE, inputs_hash="o1", text="tides!")
    r1.attempt("outline", {"points": ["a"]}, messages=OUTLINE_RETRY, inputs_hash="o2", attempt=2)
    r1.stage("outline", {"points": ["a"]}, attempt=2)
    r1.attempt("draft", {"content": "Tides rise."}, messages=DRAFT, inputs_hash="d1")
    r1.stage("draft", {"content": "Tides rise."}, attempt=1)
    r1.judged(0.9)

    r2 = Run("writer-2")  # the same prompts, valid first time; judged 0.4
    r2.attempt("outline", {"points": ["b"]}, messages=OUTLINE, inputs_hash="o1")
    r2.stage("outline", {"points": ["b"]}, attempt=1)
    r2.attempt("draft", {"content": "Tides fall."}, messages=DRAFT, inputs_hash="d1")
    r2.stage("draft", {"content": "Tides fall."}, attempt=1)
    r2.judged(0.4)

    r3 = Run("writer-3")  # an old outline record without messages; the judge never scored
    r3.attempt("outline", {"points": ["c"]}, inputs_hash="o1")
    r3.stage("outline", {"points": ["c"]}, attempt=1)
    r3.attempt("draft", {"content": "Tides turn."}, messages=DRAFT, inputs_hash="d1")
    r3.stage("draft", {"content": "Tides turn."}, attempt=1)
    r3.stage("review", None, status="failed", role_type="judge", error_type="provider_error")

    store = TraceStore()
    try:
        store.write(r1.end())
        store.write(r2.end())
        store.write(r3.end("failed"))
        return load_runs(store, spec=SPEC)
    finally:
        store.close()


@pytest.fixture
def runs() -> list[RunTrace]:
    return _write_runs()


def test_sft_rows_are_the_messages_and_reply_of_valid_attempts_of_completed_stages(
    runs: list[RunTrace],
) -> None:
    rows, stats = sft_rows(runs, spec=SPEC)
    assert {"messages": OUTLINE_RETRY, "output": '{"points": ["a"]}'} in rows
    assert {"messages": OUTLINE, "output": '{"points": ["b"]}'} in rows
    assert {"messages": DRAFT, "output": "Tides rise."} in rows  # text stage: the text itself
    assert {"messages": DRAFT, "output": "Tides turn."} in rows
    judge = {"messages": _judge_messages("0.9"), "output": '{"score": 0.9, "rationale": "ok"}'}
    assert judge in rows
    assert all(set(row) == {"messages", "output"} for row in rows)
    assert len(rows) == 7
    assert (stats.attempts, stats.rows, stats.no_messages, stats.not_successful) == (9, 7, 1, 1)
    assert "wrote 7 SFT rows" in stats.summary() and "1 without stored messages" in stats.summary()


def test_sft_stage_filter_and_min_score_use_the_judge_score_else_the_hqs(
    runs: list[RunTrace],
) -> None:
    drafts, _ = sft_rows(runs, spec=SPEC, stage="draft")
    assert [r["output"] for r in drafts] == ["Tides rise.", "Tides fall.", "Tides turn."]
    hqs = {r.run_id: r.hqs for r in runs}["writer-3"]
    # writer-3 has no judge score, so its HQS decides: it failed (success 0), both outputs were
    # valid (1) and its one LLM stage, the judge, failed (happy_path 0): 0.35 / 0.70.
    assert hqs == 0.5
    # writer-1: judge 0.9, writer-2: judge 0.4, writer-3: HQS 0.5.
    kept, stats = sft_rows(runs, spec=SPEC, stage="draft", min_score=0.6)
    assert [r["output"] for r in kept] == ["Tides rise."]
    assert stats.below_min_score == 2
    kept, _ = sft_rows(runs, spec=SPEC, stage="draft", min_score=0.45)
    assert [r["output"] for r in kept] == ["Tides rise.", "Tides turn."]
    kept, _ = sft_rows(runs, spec=SPEC, stage="draft", min_score=0.4)
    assert [r["output"] for r in kept] == ["Tides rise.", "Tides fall.", "Tides turn."]


def test_sft_drops_duplicate_prompt_and_reply_pairs(runs: list[RunTrace]) -> None:
    twice = [*runs, runs[0].model_copy(update={"run_id": "writer-1-copy"})]
    rows, stats = sft_rows(twice, spec=SPEC, stage="draft")
    assert len(rows) == 3 and stats.duplicates == 1


def test_dpo_pairs_valid_over_invalid_and_higher_judge_score_over_lower(
    runs: list[RunTrace],
) -> None:
    rows, stats = dpo_rows(runs, spec=SPEC)
    assert rows == [
        # same prompt (o1): a valid outline beats an invalid one (its raw text is the reply)
        {"prompt": OUTLINE, "chosen": '{"points": ["b"]}', "rejected": "tides!"},
        # same prompt (d1): judged 0.9 beats judged 0.4; writer-3's unjudged draft is no pair
        {"prompt": DRAFT, "chosen": "Tides rise.", "rejected": "Tides fall."},
    ]
    assert (stats.groups, stats.rows, stats.no_messages, stats.undistinguished) == (2, 2, 1, 0)


def test_dpo_makes_no_pair_when_nothing_tells_attempts_apart(runs: list[RunTrace]) -> None:
    unjudged = [r for r in runs if r.run_id == "writer-3"]
    again = unjudged[0].model_copy(update={"run_id": "writer-3b"})
    rows, stats = dpo_rows([*unjudged, again], spec=SPEC, stage="draft")
    assert rows == [] and stats.groups == 1 and stats.undistinguished == 1


def test_judge_scores_apply_to_the_stages_the_judge_read(runs: list[RunTrace]) -> None:
    assert judged_scores(runs[0]) == {"outline": 0.9, "draft": 0.9}
    assert judged_scores(runs[2]) == {}


def test_reply_text_keeps_json_that_looks_like_text_as_json() -> None:
    chain = TraceChain("r", SPEC, "h", "p")
    json_stage = chain.add(
        "attempt", "t", output={"content": "x"}, output_valid=True, data={"messages": OUTLINE}
    )
    text_stage = chain.add(
        "attempt", "t", output={"content": "x"}, output_valid=True, data={"messages": DRAFT}
    )
    unparsed = chain.add("attempt", "t", output=None, output_valid=False, data={})
    assert reply_text(json_stage) == '{"content": "x"}'
    assert reply_text(text_stage) == "x"
    assert reply_text(unparsed) is None


def test_the_json_marker_is_what_prompts_put_in_json_stages_system_message() -> None:
    def system(mode: str) -> str:
        messages = build_messages(
            role_type="worker",
            role_name="W",
            prompt_template="t",
            variables={},
            mission="",
            output_mode=mode,
            output_schema=None,
        )
        return str(messages[0]["content"])

    assert JSON_CONTRACT_MARKER in system("json")
    assert JSON_CONTRACT_MARKER not in system("text")


def test_write_jsonl_writes_one_object_per_line(tmp_path: Path, runs: list[RunTrace]) -> None:
    rows, _ = dpo_rows(runs, spec=SPEC)
    path = tmp_path / "pairs.jsonl"
    write_jsonl(rows, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == rows
    assert not (tmp_path / "pairs.jsonl.tmp").exists()
