"""A tool loop's window (armature_temporal/runtime/context.py) and the ``context:`` section's
checks (armature_temporal/spec/context_window.py), without Temporal."""

from __future__ import annotations

import json

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.runtime.context import (
    RECALL,
    ContextKeeper,
    estimate_message_tokens,
    window_budget,
)
from armature_temporal.spec.context_window import PinRule, PlanContext
from tests.fakes import plan_from


def call(turn: int, name: str = "file_read", **args: object) -> dict[str, object]:
    return {"id": f"call_{turn}", "name": name, "arguments": args or {"path": "notes.txt"}}


def assistant(turn: int, text: str | None = None) -> dict[str, object]:
    c = call(turn)
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
        ],
    }


def fill(keeper: ContextKeeper, turns: int, size: int = 3000, said: dict[int, str] | None = None):
    for n in range(1, turns + 1):
        content = json.dumps({"content": f"turn {n} " + "x" * size})
        keeper.add_turn(assistant(n, (said or {}).get(n)), [(call(n), content, None)])


def test_a_window_under_its_budget_is_every_turn_verbatim() -> None:
    keeper = ContextKeeper(PlanContext(token_budget=100_000))
    fill(keeper, 5)
    assert not keeper.over_budget()
    window = keeper.window()
    assert len(window) == 10 and window[0]["role"] == "assistant"
    assert next(m["content"] for m in window if m["role"] == "tool").startswith(
        '{"content": "turn 1 '
    )
    assert not keeper.recallable  # nothing out of the window: recall is not offered


def test_compaction_keeps_the_newest_turns_and_stubs_the_rest_within_budget() -> None:
    keeper = ContextKeeper(PlanContext(token_budget=3000, keep_recent=2))
    keeper.base_tokens = 200
    fill(keeper, 20)
    assert keeper.over_budget()
    evicted = keeper.compact()
    assert [t.number for t in evicted] == list(range(1, 19))
    assert keeper.tokens() <= 3000
    window = keeper.window()
    note = window[0]
    assert note["role"] == "user" and "turns 1-18 (18 turns) are out" in note["content"]
    assert "- turn 18: file_read" in note["content"] and "[t18.1]" in note["content"]
    assert [m.get("tool_call_id") for m in window if m["role"] == "tool"] == ["call_19", "call_20"]
    assert keeper.recallable


def test_compaction_goes_below_keep_recent_while_over_budget_but_keeps_the_newest_turn() -> None:
    keeper = ContextKeeper(PlanContext(token_budget=1200, keep_recent=4))
    keeper.base_tokens = 100
    fill(keeper, 6)
    keeper.compact()
    assert keeper.out_upto == 5  # only turn 6 stays: four 760-token turns do not fit
    assert keeper.tokens() <= 1200


def test_stub_lines_are_bounded_however_many_turns_leave() -> None:
    keeper = ContextKeeper(PlanContext(token_budget=2500, keep_recent=1))
    fill(keeper, 300, size=100)
    keeper.compact()
    note = keeper.window()[0]["content"]
    assert note.count("\n- turn ") == 30 and "- turns 1-" in note
    assert estimate_message_tokens(keeper.window()[0]) < 1000


def test_pinned_turns_stay_in_order_among_the_recent_ones() -> None:
    policy = PlanContext(token_budget=3000, keep_recent=1, pin=[PinRule(contains="[pin]")])
    keeper = ContextKeeper(policy)
    fill(keeper, 10, said={3: "[pin] the deploy key is K-42"})
    keeper.compact()
    window = keeper.window()
    texts = [m.get("content") for m in window if m["role"] == "assistant"]
    assert texts == ["[pin] the deploy key is K-42", None]
    assert "turns 1-9 (8 turns)" in window[0]["content"]  # 9 out, turn 3 pinned in


def test_pin_by_tool_name() -> None:
    keeper = ContextKeeper(PlanContext(token_budget=2000, keep_recent=1, pin=[PinRule(tool="x")]))
    keeper.add_turn(assistant(1), [(call(1, "x", a=1), json.dumps({"v": "y" * 2000}), None)])
    fill(keeper, 5)
    keeper.compact()
    assert keeper.turns[0] in keeper.kept


def test_large_results_are_offloaded_behind_a_handle_and_recalled_by_range() -> None:
    keeper = ContextKeeper(PlanContext(offload_over=1000))
    big = "".join(f"{i:05d}" for i in range(2000))  # 10,000 characters
    keeper.add_turn(assistant(1), [(call(1), big, "ab" * 32)])
    shown = keeper.window()[1]["content"]  # a preview goes inline, not by its reference
    assert "[tool result t1.1: 10,000 characters" in shown and len(shown) < 1200
    assert shown.endswith(big[-400:])
    assert keeper.recallable
    ok, got = keeper.recall({"handle": "t1.1", "start": 5000, "length": 25})
    assert ok and got["text"] == big[5000:5025] and got["total_chars"] == 10_000
    ok, got = keeper.recall({"handle": "t1.1", "start": 0, "length": 50_000})
    assert ok and got["end"] == 1000  # a recall returns at most offload_over characters


def test_recall_of_an_unknown_handle_is_an_error_naming_the_known_ones() -> None:
    keeper = ContextKeeper(PlanContext())
    fill(keeper, 2, size=10)
    ok, got = keeper.recall({"handle": "t9.9"})
    assert not ok and got["error_type"] == "unknown_handle"
    assert "'t9.9'" in got["error"] and "t1.1, t2.1" in got["error"]
    ok, got = keeper.recall("not an object")
    assert not ok and "None" in got["error"]


def test_counts_from_the_model_call_replace_the_estimates() -> None:
    keeper = ContextKeeper(PlanContext(token_budget=10_000))
    fill(keeper, 2, size=100)
    window = keeper.window()
    keeper.counted(300, [11, 12, 13, 14])
    assert keeper.base_tokens == 300 and keeper.tokens() == 300 + 11 + 12 + 13 + 14
    keeper.counted(None, [1, 2])  # not the window it was sent: ignored
    assert keeper.tokens() == 350 and len(window) == 4


def test_off_sends_every_turn_and_cuts_results_as_before() -> None:
    keeper = ContextKeeper(PlanContext(enabled=False, token_budget=10))
    fill(keeper, 3, size=30_000)
    assert not keeper.over_budget() and window_budget(keeper.policy, 1000) is None
    assert all(len(m["content"]) == 20_000 for m in keeper.window() if m["role"] == "tool")
    assert not keeper.recallable


def test_the_budget_defaults_to_the_models_window_less_the_reserve() -> None:
    assert window_budget(PlanContext(reply_reserve=1000), 8000) == 7000
    assert window_budget(PlanContext(token_budget=500, reply_reserve=1000), 8000) == 500
    assert window_budget(PlanContext(), None) is None


SPEC = """\
name: ctx
mission: Keep the build green.
model_tiers: {{small: {{provider: simulate}}, big: {{provider: simulate}}}}
{spec_context}
stages:
  - id: agent
    role:
      description: Read the notes and say what they hold.
      tools: [file_read]
      {role_context}
  - id: plain
    role: {{description: Say hello.{plain_context}}}
"""


def plan_of(spec_context: str = "", role_context: str = "", plain_context: str = ""):
    return plan_from(
        SPEC.format(
            spec_context=spec_context, role_context=role_context, plain_context=plain_context
        )
    )


def problems(**parts: str) -> str:
    with pytest.raises(SpecError) as err:
        plan_of(**parts)
    return "\n".join(str(i) for i in err.value.issues)


def test_a_role_context_overrides_the_spec_wide_one_field_by_field() -> None:
    plan = plan_of(
        "context: {token_budget: 5000, keep_recent: 3, summarize: big}",
        "context: {keep_recent: 6}",
    )
    ctx = plan.stage("agent").role.context
    assert ctx is not None
    assert (ctx.token_budget, ctx.keep_recent, ctx.summarize) == (5000, 6, "big")
    assert ctx.reply_reserve == 1024
    assert plan.stage("plain").role.context is None  # no tools: no loop to keep


def test_no_context_leaves_the_plan_as_it_was() -> None:
    plan = plan_of()
    assert plan.stage("agent").role.context is None
    assert '"context"' not in plan.to_json() and '"context_window"' not in plan.to_json()


def test_context_false_turns_it_off() -> None:
    ctx = plan_of("context: false").stage("agent").role.context
    assert ctx is not None and ctx.enabled is False


def test_an_unknown_summarize_tier_names_the_tiers() -> None:
    text = problems(spec_context="context: {summarize: huge}")
    assert "context.summarize: unknown tier 'huge'; defined tiers: ['small', 'big']" in text


def test_a_budget_below_the_prompt_names_both_sizes() -> None:
    text = problems(role_context="context: {token_budget: 5}")
    assert "stages[0].role.context.token_budget" in text
    assert "token_budget 5 does not hold its system prompt and task (about 16 tokens" in text


def test_pin_must_name_a_tool_of_the_role() -> None:
    text = problems(spec_context="context: {pin: [{tool: file_wrte}]}")
    assert "pin names tool 'file_wrte', which its role does not have" in text
    assert "file_read" in text


def test_context_on_a_role_without_tools_is_refused() -> None:
    text = problems(plain_context=", context: {keep_recent: 2}")
    assert "stage 'plain': context: applies to a role with tools" in text


def test_a_pin_rule_names_one_thing() -> None:
    with pytest.raises(ValueError, match="exactly one of tool: or contains:"):
        PinRule(tool="a", contains="b")


def test_recall_is_the_built_in_tools_name() -> None:
    assert RECALL == "recall"


def test_a_stored_result_goes_by_reference_and_counts_as_its_text() -> None:
    keeper = ContextKeeper(PlanContext())
    text = json.dumps({"content": "z" * 4000})
    keeper.add_turn(assistant(1), [(call(1), text, "cd" * 32)])
    message = keeper.window()[1]
    assert message == {"role": "tool", "tool_call_id": "call_1", "content_ref": "cd" * 32}
    inline = {"role": "tool", "tool_call_id": "call_1", "content": text}
    assert keeper.turns[0].tokens[1] == estimate_message_tokens(inline) > 1000
    ok, got = keeper.recall({"handle": "t1.1"})
    assert ok and got["text"] == text


#: The spec_hash of SPEC without context: or budgets, computed before they existed (9ec0a2b).
HASH_BEFORE = "75c32280db0db6b79a8342ca870d32f1d50819bd2c9e23750006442298fd717d"


def test_a_spec_that_uses_none_of_it_keeps_its_spec_hash() -> None:
    """Traces, arms and improvement history are kept by spec_hash: the new fields, unset, must
    not give every existing spec a new version."""
    assert plan_of().spec_hash == HASH_BEFORE


@pytest.mark.parametrize(
    ("spec_context", "role_context"),
    [
        ("context: {keep_recent: 2}", ""),
        ("", "context: false"),
        ("", "max_tokens_total: 1000"),
        ("", "max_cost_usd: 1.5"),
        ("", "deadline: 10m"),
    ],
)
def test_each_new_field_set_is_a_new_version(spec_context: str, role_context: str) -> None:
    assert plan_of(spec_context, role_context).spec_hash != HASH_BEFORE


def test_a_tier_context_window_is_a_new_version() -> None:
    text = SPEC.format(spec_context="", role_context="", plain_context="").replace(
        "big: {provider: simulate}", "big: {provider: simulate, context_window: 8000}"
    )
    plan = plan_from(text)
    assert plan.spec_hash != HASH_BEFORE and plan.tiers["big"].context_window == 8000


def test_progress_counts_the_request_the_last_window_went_into() -> None:
    keeper = ContextKeeper(PlanContext(token_budget=10_000))
    keeper.window()  # turn 0: the prompt alone
    keeper.counted(150, [])
    assert keeper.sent_tokens == 150
    fill(keeper, 1, size=100)
    keeper.window()
    keeper.counted(150, [20, 30])
    assert keeper.sent_tokens == 200
    fill(keeper, 1, size=100)  # added after the call: not in what was sent
    assert keeper.sent_tokens == 200 < keeper.tokens()
