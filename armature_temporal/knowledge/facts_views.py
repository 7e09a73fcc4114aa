"""Facts as a prompt and a trace see them: staleness, injection within a budget, a fact's
history. Pure: the caller passes ``now``.

A fact is stale when its newest sighting is more than ``staleness_threshold_days`` old (0.7.0's
rule for remembered values: strictly older than the threshold, 30 days by default; 0 or
``None``: nothing is stale). A stale fact is still injected, marked ``[stale: ...]`` in the
prompt and named in :attr:`FactsInjection.stale_ids` for the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from armature_temporal.knowledge.facts_model import Fact, FactError, moment

__all__ = [
    "DEFAULT_STALENESS_DAYS",
    "FactsInjection",
    "age_days",
    "current_facts",
    "fact_history",
    "inject_facts",
    "is_stale",
]

DEFAULT_STALENESS_DAYS = 30.0
HEADER = "Facts kept from earlier runs (each with its id; stale and disputed ones marked):"


def age_days(fact: Fact, now: datetime) -> float:
    """Days since ``fact`` was last seen."""
    return (now - moment(fact.confirmed_at)).total_seconds() / 86400


def is_stale(fact: Fact, now: datetime, threshold_days: float | None) -> bool:
    """Whether ``fact``'s newest sighting is more than ``threshold_days`` before ``now``."""
    return bool(threshold_days) and age_days(fact, now) > float(threshold_days or 0)


def current_facts(facts: Sequence[Fact], namespace: str | None = None) -> list[Fact]:
    """The current facts (of ``namespace``), by confidence then recency, id last."""
    kept = [
        f
        for f in facts
        if f.status == "current" and (namespace is None or f.namespace == namespace)
    ]
    kept.sort(key=lambda f: f.id)
    kept.sort(key=lambda f: (f.confidence, moment(f.confirmed_at)), reverse=True)
    return kept


@dataclass
class FactsInjection:
    """What a prompt gets: ``text`` (at most the budget), ``items`` (0.7.0's
    ``_knowledge`` shape, ``{entity, fact, confidence}``, with ``id`` and ``stale`` besides),
    and for the trace the ids injected, the stale ones among them and how many did not fit."""

    text: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)
    fact_ids: list[str] = field(default_factory=list)
    stale_ids: list[str] = field(default_factory=list)
    omitted: int = 0

    def trace(self) -> dict[str, Any]:
        return {"facts": self.fact_ids, "stale": self.stale_ids, "omitted": self.omitted}


def _line(fact: Fact, by_id: dict[str, Fact], stale: bool, now: datetime) -> str:
    origin = fact.provenance[0] if fact.provenance else None
    where = f"; run {origin.run_id}, {origin.stage}" if origin else ""
    line = f"- [{fact.id}] {fact.text} (confidence {fact.confidence:.2f}{where})"
    if stale:
        line += f" [stale: last seen {int(age_days(fact, now))} days ago]"
    earlier = by_id.get(fact.previous or "")
    if earlier is not None and earlier.status == "contradicted":
        line += f" [disputed: {earlier.id} said {earlier.object_display!r}]"
    return line


def inject_facts(
    facts: Sequence[Fact],
    *,
    budget_chars: int,
    now: datetime,
    staleness_days: float | None = DEFAULT_STALENESS_DAYS,
    namespace: str | None = None,
) -> FactsInjection:
    """The current facts (of ``namespace``) for a prompt, best first (fresh before stale, then
    by confidence and recency), whole lines only, ``text`` no longer than ``budget_chars``:
    a line that does not fit is left out and counted, and a last line says how many were.
    ``facts`` may hold the history too: a current fact that won a contradiction is marked
    disputed, with what the other said."""
    by_id = {f.id: f for f in facts}
    ranked = current_facts(facts, namespace)
    ranked.sort(key=lambda f: is_stale(f, now, staleness_days))
    out = FactsInjection()
    lines = [HEADER]
    used = len(HEADER)
    for fact in ranked:
        stale = is_stale(fact, now, staleness_days)
        line = _line(fact, by_id, stale, now)
        if used + 1 + len(line) > budget_chars:
            out.omitted += 1
            continue
        lines.append(line)
        used += 1 + len(line)
        out.fact_ids.append(fact.id)
        if stale:
            out.stale_ids.append(fact.id)
        out.items.append(
            {
                "id": fact.id,
                "entity": fact.subject_name,
                "fact": fact.text,
                "confidence": fact.confidence,
                "stale": stale,
            }
        )
    if not out.fact_ids:
        out.omitted = len(ranked)
        return out
    while out.omitted:
        note = (
            f"(+{out.omitted} more not shown; with memory.navigation_tools, the facts_index "
            "and facts_entity tools list them)"
        )
        if used + 1 + len(note) <= budget_chars:
            lines.append(note)
            break
        dropped = lines.pop()  # make room for the note
        used -= 1 + len(dropped)
        gone = out.fact_ids.pop()
        out.items.pop()
        if gone in out.stale_ids:
            out.stale_ids.remove(gone)
        out.omitted += 1
        if not out.fact_ids:
            return FactsInjection(omitted=len(ranked))
    out.text = "\n".join(lines)
    return out


def fact_history(facts: Sequence[Fact], fact_id: str) -> list[Fact]:
    """Every version kept of ``fact_id``'s slot (its namespace, subject and predicate),
    oldest first: what it replaced, what replaced it, what disagreed with it.

    Raises:
        FactError: no fact has that id.
    """
    by_id = {f.id: f for f in facts}
    fact = by_id.get(fact_id)
    if fact is None:
        raise FactError(
            f"no fact {fact_id!r}; list them with `armature knowledge facts list --all`"
        )
    return sorted((f for f in facts if f.slot == fact.slot), key=Fact.order)
