"""Reconciliation: new facts against the ones kept, by rule, nothing overwritten.

Every candidate first passes the admission scan the heuristics memory holds lessons to
(:func:`armature_temporal.experience.immune.screen`, the scanner's lesson profile): a fact goes
into prompts as a lesson does, so a finding of any kind (an injected instruction, a forced
verdict, a secret, personal data) rejects it, and it is kept ``rejected`` with the findings,
never current. A clean candidate is then compared with the current facts of its slot (the same
namespace, subject entity and predicate):

- **duplicate**: the same object, no more confidence: nothing new is stored; the sighting joins
  the kept fact's provenance (0.7.0's SKIP, which dropped the sighting).
- **update**: the same object, more confidence: a new version, current, holding both
  sightings (0.7.0's UPDATE, which raised the confidence in place); the older version is
  ``superseded`` and linked to it.
- **supersede**: another object for a single-valued predicate where the newer of the two says
  it ``supersedes`` (the world changed): both kept, the newer current, the older ``superseded``.
- **contradict**: another object for a single-valued predicate otherwise: both kept, the newer
  current, the older ``contradicted``; a prompt shows the current one as disputed.
- **new**: nothing in its slot (or a predicate that holds many values, such as a relation).

"Newer" is the later ``recorded_at`` (then the greater id), so a merged claim older than the
one kept does not displace it: it is stored behind it. A candidate whose id is kept already (a
retried activity, a merge done twice) is a duplicate and changes nothing. ``superseded_by``
links an older version to the one that took its place, ``previous`` the other way.

:func:`merge_graphs` brings the current facts of another store or namespace in by the same
rules, with their provenance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from armature_temporal.knowledge.facts_model import Fact, Provenance, fact_id
from armature_temporal.scanner import Finding

__all__ = [
    "DECISIONS",
    "Decision",
    "Outcome",
    "Reconciliation",
    "merge_candidates",
    "merge_graphs",
    "reconcile",
    "rehome",
    "scanned_text",
]

Decision = Literal["new", "duplicate", "update", "supersede", "contradict", "rejected"]
Retired = Literal["superseded", "contradicted"]
DECISIONS: tuple[Decision, ...] = (
    "new",
    "duplicate",
    "update",
    "supersede",
    "contradict",
    "rejected",
)


class Outcome(BaseModel):
    """What became of one candidate: ``fact`` as stored (for a duplicate, the candidate, not
    stored), ``target`` the kept fact it was compared with, the scan's ``findings``."""

    model_config = ConfigDict(frozen=True)

    decision: Decision
    fact: Fact
    target: str | None = None
    findings: list[Finding] = []


@dataclass
class Reconciliation:
    """The outcome of each candidate, and what to write: ``added`` facts (any status),
    ``changed`` kept facts (their new status and links) and ``sightings`` (fact id, the
    provenance joined to it) for duplicates."""

    outcomes: list[Outcome] = field(default_factory=list)
    added: list[Fact] = field(default_factory=list)
    changed: list[Fact] = field(default_factory=list)
    sightings: list[tuple[str, Provenance]] = field(default_factory=list)

    def count(self, decision: Decision) -> int:
        return sum(1 for o in self.outcomes if o.decision == decision)

    def summary(self) -> dict[str, int]:
        return {d: self.count(d) for d in DECISIONS}


def scanned_text(fact: Fact) -> str:
    """What the admission scan reads of a fact: its text, and its names and value where the
    text does not already hold them."""
    parts = [fact.text]
    for part in (fact.subject_name, fact.object_display):
        if part and part not in fact.text:
            parts.append(part)
    return "\n".join(parts)


def _screen(text: str) -> list[Finding]:
    from armature_temporal.experience.immune import screen

    return screen(text)


def reconcile(
    kept: Sequence[Fact],
    candidates: Sequence[Fact],
    *,
    enabled: bool = True,
    scan: Callable[[str], list[Finding]] = _screen,
) -> Reconciliation:
    """Reconcile ``candidates`` (taken oldest first) with the ``kept`` facts of their slots.
    Pure. With ``enabled`` false (0.7.0's ``reconcile: false``) every clean candidate is
    stored as it comes, current; the scan still runs."""
    state = {f.id: f for f in kept}
    out = Reconciliation()
    added: dict[str, Fact] = {}
    changed: set[str] = set()

    def put(fact: Fact, *, new: bool) -> None:
        state[fact.id] = fact
        if new or fact.id in added:
            added[fact.id] = fact
        else:
            changed.add(fact.id)

    for cand in sorted(candidates, key=Fact.order):
        if cand.id in state:
            known = state[cand.id]
            if known.status == "rejected":
                out.outcomes.append(
                    Outcome(decision="rejected", fact=known, findings=known.findings)
                )
            else:
                _join(out, state, known, cand)
            continue
        findings = scan(scanned_text(cand))
        if findings:
            update: dict[str, Any] = {"status": "rejected", "findings": findings}
            kinds = sorted({str(f.category) for f in findings})
            if {"secret", "personal_data"} & set(kinds):  # never kept in clear, even rejected
                update |= {"text": f"[withheld: the admission scan found {', '.join(kinds)}]"}
                update |= {"value": None, "object_name": None}
            rejected = cand.model_copy(update=update)
            put(rejected, new=True)
            out.outcomes.append(Outcome(decision="rejected", fact=rejected, findings=findings))
            continue
        slot = [f for f in state.values() if f.slot == cand.slot and f.status == "current"]
        if not enabled or not slot:
            put(cand, new=True)
            out.outcomes.append(Outcome(decision="new", fact=cand))
            continue
        same = [f for f in slot if f.object_key == cand.object_key]
        if same:
            twin = max(same, key=Fact.order)
            if cand.confidence <= twin.confidence:
                _join(out, state, twin, cand)
                continue
            seen = [p for p in twin.provenance if p not in cand.provenance]
            version = cand.model_copy(
                update={"provenance": [*cand.provenance, *seen], "previous": twin.id}
            )
            put(version, new=True)
            put(_retire(twin, "superseded", version.id), new=False)
            out.outcomes.append(Outcome(decision="update", fact=version, target=twin.id))
            continue
        rivals = [f for f in slot if f.cardinality == "one"] if cand.cardinality == "one" else []
        if not rivals:
            put(cand, new=True)
            out.outcomes.append(Outcome(decision="new", fact=cand))
            continue
        rival = max(rivals, key=Fact.order)
        if cand.order() > rival.order():
            decision: Decision = "supersede" if cand.supersedes else "contradict"
            status: Retired = "superseded" if cand.supersedes else "contradicted"
            stored = cand.model_copy(update={"previous": rival.id})
            put(stored, new=True)
            for r in rivals:
                put(_retire(r, status, stored.id), new=False)
        else:
            decision = "supersede" if rival.supersedes else "contradict"
            status = "superseded" if rival.supersedes else "contradicted"
            stored = _retire(cand, status, rival.id)
            put(stored, new=True)
        out.outcomes.append(Outcome(decision=decision, fact=stored, target=rival.id))
    out.added = list(added.values())
    out.changed = [state[i] for i in sorted(changed)]
    return out


def _retire(fact: Fact, status: Retired, by: str) -> Fact:
    return fact.model_copy(update={"status": status, "superseded_by": by})


def _join(out: Reconciliation, state: dict[str, Fact], kept: Fact, cand: Fact) -> None:
    """A duplicate: the sightings ``kept`` lacks join it (``out.sightings``; the store adds
    them to its provenance table, and the kept row itself is not rewritten)."""
    new = [p for p in cand.provenance if p not in kept.provenance]
    out.sightings.extend((kept.id, p) for p in new)
    state[kept.id] = kept.model_copy(update={"provenance": [*kept.provenance, *new]})
    out.outcomes.append(Outcome(decision="duplicate", fact=cand, target=kept.id))


def rehome(fact: Fact, namespace: str) -> Fact:
    """``fact`` as a candidate in ``namespace``: current, unlinked, its provenance kept (which
    still names where it came from); its id as if first seen there."""
    origin = fact.provenance[0] if fact.provenance else None
    new_id = fact.id
    if namespace != fact.namespace and origin is not None:
        new_id = fact_id(namespace, fact.subject, fact.predicate, fact.object_key, origin)
    return fact.model_copy(
        update={
            "id": new_id,
            "namespace": namespace,
            "status": "current",
            "superseded_by": None,
            "previous": None,
            "findings": [],
        }
    )


def merge_candidates(theirs: Sequence[Fact], namespace: str) -> list[Fact]:
    """The current facts of ``theirs`` as candidates in ``namespace`` (:func:`rehome`)."""
    return [rehome(f, namespace) for f in theirs if f.status == "current"]


def merge_graphs(ours: Sequence[Fact], theirs: Sequence[Fact], *, namespace: str) -> Reconciliation:
    """Bring the current facts of ``theirs`` (another store's, or another namespace's) into
    ``namespace`` next to ``ours``, reconciled by the same rules (and scanned again): a
    conflict keeps both, the newer current. Merging the same graph twice adds nothing."""
    kept = [f for f in ours if f.namespace == namespace]
    return reconcile(kept, merge_candidates(theirs, namespace))
