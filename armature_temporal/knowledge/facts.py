"""Facts that outlive a run (issue #30 item 8; 0.7.0's ``extract_knowledge``, ``reconcile``,
``inject_knowledge_as`` and ``navigation_tools``), as pure functions over :class:`Fact`.

After a stage, :func:`extract_facts` reads the facts its structured output states
(:mod:`.facts_extract` documents the shapes), each with its provenance. :func:`reconcile`
screens every candidate with the heuristics memory's admission scan and compares it with the
facts kept: duplicate, update, supersede or contradict, nothing overwritten, the newer current
(:mod:`.facts_reconcile`); the store applies the result
(:class:`~armature_temporal.store.facts.FactStore`). :func:`inject_facts` renders the current
facts for a prompt within a character budget, stale ones marked (:mod:`.facts_views`), and
:func:`navigate` answers the read-only tools (:data:`NAVIGATION_TOOLS`) that let an agent
walk the graph of entities and relations, a summary first (:mod:`.facts_navigate`).
:func:`merge_graphs` brings in another store's or namespace's facts by the same rules.
"""

from __future__ import annotations

from armature_temporal.knowledge.facts_extract import Extraction, extract_facts
from armature_temporal.knowledge.facts_model import (
    Entity,
    Fact,
    FactError,
    FactKind,
    FactStatus,
    Provenance,
    Relation,
    entity_key,
)
from armature_temporal.knowledge.facts_navigate import (
    LEGACY_TOOL_NAMES,
    NAVIGATION_TOOLS,
    entity_view,
    graph_index,
    navigate,
    relations,
)
from armature_temporal.knowledge.facts_reconcile import (
    Decision,
    Outcome,
    Reconciliation,
    merge_graphs,
    reconcile,
)
from armature_temporal.knowledge.facts_views import (
    DEFAULT_STALENESS_DAYS,
    FactsInjection,
    fact_history,
    inject_facts,
    is_stale,
)

__all__ = [
    "DEFAULT_STALENESS_DAYS",
    "LEGACY_TOOL_NAMES",
    "NAVIGATION_TOOLS",
    "Decision",
    "Entity",
    "Extraction",
    "Fact",
    "FactError",
    "FactKind",
    "FactStatus",
    "FactsInjection",
    "Outcome",
    "Provenance",
    "Reconciliation",
    "Relation",
    "entity_key",
    "entity_view",
    "extract_facts",
    "fact_history",
    "graph_index",
    "inject_facts",
    "is_stale",
    "merge_graphs",
    "navigate",
    "reconcile",
    "relations",
]
