"""Review lanes (issue #17, item 2): every change classified by what it does; review-lane
changes go to <spec>.pending.yaml, never over the live spec; `armature improve SPEC
--apply-pending` promotes the pending file (and refuses a stale one); auto_apply writes only
auto-lane changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from armature_temporal.improve.edit import apply_changes, unified_diff
from armature_temporal.improve.lanes import classify
from armature_temporal.improve.models import Proposal, SpecChange
from armature_temporal.improve.pending import pending_path, read_pending, settle
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from cli import app

runner = CliRunner()

BASE = """\
name: lanes
model_tiers:
  small: {provider: simulate}
  big: {provider: simulate}
  remote: {provider: openai, model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
  elsewhere: {provider: simulate, api_base: "https://other.example/v1"}
safety_mode: strict
safety_rules:
  - tool: shell
    condition: {field: argv, op: matches_regex, value: "\\\\brm\\\\b"}
    action: block
    message: no rm
self_improvement:
  editable_surfaces: [draft.temperature]
  auto_apply: AUTO
stages:
  - id: draft
    role:
      name: Writer
      model_tier: small
      temperature: 0.7
      description: "Write a note."
    output_mode: json
    output_schema:
      type: object
      properties: {note: {type: string}, tone: {type: string}}
      required: [note, tone]
    timeout_s: 60
    on_fail:
      loop: {max: 2}
  - id: approve
    depends_on: [draft]
    gate:
      type: human
      message: "Send it?"
  - id: send
    depends_on: [approve]
    role:
      name: Sender
      model_tier: small
      description: "Send {{ draft.note }}."
"""


def base(auto: bool = False) -> str:
    return BASE.replace("AUTO", "true" if auto else "false")


NO_GATE = (
    base()
    .replace(
        "  - id: approve\n    depends_on: [draft]\n    gate:\n      type: human\n"
        '      message: "Send it?"\n',
        "",
    )
    .replace("depends_on: [approve]", "depends_on: [draft]")
)

CHANGES = {
    # auto: safe, reversible
    "description": ('description: "Write a note."', 'description: "Write a short note."', "auto"),
    "temperature": ("temperature: 0.7", "temperature: 0.35", "auto"),
    "timeout": ("timeout_s: 60", "timeout_s: 30", "auto"),
    "retry limit": ("loop: {max: 2}", "loop: {max: 3}", "auto"),
    # review: structure, permissions, contracts
    "safety loosened (mode)": ("safety_mode: strict", "safety_mode: permissive", "review"),
    "safety rule action": ("action: block", "action: warn", "review"),
    "required field dropped": ("required: [note, tone]", "required: [note]", "review"),
    "gate message": ('message: "Send it?"', 'message: "Ship it?"', "review"),
    "depends_on": ("depends_on: [approve]", "depends_on: [draft, approve]", "review"),
    # a tier of the same provider and endpoint: a bigger model of the same service
    "model tier, same provider": (
        "model_tier: small\n      temperature",
        "model_tier: big\n      temperature",
        "auto",
    ),
    # a tier on another provider: the stage's data and a credential go somewhere new
    "model tier, another provider": (
        "model_tier: small\n      temperature",
        "model_tier: remote\n      temperature",
        "review",
    ),
    # the same provider at another endpoint
    "model tier, another endpoint": (
        "model_tier: small\n      temperature",
        "model_tier: elsewhere\n      temperature",
        "review",
    ),
    "auto_apply switched on": ("auto_apply: false", "auto_apply: true", "review"),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_each_kind_of_change_has_its_lane(name: str) -> None:
    old, new, lane = CHANGES[name]
    text = base()
    assert old in text
    got, reasons = classify(text, text.replace(old, new, 1), filename="x.yaml", base_dir=None)
    assert got == lane, reasons
    assert reasons


def test_a_gate_removal_and_a_stage_addition_are_review() -> None:
    lane, reasons = classify(base(), NO_GATE, filename="x.yaml", base_dir=None)
    assert lane == "review" and "stage 'approve' removed" in reasons
    added = base() + "  - id: extra\n    depends_on: [send]\n    gate: {message: more?}\n"
    lane, reasons = classify(base(), added, filename="x.yaml", base_dir=None)
    assert lane == "review" and "stage 'extra' added" in reasons


def test_an_auto_change_riding_with_a_review_change_is_review() -> None:
    both = (
        base()
        .replace("temperature: 0.7", "temperature: 0.3")
        .replace("safety_mode: strict", "safety_mode: permissive")
    )
    lane, reasons = classify(base(), both, filename="x.yaml", base_dir=None)
    assert lane == "review"
    assert any("safety_mode" in r for r in reasons) and any("temperature" in r for r in reasons)


def test_a_tool_added_to_a_role_is_review() -> None:
    tooled = base().replace(
        'description: "Write a note."', 'description: "Write a note."\n      tools: [read_file]'
    )
    lane, reasons = classify(base(), tooled, filename="x.yaml", base_dir=None)
    assert lane == "review" and any("tools" in r for r in reasons), reasons


def _proposal(base_text: str, candidate: str, *, changes: list[SpecChange], pid: str) -> Proposal:
    lane, reasons = classify(base_text, candidate, filename="x.yaml", base_dir=None)
    return Proposal(
        id=pid,
        spec_name="lanes",
        improve_run_id="improve-lanes-1",
        created_at="2026-12-02T01:00:00+00:00",
        base_spec_hash=compile_spec(load_spec_text(base_text)).spec_hash,
        candidate_spec_hash=compile_spec(load_spec_text(candidate)).spec_hash,
        changes=changes,
        baseline_hqs=[0.5, 0.6, 0.55],
        candidate_hqs=[0.7, 0.8, 0.75],
        delta=0.2,
        ci_low=0.1,
        ci_high=0.3,
        verdict="verified",
        detail="HQS +0.200 on average over 3 paired runs",
        diff=unified_diff(base_text, candidate, "x.yaml"),
        spec_text=candidate,
        base_spec_text=base_text,
        lane=lane,
        lane_reasons=reasons,
    )


def _temperature(text: str, pid: str = "lanes-pauto") -> Proposal:
    change = SpecChange(stage="draft", field="temperature", old=0.7, new=0.35, why="steadier")
    return _proposal(text, apply_changes(text, [change]), changes=[change], pid=pid)


def _tier(text: str, pid: str = "lanes-preview") -> Proposal:
    """A tier change to another provider (review lane) that the rule-based edits can
    re-derive."""
    change = SpecChange(stage="draft", field="model_tier", old="small", new="remote", why="x")
    return _proposal(text, apply_changes(text, [change]), changes=[change], pid=pid)


def _store_with(*proposals: Proposal) -> TraceStore:
    store = TraceStore(database_url())
    store.save_proposals(proposals)
    return store


def test_auto_apply_writes_the_auto_lane_change_and_pends_no_review_one(tmp_path: Path) -> None:
    text = base(auto=True)
    spec = tmp_path / "lanes.yaml"
    spec.write_text(text)
    auto, review = _temperature(text), _tier(text)
    assert (auto.lane, review.lane) == ("auto", "review")
    store = _store_with(auto, review)
    try:
        done = settle(spec, text, [auto, review], store)
        assert done.applied == auto.id
        assert spec.read_text() == auto.spec_text
        kept = store.proposal(auto.id)
        assert kept is not None and kept.status == "applied"
        assert kept.base_spec_text == text  # the replaced text is kept with its evidence
        # Recorded as applied, so the next round checks its predictions on the new version.
        last = store.last_applied(auto.spec_name)
        assert last is not None and last.proposal_id == auto.id
        assert last.spec_hash == auto.candidate_spec_hash and last.path == str(spec.resolve())
        left = store.proposal(review.id)
        assert left is not None and left.status == "proposed"
    finally:
        store.close()
    # The review one was made from the old text: not written as a pending change of the new.
    assert done.pending is None and not pending_path(spec).exists()
    assert any(review.id in n for n in done.notes)


def test_without_auto_apply_nothing_writes_itself(tmp_path: Path) -> None:
    text = base(auto=False)
    spec = tmp_path / "lanes.yaml"
    spec.write_text(text)
    auto = _temperature(text)
    store = _store_with(auto)
    try:
        done = settle(spec, text, [auto], store)
    finally:
        store.close()
    assert done.applied is None and spec.read_text() == text
    assert any("auto_apply is false" in n for n in done.notes)


def test_a_review_lane_change_goes_to_pending_never_the_spec(tmp_path: Path) -> None:
    text = base(auto=True)  # auto_apply on: still never applied
    spec = tmp_path / "lanes.yaml"
    spec.write_text(text)
    review = _tier(text)
    store = _store_with(review)
    try:
        done = settle(spec, text, [review], store)
        kept = store.proposal(review.id)
        assert kept is not None and kept.status == "proposed"
    finally:
        store.close()
    assert done.applied is None and done.pending == review.id
    assert spec.read_text() == text  # the live spec untouched
    path = pending_path(spec)
    assert done.pending_path == str(path) and path.name == "lanes.pending.yaml"
    raw = path.read_text()
    assert raw.startswith("# Pending change to lanes.yaml")
    assert f"# proposal: {review.id}" in raw and "# evidence: HQS +0.200" in raw
    assert "--apply-pending" in raw and "model tier changed" in raw
    pending = read_pending(spec)
    assert pending.text == review.spec_text and pending.proposal_id == review.id
    # The pending file itself is a valid spec (it can be validated before it is applied).
    assert load_spec_text(raw).spec.name == "lanes"


def test_apply_pending_promotes_it_and_marks_the_proposal(tmp_path: Path) -> None:
    text = base()
    spec = tmp_path / "lanes.yaml"
    spec.write_text(text)
    review = _tier(text)
    store = _store_with(review)
    try:
        settle(spec, text, [review], store)
    finally:
        store.close()
    said_no = runner.invoke(app, ["improve", str(spec), "--apply-pending"], input="n\n")
    assert said_no.exit_code == 1 and spec.read_text() == text
    assert "-      model_tier: small" in said_no.stdout
    done = runner.invoke(app, ["improve", str(spec), "--apply-pending", "--yes"])
    assert done.exit_code == 0, done.output
    assert f"applied {review.id}" in done.stdout
    assert spec.read_text() == review.spec_text
    assert not pending_path(spec).exists()
    store = TraceStore(database_url())
    try:
        kept = store.proposal(review.id)
        assert kept is not None and kept.status == "applied"
    finally:
        store.close()
    again = runner.invoke(app, ["improve", str(spec), "--apply-pending", "--yes"])
    assert again.exit_code == 2 and "no pending change" in again.output


def test_apply_pending_refuses_when_the_spec_changed_since(tmp_path: Path) -> None:
    text = base()
    spec = tmp_path / "lanes.yaml"
    spec.write_text(text)
    review = _tier(text)
    store = _store_with(review)
    try:
        settle(spec, text, [review], store)
    finally:
        store.close()
    edited = text.replace('description: "Write a note."', 'description: "Write two notes."')
    spec.write_text(edited)
    done = runner.invoke(app, ["improve", str(spec), "--apply-pending", "--yes"])
    assert done.exit_code == 2
    assert "changed since lanes.pending.yaml was made" in done.output
    assert "nothing was written" in done.output
    assert spec.read_text() == edited and pending_path(spec).exists()


def test_settle_writes_nothing_when_the_spec_changed_during_the_round(tmp_path: Path) -> None:
    text = base(auto=True)
    spec = tmp_path / "lanes.yaml"
    spec.write_text(text + "# edited\n")
    auto = _temperature(text)
    store = _store_with(auto)
    try:
        done = settle(spec, text, [auto], store)
    finally:
        store.close()
    assert done.applied is None and spec.read_text() == text + "# edited\n"
    assert any("not the text this round started from" in n for n in done.notes)


def test_a_tier_switch_with_the_tiers_redefined_in_the_same_change_is_review() -> None:
    """Switching to tier ``b`` is auto only while ``b`` is what it was: a change that also
    points ``b`` at another provider is review (the tiers section changed)."""
    from armature_temporal.improve.lanes import classify_specs

    stage = {"id": "s", "role": {"name": "W", "model_tier": "a"}}
    base = {
        "model_tiers": {"a": {"provider": "simulate"}, "b": {"provider": "simulate"}},
        "stages": [stage],
    }
    moved = {"id": "s", "role": {"name": "W", "model_tier": "b"}}
    assert classify_specs(base, {**base, "stages": [moved]})[0] == "auto"
    redefined = {
        "model_tiers": {"a": {"provider": "simulate"}, "b": {"provider": "openai", "model": "m"}},
        "stages": [moved],
    }
    lane, reasons = classify_specs(base, redefined)
    assert lane == "review" and "model_tiers changed" in reasons
