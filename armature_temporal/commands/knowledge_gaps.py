"""``armature knowledge gaps SPEC``: what a spec's runs lacked (knowledge gaps read off its
traces), the candidate documents that match each gap, and the gaps no document matches —
questions for a person (see :mod:`armature_temporal.knowledge.gaps`). ``cli.py`` mounts it on
the ``knowledge`` group."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    JsonFlag,
    SpecArg,
    err,
    fail,
    loaded_or_exit,
    open_store,
    out,
    print_json,
    print_wide,
)
from armature_temporal.errors import ArmatureError

__all__ = ["gaps"]


def gaps(
    spec: SpecArg,
    runs: Annotated[
        int, typer.Option("--runs", min=1, help="How many recent runs of the spec to read.")
    ] = 200,
    as_json: JsonFlag = False,
) -> None:
    """What the spec's recent runs lacked: each knowledge gap (a stage's answer or its
    judge saying information was missing, or a search that found nothing), grouped by topic;
    the documents of knowledge.candidates that match it (what `armature improve` verifies when
    self_improvement.editable_surfaces lists knowledge.sources); and the gaps no candidate
    matches, as questions for a person. Reads the trace store only.

    Example: armature knowledge gaps specs/knowledge-qa.yaml
    """
    from armature_temporal.knowledge.gaps import (
        candidate_documents,
        find_gaps,
        group_gaps,
        propose_additions,
    )
    from armature_temporal.knowledge.spec_sources import collection_embedder
    from armature_temporal.views import load_runs

    loaded, plan = loaded_or_exit(spec)
    knowledge = loaded.spec.knowledge
    if knowledge is None or plan.knowledge_collection is None:
        raise fail(
            f"error: {spec} has no knowledge: section, so its runs search no documents; add "
            "knowledge: {sources: [docs/], candidates: [more-docs/]}",
            2,
        )
    store, where = open_store()
    traces = load_runs(store, spec=plan.name, limit=runs)
    groups = group_gaps(find_gaps(traces))
    additions: list[Any] = []
    unmatched = groups
    if groups and knowledge.candidates:
        documents = candidate_documents(Path(spec), knowledge.candidates, knowledge.sources)
        try:
            embedder = collection_embedder(store, plan.knowledge_collection, knowledge.embedder)
            additions, unmatched = propose_additions(groups, documents, embedder, limit=10)
        except ArmatureError as exc:
            raise fail(f"error: {exc}", 1) from None
    if as_json:
        print_json(
            {
                "spec": plan.name,
                "runs_read": len(traces),
                "gaps": [g.as_json() for g in groups],
                "candidates": [
                    {
                        "source": a.source,
                        "topic": a.topic,
                        "similarity": a.similarity,
                        "rank": a.rank,
                        "stages": list(a.stages),
                    }
                    for a in additions
                ],
                "questions_for_a_person": [g.question_for_a_person for g in unmatched],
            }
        )
        return
    if not traces:
        err.print(
            f"no runs of {plan.name!r} in the trace store at {where}; run it first "
            f"(armature submit {spec})",
            markup=False,
            highlight=False,
        )
        return
    if not groups:
        out.print(
            f"{len(traces)} runs of {plan.name!r} read: no answer said it lacked information, "
            "and every search found passages",
            markup=False,
            highlight=False,
        )
        return
    _print(plan.name, len(traces), groups, additions, unmatched, bool(knowledge.candidates))


def _print(
    name: str,
    read: int,
    groups: list[Any],
    additions: list[Any],
    unmatched: list[Any],
    has_candidates: bool,
) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table("gap", "runs", "stages", "example question", "seen in")
    for g in groups:
        table.add_row(
            g.topic,
            str(g.runs),
            ", ".join(g.stages),
            (g.questions or [""])[0],
            ", ".join(sorted({x.evidence for x in g.gaps})),
        )
    title = (
        f"{len(groups)} knowledge gap{'' if len(groups) == 1 else 's'} in {read} runs of {name!r}"
    )
    parts: list[Any] = [Text(title), table]
    if additions:
        found = Table("candidate document", "for the gap", "cosine", "rank")
        for a in additions:
            found.add_row(a.source, a.topic, f"{a.similarity:.2f}", str(a.rank))
        parts += [
            Text("\ncandidates that match (armature improve verifies each by paired runs)"),
            found,
        ]
    if unmatched:
        lines = "\n".join(f"- {g.question_for_a_person}" for g in unmatched)
        why = "no candidate document matches" if has_candidates else "no knowledge.candidates"
        parts.append(Text(f"\nquestions for a person ({why}):\n{lines}"))
    for part in parts:
        print_wide(part)
