"""The facts graph as agents read it: read-only tools that disclose it progressively.

An agent first gets the index (:func:`graph_index`: the entities, each with how many facts
and relations it has; 0.7.0's ``_memory_index`` gave record counts by type), then asks for an
entity (:func:`entity_view`: its facts and its relations out and in, with ``detail`` their
provenance), for facts by id (:func:`facts_by_id`: each with its history) or searches
(:func:`search_facts`). :data:`NAVIGATION_TOOLS` describes the four tools (name, description,
JSON schema of the arguments) and :func:`navigate` answers a call; both are pure functions of
the facts passed in, and nothing here writes. 0.7.0's ``memory.search_records`` and
``memory.get_records`` are :data:`LEGACY_TOOL_NAMES` for ``facts_search`` and ``facts_get``.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from armature_temporal.knowledge.facts_model import (
    Entity,
    Fact,
    FactError,
    Relation,
    entity_key,
)
from armature_temporal.knowledge.facts_views import (
    DEFAULT_STALENESS_DAYS,
    current_facts,
    fact_history,
    is_stale,
)

__all__ = [
    "LEGACY_TOOL_NAMES",
    "NAVIGATION_TOOLS",
    "entities",
    "entity_view",
    "facts_by_id",
    "graph_index",
    "navigate",
    "relations",
    "search_facts",
]

NAVIGATION_TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "facts_index",
        "description": "The entities the kept facts are about, each with how many facts and "
        "relations it has and how many are stale. Start here, then call facts_entity.",
        "parameters": {
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 200}},
            "additionalProperties": False,
        },
    },
    {
        "name": "facts_entity",
        "description": "One entity's current facts and its relations to other entities "
        "(out and in). detail: true adds each fact's provenance (run, stage, when).",
        "parameters": {
            "type": "object",
            "properties": {"entity": {"type": "string"}, "detail": {"type": "boolean"}},
            "required": ["entity"],
            "additionalProperties": False,
        },
    },
    {
        "name": "facts_get",
        "description": "Facts by id, each with its provenance and its history (the versions "
        "it replaced or that replaced it, and claims that disagreed).",
        "parameters": {
            "type": "object",
            "properties": {"ids": {"type": "array", "items": {"type": "string"}}},
            "required": ["ids"],
            "additionalProperties": False,
        },
    },
    {
        "name": "facts_search",
        "description": "Current facts whose words match a query, best first.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "k": {"type": "integer", "minimum": 1, "maximum": 50},
                "type": {"enum": ["fact", "event", "instruction", "preference"]},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
)
LEGACY_TOOL_NAMES = {"memory.search_records": "facts_search", "memory.get_records": "facts_get"}


def entities(
    facts: Sequence[Fact], now: datetime, staleness_days: float | None = DEFAULT_STALENESS_DAYS
) -> list[Entity]:
    """The graph's nodes: every entity a current fact names, most connected first."""
    found: dict[str, dict[str, Any]] = {}
    lost = {f.id for f in facts if f.status == "contradicted"}

    def node(key: str, name: str) -> dict[str, Any]:
        return found.setdefault(key, {"key": key, "name": name, "facts": 0, "stale": 0})

    for fact in sorted(current_facts(facts), key=Fact.order):
        subject = node(fact.subject, fact.subject_name)
        subject["facts"] += 1
        subject["stale"] += is_stale(fact, now, staleness_days)
        subject.setdefault("first_seen", fact.provenance[0] if fact.provenance else None)
        subject["disputed"] = subject.get("disputed", False) or fact.previous in lost
        if fact.object_entity is not None:
            subject["relations_out"] = subject.get("relations_out", 0) + 1
            target = node(fact.object_entity, fact.object_name or fact.object_entity)
            target["relations_in"] = target.get("relations_in", 0) + 1
    made = [Entity(**n) for n in found.values()]
    return sorted(made, key=lambda e: (-(e.facts + e.relations_in), e.key))


def relations(facts: Sequence[Fact]) -> list[Relation]:
    """The graph's edges: every current fact whose object is an entity, with its provenance."""
    return [
        Relation(
            fact_id=f.id,
            subject=f.subject,
            predicate=f.predicate,
            object=f.object_entity,
            text=f.text,
            provenance=f.provenance,
        )
        for f in current_facts(facts)
        if f.object_entity is not None
    ]


def _brief(fact: Fact, now: datetime, staleness_days: float | None) -> dict[str, Any]:
    return {
        "id": fact.id,
        "predicate": fact.predicate,
        "object": fact.object_display,
        "text": fact.text,
        "confidence": fact.confidence,
        "stale": is_stale(fact, now, staleness_days),
    }


def graph_index(
    facts: Sequence[Fact],
    *,
    now: datetime,
    staleness_days: float | None = DEFAULT_STALENESS_DAYS,
    limit: int = 50,
) -> dict[str, Any]:
    """The first thing an agent reads: the entities (at most ``limit``), counts of facts by
    kind, and how to go further."""
    nodes = entities(facts, now, staleness_days)
    current = current_facts(facts)
    return {
        "entities": [
            {
                "entity": e.name,
                "facts": e.facts,
                "relations_out": e.relations_out,
                "relations_in": e.relations_in,
                "stale": e.stale,
                "disputed": e.disputed,
            }
            for e in nodes[:limit]
        ],
        "more_entities": max(0, len(nodes) - limit),
        "total_entities": len(nodes),
        "total_facts": len(current),
        "facts_by_kind": dict(sorted(Counter(f.kind for f in current).items())),
        "next": "facts_entity {entity} for an entity's facts and relations",
    }


def _resolve(facts: Sequence[Fact], entity: str, now: datetime) -> Entity:
    nodes = {e.key: e for e in entities(facts, now, None)}
    found = nodes.get(entity_key(entity))
    if found is None:
        names = sorted(e.name for e in nodes.values())
        close = difflib.get_close_matches(entity, names, n=3)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise FactError(f"no entity {entity!r} among the current facts{hint}; known: {names[:20]}")
    return found


def entity_view(
    facts: Sequence[Fact],
    entity: str,
    *,
    now: datetime,
    staleness_days: float | None = DEFAULT_STALENESS_DAYS,
    detail: bool = False,
) -> dict[str, Any]:
    """One entity's current facts (attributes), relations out and in; ``detail`` adds each
    one's provenance. Raises :class:`FactError` naming the entity and the known ones."""
    node = _resolve(facts, entity, now)

    def shown(fact: Fact) -> dict[str, Any]:
        brief = _brief(fact, now, staleness_days)
        if detail:
            brief["provenance"] = [p.model_dump() for p in fact.provenance]
            brief["previous"] = fact.previous
        return brief

    current = sorted(current_facts(facts), key=lambda f: (f.predicate, f.id))
    return {
        "entity": node.name,
        "facts": [shown(f) for f in current if f.subject == node.key and not f.is_relation],
        "relations_out": [shown(f) for f in current if f.subject == node.key and f.is_relation],
        "relations_in": [
            {**shown(f), "subject": f.subject_name} for f in current if f.object_entity == node.key
        ],
        "next": "facts_get {ids} for a fact's provenance and history",
    }


def facts_by_id(facts: Sequence[Fact], ids: Sequence[str]) -> list[dict[str, Any]]:
    """The facts named (any status), each with its full record and its slot's history."""
    known = {f.id: f for f in facts}
    shown: list[dict[str, Any]] = []
    for fid in ids:
        if fid not in known:
            shown.append({"id": fid, "error": "no such fact"})
            continue
        fact = known[fid]
        if fact.status == "rejected":  # its text never reaches a prompt, not even by id
            kinds = sorted({str(f.category) for f in fact.findings})
            shown.append({"id": fid, "status": "rejected", "findings": kinds})
            continue
        record = fact.model_dump(mode="json")
        record["history"] = [
            {"id": h.id, "status": h.status, "object": h.object_display, "at": h.recorded_at}
            for h in fact_history(facts, fid)
            if h.status != "rejected"
        ]
        shown.append(record)
    return shown


def search_facts(
    facts: Sequence[Fact],
    query: str,
    *,
    k: int = 5,
    kind: str | None = None,
    now: datetime,
    staleness_days: float | None = DEFAULT_STALENESS_DAYS,
) -> list[dict[str, Any]]:
    """The ``k`` current facts sharing most words with ``query`` (ties: by confidence)."""
    words = set(re.findall(r"\w+", query.casefold()))
    scored = []
    for fact in current_facts(facts):
        if kind is not None and fact.kind != kind:
            continue
        have = set(re.findall(r"\w+", f"{fact.text} {fact.subject_name}".casefold()))
        hits = len(words & have)
        if hits:
            scored.append((hits, fact))
    scored.sort(key=lambda x: -x[0])  # stable: current_facts' order breaks ties
    return [{**_brief(f, now, staleness_days), "entity": f.subject_name} for _, f in scored[:k]]


def navigate(
    tool: str,
    args: Mapping[str, Any],
    facts: Sequence[Fact],
    *,
    now: datetime,
    staleness_days: float | None = DEFAULT_STALENESS_DAYS,
) -> dict[str, Any]:
    """Answer one call of a navigation tool (or of its 0.7.0 name). An argument the agent got
    wrong, or an entity not there, is answered ``{"error": ...}`` for it to read.

    Raises:
        FactError: ``tool`` is not a navigation tool (the caller's mistake, not the agent's).
    """
    name = LEGACY_TOOL_NAMES.get(tool, tool)
    try:
        if name == "facts_index":
            limit = min(max(int(args.get("limit", 50)), 1), 200)
            return graph_index(facts, now=now, staleness_days=staleness_days, limit=limit)
        if name == "facts_entity":
            entity = args.get("entity")
            if not isinstance(entity, str):
                return {"error": f"entity must be an entity's name, got {entity!r}"}
            detail = bool(args.get("detail", False))
            return entity_view(facts, entity, now=now, staleness_days=staleness_days, detail=detail)
        if name == "facts_get":
            ids = args.get("ids")
            if not isinstance(ids, list):
                return {"error": f"ids must be a list of fact ids, got {ids!r}"}
            return {"facts": facts_by_id(facts, [str(i) for i in ids])}
        if name == "facts_search":
            query = args.get("query")
            if not isinstance(query, str):
                return {"error": f"query must be text, got {query!r}"}
            found = search_facts(
                facts,
                query,
                k=min(max(int(args.get("k", args.get("top_k", 5))), 1), 50),
                kind=args.get("type"),
                now=now,
                staleness_days=staleness_days,
            )
            return {"facts": found}
    except FactError as exc:
        return {"error": str(exc)}
    except (TypeError, ValueError) as exc:
        return {"error": f"bad arguments for {name}: {exc}"}
    known = [t["name"] for t in NAVIGATION_TOOLS]
    raise FactError(f"{tool!r} is not a facts navigation tool; they are {known}")
