"""Admission: how a lesson enters the experience memory.

:func:`admit` stores it as a ``candidate`` and screens it with the immune scan (flagged:
``rejected``, the findings in the event). A clean lesson that says what a kept one already
says (cosine >= :data:`MERGE_SIMILARITY`, same spec and stage, not rejected) is merged into
that one: its runs join the other's provenance and nothing new is stored. Otherwise it waits
``quarantined`` until memory CI (the next ``armature learn``) replay-tests it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from armature_temporal.experience.embeddings import Embedder, cosine
from armature_temporal.experience.immune import screen
from armature_temporal.experience.models import Heuristic, HeuristicKind, heuristic_id
from armature_temporal.scanner import Finding

__all__ = ["MERGE_SIMILARITY", "Admission", "admit"]

#: Cosine similarity at or above which a new lesson is a near-duplicate of a kept one.
MERGE_SIMILARITY = 0.9


class Admission(BaseModel):
    """What became of a lesson: ``heuristic`` is the stored one (for ``merged``, the one it
    was merged into, also named by ``merged_into``)."""

    model_config = ConfigDict(frozen=True)

    heuristic: Heuristic
    outcome: Literal["quarantined", "rejected", "merged"]
    findings: list[Finding]
    merged_into: str | None = None


def _finding_line(f: Finding) -> str:
    return f"{f.category} ({f.rule}, score {f.score:.2f}: {f.text!r})"


def admit(
    store: Any,
    *,
    spec_name: str,
    stage_id: str | None,
    text: str,
    kind: HeuristicKind,
    source: Literal["distilled", "person"],
    provenance: Sequence[str],
    by: str,
    embedder: Embedder,
    now: str,
) -> Admission:
    """Admit one lesson into ``store`` (a TraceStore): scan, merge or quarantine it.

    The same text for the same spec and stage again (the same id) is not admitted twice: its
    runs are merged into the stored one, whose outcome is reported (``rejected`` if it was,
    else ``merged``).
    """
    text = text.strip()
    if not text:
        raise ValueError("a lesson's text is empty; say what to do or avoid")
    hid = heuristic_id(spec_name, stage_id, text)
    findings = screen(text)
    existing = store.heuristic(hid)
    if existing is not None:
        kept = store.merge_heuristic(hid, provenance)
        if kept.status == "rejected":
            return Admission(heuristic=kept, outcome="rejected", findings=findings)
        return Admission(heuristic=kept, outcome="merged", findings=findings, merged_into=hid)
    vector = embedder.embed([text])[0]
    candidate = Heuristic(
        id=hid,
        spec_name=spec_name,
        stage_id=stage_id,
        kind=kind,
        text=text,
        status="candidate",
        source=source,
        provenance=list(dict.fromkeys(provenance)),
        embedding=vector,
        embedding_model=embedder.name,
        created_at=now,
        updated_at=now,
    )
    arrival = (
        "added by hand"
        if source == "person"
        else f"distilled from {len(candidate.provenance)} run(s)"
    )
    if findings:
        store.add_heuristic(candidate, by=by, reason=arrival)
        categories = sorted({f.category for f in findings})
        rejected = store.set_heuristic_status(
            hid,
            "rejected",
            by="scan",
            reason="the immune scan found "
            + "; ".join(_finding_line(f) for f in findings)
            + ": never put in a prompt",
            figures={
                "categories": categories,
                "findings": [f.model_dump(mode="json") for f in findings],
            },
        )
        return Admission(heuristic=rejected, outcome="rejected", findings=findings)
    twin, similarity = _nearest(store, candidate, embedder)
    if twin is not None and similarity >= MERGE_SIMILARITY:
        kept = store.merge_heuristic(twin.id, candidate.provenance)
        return Admission(heuristic=kept, outcome="merged", findings=[], merged_into=twin.id)
    store.add_heuristic(candidate, by=by, reason=arrival)
    quarantined = store.set_heuristic_status(
        hid,
        "quarantined",
        by="scan",
        reason="the immune scan found nothing; it waits for memory CI (the next "
        "`armature learn` replay-tests it)",
        figures={"nearest": twin.id if twin else None, "similarity": round(similarity, 4)},
    )
    return Admission(heuristic=quarantined, outcome="quarantined", findings=[])


def _nearest(
    store: Any, candidate: Heuristic, embedder: Embedder
) -> tuple[Heuristic | None, float]:
    """The kept heuristic of the same spec and stage (not rejected) most similar to
    ``candidate``, and how similar. Ones embedded by another model are embedded again."""
    others = [
        h
        for h in store.heuristics(candidate.spec_name, stage_id=candidate.stage_id)
        if h.stage_id == candidate.stage_id and h.status != "rejected" and h.id != candidate.id
    ]
    if not others:
        return None, 0.0
    stale = [h for h in others if h.embedding is None or h.embedding_model != embedder.name]
    fresh = dict(zip((h.id for h in stale), embedder.embed([h.text for h in stale]), strict=True))
    assert candidate.embedding is not None
    best: Heuristic | None = None
    best_similarity = -1.0
    for h in others:
        vector = fresh.get(h.id, h.embedding)
        assert vector is not None
        similarity = cosine(candidate.embedding, vector)
        if similarity > best_similarity:
            best, best_similarity = h, similarity
    return best, max(best_similarity, 0.0)
