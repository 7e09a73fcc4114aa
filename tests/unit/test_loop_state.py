"""A tool loop's window carried between workflow executions (runtime/loop_state.py), and the
limits on long loops that validate enforces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activities.messages import _read as read_slice
from armature_temporal.errors import SpecError
from armature_temporal.runtime.context import STUB_LINES, ContextKeeper
from armature_temporal.runtime.context_carry import export_keeper, restore_keeper
from armature_temporal.runtime.loop_state import KeeperState, MessageSliceQuery
from armature_temporal.runtime.message_store import put_text
from armature_temporal.spec.context_window import PlanContext
from tests.fakes import plan_from
from tests.unit.test_context_window import assistant, call


def ref_of(n: int) -> str:
    return f"{n:064x}"


def filled(policy: PlanContext, turns: int = 12, *, store: bool = False) -> ContextKeeper:
    """A keeper whose every result was stored (ref ``ref_of(turn)``, or with ``store`` really
    stored, as the tool_call activity does), compacted once."""
    keeper = ContextKeeper(policy)
    keeper.base_tokens = 100
    for n in range(1, turns + 1):
        text = json.dumps({"content": f"turn {n} " + "x" * 3000})
        said = "[pin] keep this" if n == 2 else None
        ref = put_text(text) if store else ref_of(n)
        keeper.add_turn(assistant(n, said), [(call(n), text, ref)])
    keeper.compact()
    return keeper


def carried(keeper: ContextKeeper) -> KeeperState:
    """The keeper's state as the next execution gets it: through JSON, as Temporal carries it."""
    state, _ = export_keeper(keeper)
    return KeeperState.model_validate_json(state.model_dump_json())


POLICY = PlanContext(token_budget=3000, keep_recent=3, pin=[{"contains": "[pin]"}])


def test_a_restored_keeper_sends_the_same_window_and_notes() -> None:
    keeper = filled(POLICY)
    restored = restore_keeper(POLICY, carried(keeper))
    assert keeper.dropped and restored.window() == keeper.window()
    assert restored.note() == keeper.note()
    assert restored.stats() == keeper.stats() and restored.sent_tokens == keeper.sent_tokens
    # The pinned turn, then the newest that fit.
    assert [t.number for t in restored.kept] == [t.number for t in keeper.kept] == [2, 11, 12]


def test_turns_out_of_the_window_travel_as_references_only() -> None:
    keeper = filled(POLICY)
    state = carried(keeper)
    stub = state.turns[0]
    assert stub.full == {} and stub.refs == {"t1.1": ref_of(1)}
    assert stub.assistant == {} and stub.results == [] and stub.calls
    # Without a summarize tier nothing reads the window's texts: they go by reference too.
    assert all(t.full == {} for t in state.turns)
    assert len(state.model_dump_json()) < 12 * 3000 / 2
    whole = sum(len(text) for t in keeper.turns for text in t.full.values())
    assert whole > 12 * 3000


def test_a_summarizing_policy_carries_the_windows_texts_for_the_next_summary() -> None:
    policy = POLICY.model_copy(update={"summarize": "small"})
    keeper = filled(policy)
    state = carried(keeper)
    kept = [t for t in state.turns if t.tokens]
    assert [t.number for t in kept] == [t.number for t in keeper.kept] == [2, 11, 12]
    assert all(t.full == keeper.turns[t.number - 1].full for t in kept)
    assert all(t.full == {} for t in state.turns if not t.tokens)


def test_recall_of_a_carried_stub_asks_for_its_reference_then_answers_from_it() -> None:
    restored = restore_keeper(POLICY, carried(filled(POLICY)))
    args = {"handle": "t1.1", "start": 10, "length": 5}
    assert restored.recall_ref(args) == (ref_of(1), 10, 5, None)
    ok, got = restored.recall(args, ("abcde", 3012))
    assert ok and got == {
        "handle": "t1.1",
        "start": 10,
        "end": 15,
        "total_chars": 3012,
        "text": "abcde",
    }
    # Unread, a stub's handle is not answered from nothing; an unknown one names the latest.
    assert not restored.recall(args)[0]
    assert restored.recall_ref({"handle": "t99.1"}) is None
    ok, got = restored.recall({"handle": "t99.1"})
    assert not ok and "t12.1" in got["error"]


def test_a_live_keeper_answers_recall_without_reading() -> None:
    keeper = filled(POLICY)
    assert keeper.recall_ref({"handle": "t1.1"}) is None
    ok, got = keeper.recall({"handle": "t1.1", "length": 7})
    assert ok and got["text"] == '{"conte'


def test_turns_the_note_no_longer_lists_are_archived_once_and_read_through_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARMATURE_PAYLOAD_DIR", str(tmp_path))
    keeper = filled(POLICY, turns=80, store=True)
    window, note = keeper.window(), keeper.note()
    state, archives = export_keeper(keeper)
    dropped = [t.number for t in keeper.dropped]
    # The note lists the newest STUB_LINES dropped turns: those stay stubs, the rest archived.
    (span,) = state.archives
    assert (span.first, span.last) == (dropped[0], dropped[-STUB_LINES - 1])
    assert len(archives) == 1 and put_text(archives[0]) == span.ref
    assert len(state.turns) == STUB_LINES + len(keeper.kept)  # 1 pinned + window
    restored = restore_keeper(POLICY, KeeperState.model_validate_json(state.model_dump_json()))
    assert restored.window() == window and restored.note() == note
    # Recall of an archived handle goes through the archive, then the result.
    where = restored.recall_ref({"handle": "t7.1", "length": 30})
    assert where == (span.ref, 0, 30, "t7.1")
    got = read_slice(MessageSliceQuery(ref=where[0], start=0, length=30, key="t7.1"))
    assert got.found and got.text == '{"content": "turn 7 ' + "x" * 10 and got.total_chars > 3000
    ok, content = restored.recall({"handle": "t7.1"}, (got.text, got.total_chars))
    assert ok and content["text"] == got.text
    assert not read_slice(MessageSliceQuery(ref=span.ref, key="t7.9")).found
    # A second export archives only what left the note since: spans follow each other.
    for n in range(81, 121):
        text = json.dumps({"content": f"turn {n} " + "x" * 3000})
        restored.add_turn(assistant(n), [(call(n), text, put_text(text))])
    restored.compact()
    again, more = export_keeper(restored)
    first, second = again.archives
    assert (first.first, first.last) == (span.first, span.last)
    assert second.first == span.last + 1
    assert len(more) == 1 and len(again.turns) == len(state.turns)


def test_an_archive_is_a_few_bytes_a_turn_and_the_state_stays_flat() -> None:
    sizes = []
    for turns in (200, 2000):
        keeper = filled(POLICY, turns=turns)
        state, archives = export_keeper(keeper)
        sizes.append(len(state.model_dump_json()))
        assert len(archives[0]) < 120 * turns  # a handle and a reference a turn
    assert sizes[1] < sizes[0] * 1.2, sizes


LONG = """\
name: long
model_tiers: {{small: {{provider: simulate}}}}
{context}
stages:
  - id: agent
    role:
      description: Read every note.
      tools: [file_read]
      max_turns: {turns}
"""


def test_loops_may_run_to_ten_thousand_turns_with_their_context_on() -> None:
    plan = plan_from(LONG.format(context="", turns=10_000))
    assert plan.stage("agent").role.max_turns == 10_000
    with pytest.raises(SpecError, match="less than or equal to 10000"):
        plan_from(LONG.format(context="", turns=10_001))


def test_more_than_200_turns_with_the_context_off_is_refused_naming_the_fix() -> None:
    assert plan_from(LONG.format(context="context: false", turns=200))
    with pytest.raises(SpecError) as err:
        plan_from(LONG.format(context="context: false", turns=201))
    (issue,) = err.value.issues
    assert "stages[0].role.max_turns" in str(issue)
    assert "max_turns 201 needs its context policy, which is off" in str(issue)
    assert "keep max_turns at most 200" in str(issue)


def test_segment_turns_is_planned_and_bounded() -> None:
    plan = plan_from(LONG.format(context="context: {segment_turns: 25}", turns=500))
    ctx = plan.stage("agent").role.context
    assert ctx is not None and ctx.segment_turns == 25
    with pytest.raises(SpecError, match="segment_turns: Input should be greater than or equal"):
        plan_from(LONG.format(context="context: {segment_turns: 1}", turns=500))
