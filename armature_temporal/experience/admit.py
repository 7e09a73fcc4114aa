"""Admission: how a lesson enters the experience memory.

:func:`admit` stores it as a ``candidate`` and screens it with the immune scan
(:mod:`~armature_temporal.experience.immune`): any finding rejects it, for good, with the
findings in the event. A lesson that is a near-duplicate (cosine >= :data:`MERGE_SIMILARITY`,
same spec and stage) of one the scan rejected is rejected too, as a retry of it: a rejected
lesson is never retried, reworded or not. A clean lesson that says what a kept one already
says (not rejected) is merged into that one: its runs join the other's provenance and nothing
new is stored. Otherwise it waits ``quarantined`` until memory CI (the next ``armature learn``)
replay-tests it; quarantine is not admission (:mod:`~armature_temporal.experience.gate`).

:func:`rescreen` screens a spec's waiting and promoted lessons again with today's scanner
(each learning round does, before it replays anything): a flagged quarantined one is rejected,
a flagged promoted one retired.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from armature_temporal.experience.embeddings import Embedder, cosine
from armature_temporal.experience.immune import screen
from armature_temporal.experience.models import (
    Heuristic,
    HeuristicError,
    HeuristicKind,
    heuristic_id,
)
from armature_temporal.scanner import Finding

__all__ = ["MERGE_SIMILARITY", "Admission", "admit", "rescreen"]

#: The ``by`` of the immune scan's events.
BY_SCAN = "scan"

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
        if findings and kept.status in ("candidate", "quarantined"):
            # Admitted before the scanner knew the form: rejected now, not merged.
            rejected = _reject(store, hid, findings, "on its arrival again")
            return Admission(heuristic=rejected, outcome="rejected", findings=findings)
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
        rejected = _reject(store, hid, findings, "")
        return Admission(heuristic=rejected, outcome="rejected", findings=findings)
    banned, close = _nearest(store, candidate, embedder, rejected=True)
    if banned is not None and close >= MERGE_SIMILARITY:
        found = _scan_findings(store, banned.id)
        if found is not None:
            store.add_heuristic(candidate, by=by, reason=arrival)
            rejected = store.set_heuristic_status(
                hid,
                "rejected",
                by=BY_SCAN,
                reason=f"a retry of {banned.id} (similarity {close:.3f}), which the immune scan "
                "rejected: a rejected lesson is never retried, reworded or not",
                figures={
                    "retry_of": banned.id,
                    "similarity": round(close, 4),
                    "categories": sorted({f.category for f in found}),
                    "findings": [f.model_dump(mode="json") for f in found],
                },
            )
            return Admission(heuristic=rejected, outcome="rejected", findings=found)
    twin, similarity = _nearest(store, candidate, embedder)
    if twin is not None and similarity >= MERGE_SIMILARITY:
        kept = store.merge_heuristic(twin.id, candidate.provenance)
        return Admission(heuristic=kept, outcome="merged", findings=[], merged_into=twin.id)
    store.add_heuristic(candidate, by=by, reason=arrival)
    quarantined = store.set_heuristic_status(
        hid,
        "quarantined",
        by=BY_SCAN,
        reason="the immune scan found nothing; it waits for memory CI (the next "
        "`armature learn` replay-tests it); no prompt but memory CI's replays carries it",
        figures={"nearest": twin.id if twin else None, "similarity": round(similarity, 4)},
    )
    return Admission(heuristic=quarantined, outcome="quarantined", findings=[])


def _reject(store: Any, hid: str, findings: list[Finding], when: str) -> Heuristic:
    """Move ``hid`` to rejected (by the scan), the findings in the event."""
    moved: Heuristic = store.set_heuristic_status(
        hid,
        "rejected",
        by=BY_SCAN,
        reason="the immune scan found "
        + "; ".join(_finding_line(f) for f in findings)
        + (f" ({when})" if when else "")
        + ": never put in a prompt",
        figures={
            "categories": sorted({f.category for f in findings}),
            "findings": [f.model_dump(mode="json") for f in findings],
        },
    )
    return moved


def _scan_findings(store: Any, hid: str) -> list[Finding] | None:
    """The findings the scan rejected ``hid`` for; None when the scan did not reject it
    (memory CI or a person did)."""
    for event in reversed(store.heuristic_events(hid)):
        if event.to_status == "rejected":
            if event.by != BY_SCAN:
                return None
            return [Finding.model_validate(f) for f in event.figures.get("findings", [])]
    return None


def rescreen(store: Any, spec_name: str) -> list[Admission]:
    """Screen ``spec_name``'s quarantined and promoted heuristics again with today's scan;
    reject each flagged quarantined one and retire each flagged promoted one (by ``scan``,
    the findings in the event). Returns what it moved (outcome ``rejected`` either way)."""
    moved: list[Admission] = []
    for h in store.heuristics(spec_name):
        if h.status not in ("candidate", "quarantined", "promoted"):
            continue
        findings = screen(h.text)
        if not findings:
            continue
        try:
            if h.status == "promoted":
                done = store.set_heuristic_status(
                    h.id,
                    "retired",
                    by=BY_SCAN,
                    reason="today's immune scan found "
                    + "; ".join(_finding_line(f) for f in findings)
                    + ": it leaves every prompt",
                    figures={
                        "categories": sorted({f.category for f in findings}),
                        "findings": [f.model_dump(mode="json") for f in findings],
                    },
                )
            else:
                done = _reject(store, h.id, findings, "screened again before its replay test")
        except HeuristicError:  # a person moved it meanwhile
            continue
        moved.append(Admission(heuristic=done, outcome="rejected", findings=findings))
    return moved


def _nearest(
    store: Any, candidate: Heuristic, embedder: Embedder, *, rejected: bool = False
) -> tuple[Heuristic | None, float]:
    """The kept heuristic of the same spec and stage (not rejected; with ``rejected``, only
    rejected ones) most similar to ``candidate``, and how similar. Ones embedded by another
    model are embedded again."""
    others = [
        h
        for h in store.heuristics(candidate.spec_name, stage_id=candidate.stage_id)
        if h.stage_id == candidate.stage_id
        and (h.status == "rejected") == rejected
        and h.id != candidate.id
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
