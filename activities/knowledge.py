"""The retrieval activity: ``search_knowledge`` searches a knowledge collection in the trace
store for a stage's ``retrieve:`` or a model's ``retrieve`` tool call. It runs on the main task
queue (the tools worker holds no store credentials) as a regular activity: the first search of
a worker process loads the embedding model."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.traces import store_for
from armature_temporal.knowledge import search
from armature_temporal.knowledge.citing import passage, screened
from armature_temporal.runtime.retrieval import KnowledgeFound, KnowledgeQuery
from armature_temporal.store.engine import database_url
from armature_temporal.store.knowledge import KnowledgeError

__all__ = ["search_knowledge"]


@activity.defn(name="search_knowledge")
async def search_knowledge(query: KnowledgeQuery) -> KnowledgeFound:
    """The passages that best match the query, each scanned (:func:`screened`). A collection
    with nothing indexed fails for good (``knowledge_empty``), with the command that builds
    it."""
    store = await asyncio.to_thread(store_for, database_url())  # opening it may block
    try:
        hits = await asyncio.to_thread(
            search,
            store,
            query.collection,
            query.query,
            k=query.k,
            mode=query.mode,
            sources=query.sources or None,
        )
    except KnowledgeError as exc:
        raise ApplicationError(str(exc), type="knowledge_empty", non_retryable=True) from exc
    # Documents can carry text aimed at the model (a web page, a document from elsewhere):
    # each passage is scanned as it enters a prompt, as a tool's result is.
    return KnowledgeFound(passages=[screened(passage(h)) for h in hits])
