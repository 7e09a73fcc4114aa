"""Enrichment candidates for an improvement round (issue #30, loop 3): a document from
``knowledge.candidates`` added to ``knowledge.sources`` where the traces show a knowledge gap.

Each addition is one :class:`~.models.SpecChange` on the surface ``knowledge.sources`` (so it is
verified, decided under Holm, kept as a proposal and settled by the review lanes like any
change: a new document enters prompts, so it is never in the auto lane). Its verification runs
search a **trial collection** — ``<collection>~<hash of the round and source list>``, a copy
of the live index plus the added document, indexed with the collection's own embedder, so the
addition is the only difference the paired runs measure — never the live collection, which
changes only when the spec's sources change and ``armature submit`` indexes them; the round
drops its trial collections once it has recorded its proposals (SQLite's full-text ranking
counts the rows of every collection, so they must not linger). The
candidate predicts it fixes ``low_judge`` on the stages whose gaps it answers; the next round
checks that prediction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from armature_temporal.improve.edit import apply_changes, unified_diff
from armature_temporal.improve.models import Candidate, SpecChange
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.models import Spec

__all__ = ["drop_trials", "enrichment_candidates", "trial_collection", "with_collection"]


def trial_collection(collection: str, sources: Sequence[str], round_id: str = "") -> str:
    """The collection a source list is tried in by one round (two rounds never share one)."""
    key = json.dumps([round_id, sorted(sources)])
    return f"{collection}~{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def drop_trials(store: Any, candidates: Sequence[Candidate]) -> None:
    """Drop the trial collections of a round's enrichment candidates (SQLite's full-text
    ranking counts every collection's rows: they must not outlive the round)."""
    for candidate in candidates:
        trial = candidate.plan.knowledge_collection
        if candidate.change.field == "sources" and trial is not None and "~" in trial:
            store.drop_collection(trial)


def with_collection(plan: Plan, old: str, new: str) -> Plan:
    """``plan`` searching ``new`` wherever it searched ``old`` (its spec_hash unchanged: the
    spec is the candidate's; only where its verification runs search differs)."""
    stages = [
        s.model_copy(update={"retrieve": s.retrieve.model_copy(update={"collection": new})})
        if s.retrieve is not None and s.retrieve.collection == old
        else s
        for s in plan.stages
    ]
    update: dict[str, Any] = {"stages": stages}
    if plan.knowledge_collection == old:
        update["knowledge_collection"] = new
    return plan.model_copy(update=update)


def enrichment_candidates(
    store: Any,
    spec: Spec,
    plan: Plan,
    spec_text: str,
    spec_path: str,
    runs: Sequence[Any],
    *,
    limit: int,
    round_id: str = "",
) -> tuple[list[Candidate], list[str]]:
    """Up to ``limit`` additions worth verifying, and notes (gaps no candidate matches are
    questions for a person)."""
    from armature_temporal.knowledge.gaps import (
        candidate_documents,
        find_gaps,
        group_gaps,
        propose_additions,
    )
    from armature_temporal.knowledge.spec_sources import collection_embedder, index_spec_knowledge

    knowledge = spec.knowledge
    collection = plan.knowledge_collection
    if knowledge is None or collection is None or not knowledge.candidates:
        return [], []
    groups = group_gaps(find_gaps(runs))
    if not groups:
        return [], ["enrichment: the traces show no knowledge gap"]
    path = Path(spec_path)
    documents = candidate_documents(path, knowledge.candidates, knowledge.sources)
    embedder = collection_embedder(store, collection, knowledge.embedder)
    additions, unmatched = propose_additions(groups, documents, embedder, limit=limit)
    notes = [
        f"enrichment: no candidate document matches a gap; {g.question_for_a_person} "
        "(armature knowledge gaps)"
        for g in unmatched
    ]
    found: list[Candidate] = []
    indexed: list[str] = []
    old = list(knowledge.sources)
    try:
        for add in additions:
            new = [*old, add.source]
            change = SpecChange(
                stage="knowledge",
                field="sources",
                old=old,
                new=new,
                why=f"answers of {', '.join(add.stages)} lacked {add.topic!r} in {add.runs} runs "
                f"(e.g. {add.example_question!r}); {add.source} is the "
                f"{'best' if add.rank == 1 else f'#{add.rank}'} match among the candidate "
                f"documents (cosine {add.similarity:.2f})",
            )
            text = apply_changes(spec_text, [change], filename=spec_path, base_dir=path.parent)
            trial = trial_collection(collection, new, round_id)
            indexed.append(trial)
            # the live index plus the addition: the only difference the runs can measure
            store.copy_collection(collection, trial)
            report = index_spec_knowledge(
                store,
                path,
                trial,
                [add.source],
                embedder=embedder,
                allow_hosts=spec.http_allow_hosts,
            )
            if report.unreadable:
                store.drop_collection(trial)
                notes.append(f"enrichment: {add.source} dropped: {report.unreadable}")
                continue
            new_plan = compile_spec(load_spec_text(text, spec_path, base_dir=path.parent))
            found.append(
                Candidate(
                    change=change,
                    spec_text=text,
                    plan=with_collection(new_plan, collection, trial),
                    diff=unified_diff(spec_text, text, spec_path),
                    predicted_fixes=[f"low_judge:{s}" for s in add.stages],
                    predicted_regressions=[],
                )
            )
    except BaseException:  # nothing indexed for a round that never verifies it stays behind
        for trial in indexed:
            store.drop_collection(trial)
        raise
    return found, notes
