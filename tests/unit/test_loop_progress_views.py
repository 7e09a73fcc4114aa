"""How a tool loop's progress reads on a terminal: submit --wait's progress lines, runs watch's
stage_progress events, and runs show's stage table."""

from __future__ import annotations

import pytest

from armature_temporal.commands.run_view import loop_line, print_run, progress_detail
from armature_temporal.commands.runs_watch import event_line
from armature_temporal.runtime.models import StageResult
from armature_temporal.service.client import RunView

LOOP = {
    "turn": 12,
    "max_turns": 200,
    "window_tokens": 29870,
    "budget": 32000,
    "compactions": 3,
    "tokens_total": 401234,
    "cost_usd": 0.12,
}


def test_the_loop_line_says_turn_window_and_compactions() -> None:
    assert loop_line(LOOP) == "turn 12/200, window 29,870/32,000 tokens, 3 compactions"
    one = {**LOOP, "compactions": 1, "budget": None}
    assert loop_line(one) == "turn 12/200, window 29,870 tokens, 1 compaction"
    stopped = {**LOOP, "compactions": 0, "stopped": "max_cost_usd 0.1 spent ($0.1200)"}
    assert loop_line(stopped).endswith("tokens, stopped: max_cost_usd 0.1 spent ($0.1200)")
    child = {**LOOP, "child": "r1.agent.a1.loop1"}
    assert loop_line(child).endswith("3 compactions, in r1.agent.a1.loop1")


def test_a_progress_line_carries_the_loop_and_the_attempt() -> None:
    st = StageResult(status="running", attempts=2, tier="large", loop=LOOP)
    assert progress_detail("llm", st) == (
        " (attempt 2, tier large; turn 12/200, window 29,870/32,000 tokens, 3 compactions)"
    )
    assert progress_detail("llm", StageResult(status="running", attempts=1)) == ""


def test_runs_watch_prints_a_stage_progress_event() -> None:
    event = {
        "seq": 7,
        "type": "stage_progress",
        "run_id": "r",
        "stage": "agent",
        "at": "",
        "data": LOOP,
    }
    assert event_line(event).endswith(
        "agent              turn 12/200, window 29,870/32,000 tokens, 3 compactions"
    )


def test_runs_show_puts_the_loop_before_the_output(capsys: pytest.CaptureFixture[str]) -> None:
    view = RunView(
        run_id="r-1",
        temporal_run_id="t",
        spec_name="s",
        status="completed",
        state="completed",
        stages={
            "agent": StageResult(
                status="completed", attempts=1, output={"content": "done"}, loop=LOOP
            )
        },
    )
    print_run(view)
    printed = capsys.readouterr().out  # the table wraps the cell: look for its pieces
    assert "(turn 12/200," in printed and "3 compactions)" in printed
    assert printed.index("(turn 12/200,") < printed.index('{"content": "done"}')


PLANNED = """\
name: planned
model_tiers: {{small: {{provider: simulate}}, notes: {{provider: simulate}}}}
stages:
  - id: agent
    role:
      description: Read every note.
      tools: [file_read]
      max_turns: {turns}
      max_cost_usd: 2
      {context}
"""


def test_plan_shows_a_loops_policy_budgets_and_segments() -> None:
    from armature_temporal.commands.authoring import _stage_label
    from tests.fakes import plan_from

    policy = "context: {token_budget: 32000, keep_recent: 3, summarize: notes, segment_turns: 50}"
    label = _stage_label(plan_from(PLANNED.format(context=policy, turns=500)).stage("agent"))
    assert "context 32,000 tokens, last 3 turns, older → summarized by notes" in label
    assert "50 turns a history, the rest in a child" in label
    assert "budget $2" in label
    off = _stage_label(plan_from(PLANNED.format(context="context: false", turns=50)).stage("agent"))
    assert "context off" in off and "a history" not in off
