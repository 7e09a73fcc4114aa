"""Spec edits: a proposal's changes touch only their own lines, and bad ones say why."""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path
from typing import Any

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.improve import edit
from armature_temporal.improve.edit import EditError, apply_changes, text_hash, unified_diff
from armature_temporal.improve.models import SpecChange
from armature_temporal.spec.compiler import Plan, PlanRole, compile_spec
from armature_temporal.spec.loader import load_spec_text

SPECS = Path(__file__).resolve().parents[2] / "specs"
TRIAGE = (SPECS / "customer-triage.yaml").read_text(encoding="utf-8")
ANALYZE_PROMPT = (
    "Classify this ticket from a {{ inputs.customer_tier }} customer.\n"
    "Ticket: {{ inputs.ticket }}\n"
    "{% if _last_error %}Your previous answer was rejected: {{ _last_error }}{% endif %}\n"
)


def change(stage: str, field: Any, new: Any, old: Any = None) -> SpecChange:
    return SpecChange(stage=stage, field=field, old=old, new=new, why="the traces say so")


def apply(text: str, *changes: SpecChange) -> str:
    return apply_changes(text, changes, filename="spec.yaml", base_dir=SPECS)


def plan_of(text: str) -> Plan:
    return compile_spec(load_spec_text(text, "spec.yaml", base_dir=SPECS))


def role_of(plan: Plan, stage_id: str) -> PlanRole:
    role = next(s for s in plan.stages if s.id == stage_id).role
    assert role is not None
    return role


def changed_lines(old: str, new: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines, in order, as difflib sees them."""
    removed: list[str] = []
    added: list[str] = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        (removed if line.startswith("-") else added).append(line[1:])
    return removed, added


def edit_error(text: str, *changes: SpecChange) -> str:
    with pytest.raises(EditError) as info:
        apply(text, *changes)
    return str(info.value)


# --- round trips -------------------------------------------------------------------------

SPEC_FILES = sorted(SPECS.glob("*.yaml"))


def test_there_are_example_specs() -> None:
    assert len(SPEC_FILES) >= 5


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.name)
def test_noop_round_trip_is_byte_identical(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert apply_changes(text, [], filename=path.name, base_dir=SPECS) == text
    # ruamel alone, in the layout found, reproduces the file: edits never need the splice
    # to keep the rest of an example spec intact.
    doc = edit._yaml(None).load(text)
    assert edit._dump(doc, edit._layout(doc, text)) == text


# --- each field -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "new", "added"),
    [
        ("model_tier", "frontier", ["      model_tier: frontier"]),
        ("temperature", 0.2, ["      temperature: 0.2"]),
        ("max_tokens", 512, ["      max_tokens: 512"]),
    ],
)
def test_a_new_role_field_adds_one_line_after_the_type(
    field: str, new: Any, added: list[str]
) -> None:
    before = role_of(plan_of(TRIAGE), "analyze")
    assert getattr(before, field) != new

    out = apply(TRIAGE, change("analyze", field, new))

    assert changed_lines(TRIAGE, out) == ([], added)
    lines = out.splitlines()
    assert lines[lines.index(added[0]) - 1] == "      type: worker"
    assert getattr(role_of(plan_of(out), "analyze"), field) == new
    # the other stages compile as before
    for stage_id in ("draft_reply", "refine"):
        assert role_of(plan_of(out), stage_id) == role_of(plan_of(TRIAGE), stage_id)


def test_a_description_change_replaces_only_the_block_lines() -> None:
    new = "Put this ticket in a category.\nThe ticket: {{ inputs.ticket }}\n"
    out = apply(TRIAGE, change("analyze", "description", new, old=ANALYZE_PROMPT))

    removed, added = changed_lines(TRIAGE, out)
    assert removed == ["        " + line for line in ANALYZE_PROMPT.splitlines()]
    assert added == [
        "        Put this ticket in a category.",
        "        The ticket: {{ inputs.ticket }}",
    ]
    assert "      description: |\n        Put this ticket in a category.\n" in out
    assert role_of(plan_of(out), "analyze").prompt == new


def test_an_existing_value_is_replaced_in_place() -> None:
    once = apply(TRIAGE, change("draft_reply", "temperature", 0.2))
    twice = apply(once, change("draft_reply", "temperature", 0.9, old=0.2))

    assert changed_lines(once, twice) == (["      temperature: 0.2"], ["      temperature: 0.9"])
    assert role_of(plan_of(twice), "draft_reply").temperature == 0.9


def test_several_changes_at_once_and_a_removal() -> None:
    out = apply(
        TRIAGE,
        change("analyze", "model_tier", "medium"),
        change("refine", "max_tokens", 300),
    )
    plan = plan_of(out)
    assert role_of(plan, "analyze").model_tier == "medium"
    assert role_of(plan, "refine").max_tokens == 300

    back = apply(out, change("analyze", "model_tier", None, old="medium"))
    assert changed_lines(out, back) == (["      model_tier: medium"], [])
    assert role_of(plan_of(back), "analyze").model_tier == "small"


def test_a_quoted_value_keeps_its_quotes() -> None:
    text = TRIAGE.replace("      type: worker\n", "      type: worker\n      model_tier: 'small'\n")
    out = apply(text, change("analyze", "model_tier", "frontier", old="small"))
    assert changed_lines(text, out) == (
        ["      model_tier: 'small'"],
        ["      model_tier: 'frontier'"],
    )


# --- layout ----------------------------------------------------------------------------


def test_a_multiline_description_becomes_a_literal_block() -> None:
    text = "name: demo\nstages:\n  - id: a\n    role:\n      name: A\n      description: Say hi.\n"
    out = apply(text, change("a", "description", "Say hi\nto {{ inputs.who }}\n", old="Say hi."))
    assert out == (
        "name: demo\nstages:\n  - id: a\n    role:\n      name: A\n"
        "      description: |\n        Say hi\n        to {{ inputs.who }}\n"
    )


def test_a_multiline_description_in_a_flow_mapping_becomes_a_block() -> None:
    text = "name: demo\nstages:\n  - id: a\n    role: {name: A, description: hello}\n"
    out = apply(text, change("a", "description", "line one\nline two", old="hello"))
    assert "      description: |-\n        line one\n        line two\n" in out
    assert role_of(plan_of(out), "a").prompt == "line one\nline two"


def test_comments_survive_an_edit() -> None:
    out = apply(TRIAGE, change("refine", "model_tier", "frontier"))
    comments = [line for line in TRIAGE.splitlines() if line.lstrip().startswith("#")]
    assert len(comments) > 10
    assert [line for line in out.splitlines() if line.lstrip().startswith("#")] == comments


def test_a_key_added_after_a_commented_line_keeps_the_comment_on_its_line() -> None:
    text = (SPECS / "researcher.yaml").read_text(encoding="utf-8")
    out = apply(text, change("investigate", "temperature", 0.4))
    assert changed_lines(text, out) == ([], ["      temperature: 0.4"])
    assert "      type: researcher        # researchers default to the `large` tier\n" in out


def test_a_layout_ruamel_would_normalise_is_kept_outside_the_changed_lines() -> None:
    text = (
        "---\n"
        "# odd spacing ruamel does not reproduce\n"
        "name:    demo\n"
        "stages:\n"
        "- id: a\n"
        "  depends_on: [ ]\n"
        "  role: { name: A, description: hello }\n"
        "- id: b\n"
        "  role:\n"
        "      name:   B\n"
        '      type: "worker"\n'
        "      description: >\n"
        "        folded text\n"
        "        here\n"
        "  on_fail: { loop: { max: 2 } }\n"
        "...\n"
    )
    doc = edit._yaml(None).load(text)
    assert edit._dump(doc, edit._layout(doc, text)) != text  # the case the splice is for

    out = apply(text, change("b", "temperature", 0.1))
    assert changed_lines(text, out) == ([], ["      temperature: 0.1"])

    out = apply(text, change("a", "model_tier", "frontier"))
    removed, added = changed_lines(text, out)
    assert removed == ["  role: { name: A, description: hello }"]
    assert len(added) == 1
    assert role_of(plan_of(out), "a").model_tier == "frontier"


def test_crlf_line_endings_are_kept() -> None:
    text = TRIAGE.replace("\n", "\r\n")
    out = apply(text, change("analyze", "model_tier", "frontier"))
    assert "\n" not in out.replace("\r\n", "")
    assert changed_lines(text, out) == ([], ["      model_tier: frontier"])
    assert "      type: worker\r\n      model_tier: frontier\r\n" in out


# --- refusals --------------------------------------------------------------------------


def test_an_old_value_that_no_longer_matches_is_refused() -> None:
    message = edit_error(TRIAGE, change("analyze", "model_tier", "frontier", old="small"))
    assert message == (
        "spec.yaml: the spec changed since the proposal was made: stages[0] (analyze)"
        ".role.model_tier is not set, the proposal expected 'small'; run `armature improve` "
        "again"
    )
    message = edit_error(TRIAGE, change("draft_reply", "description", "x", old="Draft a reply"))
    assert "stages[1] (draft_reply).role.description is 'Draft a reply to a" in message
    assert "the proposal expected 'Draft a reply'" in message

    once = apply(TRIAGE, change("analyze", "temperature", 0.5))
    message = edit_error(once, change("analyze", "temperature", 0.1, old=None))
    assert "role.temperature is 0.5, the proposal expected not set" in message


def test_an_unknown_stage_is_named_with_the_stage_ids() -> None:
    message = edit_error(TRIAGE, change("analyse", "temperature", 0.5))
    assert "no stage has id 'analyse' (did you mean 'analyze'?)" in message
    assert "its stages are: analyze, draft_reply, approve_reply, refine" in message
    assert "run `armature improve` again" in message


@pytest.mark.parametrize(
    ("spec", "stage", "where"),
    [
        ("safe-shell.yaml", "inspect", "stages[0] (inspect) is a tool stage"),
        ("research-fanout.yaml", "research", "stages[1] (research) is a fan-out stage"),
        ("customer-triage.yaml", "approve_reply", "stages[2] (approve_reply) is an approval gate"),
    ],
)
def test_a_stage_without_a_role_is_refused(spec: str, stage: str, where: str) -> None:
    text = (SPECS / spec).read_text(encoding="utf-8")
    message = edit_error(text, change(stage, "model_tier", "frontier"))
    assert where in message
    assert "not an LLM stage: it has no `role:`, so there is no role.model_tier" in message


def test_two_changes_to_one_field_are_refused() -> None:
    message = edit_error(
        TRIAGE,
        change("analyze", "temperature", 0.5),
        change("analyze", "temperature", 0.7),
    )
    assert "two changes set analyze.temperature" in message


def test_a_role_shared_through_an_alias_is_refused() -> None:
    text = (
        "name: demo\nstages:\n"
        "  - id: a\n    role: &r {name: A, description: hello}\n"
        "  - id: b\n    role: *r\n"
    )
    plan_of(text)  # a valid spec
    message = edit_error(text, change("b", "temperature", 0.5))
    assert "stages[1] (b).role is a YAML anchor that other places use through an alias" in message


@pytest.mark.parametrize(
    ("field", "new", "problem"),
    [
        ("model_tier", "huge", "stages[0].role.model_tier: unknown tier 'huge'"),
        ("temperature", 5, "stages[0].role.temperature: Input should be less than or equal to 2"),
        ("max_tokens", 0, "stages[0].role.max_tokens: Input should be greater than 0"),
    ],
)
def test_an_invalid_new_value_raises_spec_error(field: str, new: Any, problem: str) -> None:
    with pytest.raises(SpecError) as info:
        apply(TRIAGE, change("analyze", field, new))
    assert problem in str(info.value)
    assert str(info.value).startswith("spec.yaml:")


def test_an_invalid_spec_raises_spec_error() -> None:
    with pytest.raises(SpecError):
        apply("name: demo\nstages: [\n", change("a", "temperature", 0.5))


# --- diff and hash ----------------------------------------------------------------------


def test_unified_diff_format() -> None:
    old = "".join(f"line {i}\n" for i in range(1, 10))
    new = old.replace("line 5\n", "line five\n")
    assert unified_diff(old, new, "specs/x.yaml") == (
        "--- a/specs/x.yaml\n"
        "+++ b/specs/x.yaml\n"
        "@@ -2,7 +2,7 @@\n"
        " line 2\n line 3\n line 4\n"
        "-line 5\n"
        "+line five\n"
        " line 6\n line 7\n line 8\n"
    )
    assert unified_diff(old, old, "specs/x.yaml") == ""
    assert unified_diff("a\n", "a\nb", "x") == (
        "--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n a\n+b\n\\ No newline at end of file\n"
    )


def test_unified_diff_of_an_edit() -> None:
    out = apply(TRIAGE, change("analyze", "temperature", 0.3))
    diff = unified_diff(TRIAGE, out, "specs/customer-triage.yaml")
    lines = diff.splitlines()
    assert lines[:2] == ["--- a/specs/customer-triage.yaml", "+++ b/specs/customer-triage.yaml"]
    assert [line for line in lines[2:] if line[:1] in "+-"] == ["+      temperature: 0.3"]


def test_text_hash() -> None:
    assert text_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert text_hash("é") == hashlib.sha256("é".encode()).hexdigest()
    assert text_hash(TRIAGE) != text_hash(TRIAGE + " ")
