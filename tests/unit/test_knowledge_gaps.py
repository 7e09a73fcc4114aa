"""Enrichment's parts (issue #30 item 9): gaps read off what runs recorded (answers, judges'
rationales, empty searches — never the simulator's ground truth), candidate documents matched
to them each to the gap it fits best, gaps no document matches as questions for a person, and
the ``knowledge.sources`` change written into the spec text with its style kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.experience.embeddings import LexicalEmbedder
from armature_temporal.improve.edit import EditError, apply_changes
from armature_temporal.improve.enrich import trial_collection, with_collection
from armature_temporal.improve.models import SpecChange
from armature_temporal.improve.render import change_label
from armature_temporal.knowledge.citing import KNOWLEDGE_HEADING, without_knowledge
from armature_temporal.knowledge.gaps import (
    candidate_documents,
    find_gaps,
    group_gaps,
    propose_additions,
)
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.views.report import RunTrace


def _record(kind: str, seq: int, **fields: Any) -> TraceRecord:
    return TraceRecord(
        kind=kind,  # type: ignore[arg-type]
        seq=seq,
        recorded_at="2026-12-04T00:00:00",
        prev_hash="0" * 64,
        run_id="r",
        spec_name="s",
        spec_hash="h",
        policy_version="p",
        **fields,
    )


def _run(run_id: str, *records: TraceRecord) -> RunTrace:
    return RunTrace(
        run_id=run_id,
        spec_name="s",
        spec_hash="h",
        status="completed",
        started_at="2026-12-04T00:00:00",
        records=list(records),
    )


def _searched(seq: int, query: str, refs: list[str]) -> TraceRecord:
    passages = [{"ref": r, "sha256": "x", "score": 0.1} for r in refs]
    return _record(
        "retrieval",
        seq,
        stage_id="answer",
        status="completed",
        data={"query": query, "passages": passages},
    )


def test_gaps_come_from_answers_judges_and_empty_searches() -> None:
    runs = [
        _run(
            "r1",
            _searched(0, "refund for a kettle?", ["knowledge:a.md#0"]),
            _record(
                "attempt",
                1,
                stage_id="answer",
                role_type="worker",
                output_valid=True,
                output={"content": "Sorry. Missing information: Refund window."},
            ),
            _record(
                "attempt",
                2,
                stage_id="review",
                role_type="judge",
                output_valid=True,
                output={"score": 0.3, "rationale": "There is no information about the fees."},
                inputs_provenance={"knowledge:a.md#0": "knowledge"},
            ),
        ),
        _run("r2", _searched(0, "opening hours", [])),
        _run(
            "r3",
            _record(
                "attempt",
                0,
                stage_id="answer",
                role_type="worker",
                output_valid=False,  # an invalid attempt's words are not the answer's
                output={"content": "Missing information: refund window"},
            ),
        ),
    ]
    gaps = find_gaps(runs)
    seen = {(g.run_id, g.stage_id, g.topic, g.evidence) for g in gaps}
    assert seen == {
        ("r1", "answer", "refund window", "answer"),
        ("r1", "answer", "the fees", "judge:review"),  # the judge's, for the stage it judged
        ("r2", "answer", "opening hours", "retrieval"),
    }
    refund = next(g for g in gaps if g.topic == "refund window")
    assert refund.question == "refund for a kettle?"


def _group(topic: str, question: str, runs: int) -> Any:
    from armature_temporal.knowledge.gaps import Gap

    gaps = [Gap(f"r{i}", "answer", topic, question, "answer", "") for i in range(runs)]
    (group,) = group_gaps(gaps)
    return group


def test_each_document_goes_to_the_gap_it_fits_best_and_the_rest_are_questions() -> None:
    documents = {
        "c/care.md": "# Care\n\nDescale the kettle with citric acid, never vinegar.",
        "c/press.md": "# Press\n\nOur kettles were featured in a design magazine.",
        "c/fees.md": "# Fees\n\nA refund carries no fee; the refund window is 30 days.",
    }
    refund = _group("refund window", "how long is the refund window", 5)
    descale = _group("descaling", "how do I descale my kettle", 3)
    parking = _group("parking", "where can I park near the shop", 2)
    additions, unmatched = propose_additions(
        [refund, descale, parking], documents, LexicalEmbedder(), limit=5
    )
    placed = {(a.source, a.topic, a.rank) for a in additions}
    assert ("c/fees.md", "refund window", 1) in placed
    assert ("c/care.md", "descaling", 1) in placed
    assert len({a.source for a in additions}) == len(additions)  # each document once
    assert unmatched == [parking]
    assert parking.question_for_a_person == (
        "What should answers say about 'parking'? (lacked in 2 runs, e.g. "
        "'where can I park near the shop')"
    )
    assert propose_additions([refund], documents, LexicalEmbedder(), limit=1)[0][0].source == (
        "c/fees.md"
    )


def test_candidates_already_indexed_or_outside_the_spec_folder_are_left_out(
    tmp_path: Path,
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "more").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    (tmp_path / "more" / "b.md").write_text("# B\n\nbeta", encoding="utf-8")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.md"
    outside.write_text("# Secret\n\nkey", encoding="utf-8")
    (tmp_path / "more" / "link.md").symlink_to(outside)
    found = candidate_documents(tmp_path / "s.yaml", ["docs/", "more/"], ["docs/a.md"])
    assert found == {"more/b.md": "# B\n\nbeta"}


SPEC = """\
name: kb
knowledge:
  sources: [docs/]   # what the answers search
  candidates: [more/]
self_improvement:
  editable_surfaces: [knowledge.sources]
stages:
  - id: answer
    role: {description: "Answer."}
    retrieve: {query: "q"}
"""


def test_a_sources_change_is_written_in_place_and_checked_against_the_spec() -> None:
    change = SpecChange(
        stage="knowledge", field="sources", old=["docs/"], new=["docs/", "more/b.md"], why="w"
    )
    text = apply_changes(SPEC, [change])
    line = "  sources: [docs/, more/b.md] # what the answers search\n"  # comment kept
    assert line in text
    old_line = "  sources: [docs/]   # what the answers search\n"
    assert text.replace(line, old_line) == SPEC  # nothing else moved
    assert change_label(change) == "knowledge.sources: + more/b.md"
    moved = change.model_copy(update={"old": ["elsewhere/"]})
    with pytest.raises(EditError, match=r"knowledge.sources is \['docs/'\]"):
        apply_changes(SPEC, [moved])
    with pytest.raises(EditError, match="no `knowledge:` mapping"):
        apply_changes('name: kb\nstages:\n  - {id: answer, role: {description: "A."}}\n', [change])


def test_knowledge_sources_is_editable_only_with_candidates() -> None:
    compile_spec(load_spec_text(SPEC, "kb.yaml"))
    with pytest.raises(SpecError, match=r"knowledge\.candidates, which this spec does not list"):
        compile_spec(load_spec_text(SPEC.replace("  candidates: [more/]\n", ""), "kb.yaml"))


def test_a_trial_collection_is_searched_only_by_the_candidates_verification_runs() -> None:
    plan = compile_spec(load_spec_text(SPEC, "kb.yaml"))
    trial = trial_collection("kb", ["docs/", "more/b.md"])
    assert trial == trial_collection("kb", ["more/b.md", "docs/"]) and trial.startswith("kb~")
    moved = with_collection(plan, "kb", trial)
    assert moved.stage("answer").retrieve.collection == trial  # type: ignore[union-attr]
    assert moved.knowledge_collection == trial and moved.spec_hash == plan.spec_hash
    assert plan.stage("answer").retrieve.collection == "kb"  # type: ignore[union-attr]


def test_what_was_asked_leaves_out_the_passages_found() -> None:
    prompt = (
        f"Answer: how do I descale?\n\n{KNOWLEDGE_HEADING}\n\n[knowledge:r.md#0]\nrefunds "
        "within 30 days\n\nContext:\n- question: descale"
    )
    asked = without_knowledge(prompt)
    assert "refunds" not in asked and "descale?" in asked and "Context:" in asked
