"""The facts activities (local activities of the interpreter: short store calls):
``load_facts`` renders a namespace's current facts for a run's prompts, ``record_facts``
extracts the facts a stage's output states and reconciles them with the kept ones (the
admission scan runs inside the store's ``add_facts``, so nothing skips it), ``navigate_facts``
answers a navigation tool read-only. Each is idempotent under retry: fact ids are
deterministic, and a sighting is kept once per run, stage and field."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from temporalio import activity

from activities.traces import store_for
from armature_temporal.knowledge.facts import extract_facts, inject_facts, navigate
from armature_temporal.runtime.facts_io import (
    FactsLoaded,
    FactsNavigate,
    FactsQuery,
    FactsRecord,
    FactsRecorded,
)
from armature_temporal.store.engine import database_url

__all__ = ["load_facts", "navigate_facts", "record_facts"]


def _load(query: FactsQuery) -> FactsLoaded:
    store = store_for(database_url())
    facts = store.facts(query.namespace, history=True)
    injected = inject_facts(
        facts,
        budget_chars=query.budget_chars,
        now=datetime.fromisoformat(query.now),
        staleness_days=query.staleness_days,
        namespace=query.namespace,
    )
    text = injected.text
    if not text and injected.omitted:  # none fits: the prompt still says they exist
        text = (
            f"Facts kept from earlier runs: {injected.omitted}, none within "
            "memory.knowledge_budget_chars (raise it, or read them with the navigation tools)."
        )
    return FactsLoaded(
        text=text,
        items=injected.items,
        trace=injected.trace(),
    )


@activity.defn(name="load_facts")
async def load_facts(query: FactsQuery) -> FactsLoaded:
    """The current facts of the namespace, within the budget, stale ones marked."""
    return await asyncio.to_thread(_load, query)


def _record(inp: FactsRecord) -> FactsRecorded:
    extraction = extract_facts(
        inp.output,
        namespace=inp.namespace,
        run_id=inp.run_id,
        stage=inp.stage,
        recorded_at=inp.recorded_at,
    )
    if not extraction.facts:
        return FactsRecorded(skipped=dict(extraction.skipped))
    store = store_for(database_url())
    done = store.add_facts(extraction.facts, enabled=inp.reconcile)
    return FactsRecorded(
        summary={k: v for k, v in done.summary().items() if v},
        fact_ids=sorted({o.fact.id for o in done.outcomes if o.decision != "rejected"}),
        rejected={
            o.fact.id: [f"{f.category} ({f.rule})" for f in o.findings]
            for o in done.outcomes
            if o.decision == "rejected"
        },
        skipped=dict(extraction.skipped),
    )


@activity.defn(name="record_facts")
async def record_facts(inp: FactsRecord) -> FactsRecorded:
    """Extract, screen, reconcile and keep the facts one stage's output states."""
    return await asyncio.to_thread(_record, inp)


def _navigate(call: FactsNavigate) -> dict[str, Any]:
    store = store_for(database_url())
    return navigate(
        call.tool,
        call.arguments,
        store.facts(call.namespace, history=True),
        now=datetime.fromisoformat(call.now),
        staleness_days=call.staleness_days,
    )


@activity.defn(name="navigate_facts")
async def navigate_facts(call: FactsNavigate) -> dict[str, Any]:
    """A navigation tool's answer (read-only)."""
    return await asyncio.to_thread(_navigate, call)
