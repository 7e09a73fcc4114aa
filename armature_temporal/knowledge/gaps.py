"""Loop 3, enrichment: knowledge gaps read off traces, and the documents that may fill them.

A **gap** is a stage's run that shows it lacked knowledge, in what the run itself recorded
(never the simulator's ground truth): its answer or a judge's rationale saying information was
missing ("Missing information: refund window", "I could not find …", "there is no information
about …"), or its search finding no passage. Gaps with the same topic are grouped.

An **addition** is a document from ``knowledge.candidates`` that is not in ``knowledge.sources``
yet and that best matches a gap group (its topic and the questions asked), by the cosine of
their embeddings; each group proposes its best :data:`PER_GAP` documents above
:data:`MIN_SIMILARITY`, so a plausible but useless one is tried and shown not to help rather
than silently preferred. A group no candidate matches becomes a **question for a person**.
Nothing here claims an addition helps: the improvement loop verifies each by paired runs,
with and without it, and Holm across the round.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MIN_SIMILARITY",
    "PER_GAP",
    "Addition",
    "Gap",
    "GapGroup",
    "candidate_documents",
    "find_gaps",
    "group_gaps",
    "propose_additions",
]

#: Below this cosine a candidate does not match a gap (lexical and local embedders alike).
MIN_SIMILARITY = 0.15
#: Documents proposed per gap group, best first.
PER_GAP = 2
#: Phrases with which an answer or a rationale says it lacked something; group 1 is the topic.
_TOPIC = r"([^.\n\"]{3,120})"
_MISSING = [
    re.compile(r"missing information:\s*" + _TOPIC, re.I),
    re.compile(
        r"(?:no|not enough|insufficient) information (?:about|on|regarding) " + _TOPIC, re.I
    ),
    re.compile(
        r"(?:could not|couldn't|cannot|can't) find (?:any )?(?:information )?(?:about |on )?"
        + _TOPIC,
        re.I,
    ),
    re.compile(
        r"(?:the passages|the documents|the knowledge) (?:do not|don't) (?:say|mention|cover) "
        + _TOPIC,
        re.I,
    ),
]


@dataclass(frozen=True)
class Gap:
    """One stage of one run that showed it lacked knowledge."""

    run_id: str
    stage_id: str
    topic: str  # what it lacked, in its own words (normalised)
    question: str  # the stage's search query, or its rendered task when it has none
    evidence: str  # where it was seen: answer, judge:<stage>, retrieval
    excerpt: str


@dataclass
class GapGroup:
    """Gaps with one topic, across runs and stages."""

    topic: str
    gaps: list[Gap] = field(default_factory=list)

    @property
    def stages(self) -> list[str]:
        return sorted({g.stage_id for g in self.gaps})

    @property
    def runs(self) -> int:
        return len({g.run_id for g in self.gaps})

    @property
    def questions(self) -> list[str]:
        return list(dict.fromkeys(g.question for g in self.gaps if g.question))

    @property
    def question_for_a_person(self) -> str:
        """The gap as a question a person can answer by writing a document."""
        runs = f"{self.runs} run{'' if self.runs == 1 else 's'}"
        example = f", e.g. {self.questions[0]!r}" if self.questions else ""
        return f"What should answers say about {self.topic!r}? (lacked in {runs}{example})"

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "runs": self.runs,
            "stages": self.stages,
            "questions": self.questions[:5],
            "evidence": sorted({g.evidence for g in self.gaps}),
            "example": self.gaps[0].excerpt,
        }


@dataclass(frozen=True)
class Addition:
    """A candidate document proposed for a gap group, with its similarity."""

    source: str
    similarity: float
    topic: str
    stages: tuple[str, ...]
    runs: int
    example_question: str
    rank: int = 1  # its place among the candidates for the gap, by similarity


def _topic(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s-]", " ", text).split()).lower()[:80]


def _missing(text: str) -> list[tuple[str, str]]:
    """``(topic, excerpt)`` of each statement of missing knowledge in ``text``."""
    found = []
    for pattern in _MISSING:
        for m in pattern.finditer(text):
            topic = _topic(m.group(1))
            if topic:
                found.append((topic, text[max(0, m.start() - 40) : m.end() + 20].strip()))
    return found


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def find_gaps(runs: Iterable[Any]) -> list[Gap]:
    """The gaps in ``runs`` (``views.report.RunTrace``: a summary and its records): per run,
    the final valid answer of each stage that searched knowledge (or said it lacked some),
    judges' rationales about those stages, and searches that found nothing."""
    gaps: list[Gap] = []
    for run in runs:
        queries: dict[str, str] = {}
        answers: dict[str, Any] = {}
        judges: dict[str, Any] = {}
        for r in run.records:
            if r.stage_id is None:
                continue
            if r.kind == "retrieval" and r.status == "completed":
                queries.setdefault(r.stage_id, str(r.data.get("query", "")))
                if not r.data.get("passages"):
                    gaps.append(
                        Gap(
                            run.run_id,
                            r.stage_id,
                            _topic(str(r.data.get("query", ""))),
                            str(r.data.get("query", "")),
                            "retrieval",
                            "the search found no passage",
                        )
                    )
            elif r.kind == "attempt" and r.output_valid:
                if r.role_type == "judge":
                    judges[r.stage_id] = r.output
                else:
                    answers[r.stage_id] = r.output
        depends = _judged_stages(run.records)
        for stage_id, output in answers.items():
            for topic, excerpt in _missing(_text(output)):
                gaps.append(
                    Gap(run.run_id, stage_id, topic, queries.get(stage_id, ""), "answer", excerpt)
                )
        for judge_id, output in judges.items():
            rationale = output.get("rationale") if isinstance(output, dict) else output
            for topic, excerpt in _missing(_text(rationale or "")):
                for stage_id in depends.get(judge_id, []) or [judge_id]:
                    gaps.append(
                        Gap(
                            run.run_id,
                            stage_id,
                            topic,
                            queries.get(stage_id, ""),
                            f"judge:{judge_id}",
                            excerpt,
                        )
                    )
    return gaps


def _judged_stages(records: Sequence[Any]) -> dict[str, list[str]]:
    """Judge stage id → the stages whose passages it was shown (its knowledge provenance)."""
    owners: dict[str, str] = {}
    for r in records:
        if r.kind == "retrieval" and r.stage_id is not None:
            for p in r.data.get("passages") or []:
                owners.setdefault(p["ref"], r.stage_id)
    out: dict[str, list[str]] = {}
    for r in records:
        if r.kind == "attempt" and r.role_type == "judge" and r.stage_id is not None:
            refs = [k for k, v in (r.inputs_provenance or {}).items() if v == "knowledge"]
            out[r.stage_id] = sorted({owners[k] for k in refs if k in owners})
    return out


def group_gaps(gaps: Iterable[Gap]) -> list[GapGroup]:
    """Gaps grouped by topic, the group seen in the most runs first."""
    groups: dict[str, GapGroup] = {}
    for gap in gaps:
        groups.setdefault(gap.topic, GapGroup(gap.topic)).gaps.append(gap)
    return sorted(groups.values(), key=lambda g: (-g.runs, g.topic))


def candidate_documents(
    spec_path: Path, candidates: Sequence[str], sources: Sequence[str]
) -> dict[str, str]:
    """The candidate documents not already among the sources: name (relative to the spec's
    folder, as ``knowledge.sources`` would list it) → text. A file the spec may not read
    (outside its folder tree, say) is left out, as indexing would leave it out."""
    from armature_temporal.knowledge.sources import Document
    from armature_temporal.knowledge.spec_sources import spec_documents, spec_files

    folder = spec_path.resolve().parent
    indexed = {
        item[0]
        for given in sources
        for item in spec_files(folder, given)
        if isinstance(item, tuple)
    }
    return {
        doc.source: doc.text
        for doc in spec_documents(folder, candidates)
        if isinstance(doc, Document) and doc.source not in indexed
    }


def propose_additions(
    groups: Sequence[GapGroup], documents: dict[str, str], embedder: Any, *, limit: int = 3
) -> tuple[list[Addition], list[GapGroup]]:
    """Up to ``limit`` additions (each document once, the best groups first) and the groups
    no document matches (questions for a person)."""
    from armature_temporal.experience.embeddings import cosine
    from armature_temporal.knowledge.chunking import chunk_text

    if not groups:
        return [], []
    names = sorted(documents)
    chunks = [
        (name, f"{c.heading}\n{c.text}") for name in names for c in chunk_text(documents[name])
    ]
    vectors = embedder.embed([text for _, text in chunks]) if chunks else []
    # Every (group, document) pair by similarity, best first, assigned greedily: each
    # document goes to the gap it matches best, each gap takes at most PER_GAP documents.
    pairs: list[tuple[float, int, str]] = []
    for g, group in enumerate(groups):
        probe = embedder.embed([" ".join([group.topic, *group.questions[:3]])])[0]
        best: dict[str, float] = {}
        for (name, _), vector in zip(chunks, vectors, strict=True):
            best[name] = max(best.get(name, -1.0), cosine(probe, vector))
        pairs += [(sim, g, name) for name, sim in best.items() if sim >= MIN_SIMILARITY]
    pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
    chosen: dict[int, list[tuple[float, str]]] = {}
    taken: set[str] = set()
    for sim, g, name in pairs:
        if name in taken or len(chosen.get(g, [])) >= PER_GAP:
            continue
        taken.add(name)
        chosen.setdefault(g, []).append((sim, name))
    additions: list[Addition] = []
    for g, group in enumerate(groups):  # the groups seen in the most runs first
        for rank, (sim, name) in enumerate(chosen.get(g, []), start=1):
            if len(additions) < limit:
                additions.append(
                    Addition(
                        source=name,
                        similarity=round(sim, 4),
                        topic=group.topic,
                        stages=tuple(group.stages),
                        runs=group.runs,
                        example_question=group.questions[0] if group.questions else "",
                        rank=rank,
                    )
                )
    unmatched = [group for g, group in enumerate(groups) if g not in chosen]
    return additions, unmatched
