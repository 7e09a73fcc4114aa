"""The cross-run memory activities: ``load_memory`` reads what earlier runs of a spec captured,
``capture_memory`` keeps a finished stage's named output values. Both are local activities of
the interpreter (short database calls), and both are idempotent under retry."""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.traces import store_for
from armature_temporal.runtime.models import MemoryCapture, MemoryQuery, MemoryValues
from armature_temporal.store.engine import database_url

__all__ = ["capture_memory", "load_memory"]


@activity.defn(name="load_memory")
async def load_memory(query: MemoryQuery) -> MemoryValues:
    """The values kept under the query's memory name, oldest first, each ``stage.key`` cut
    to its newest ``limits`` values."""
    store = await asyncio.to_thread(store_for, database_url())  # opening it may block
    entries = await asyncio.to_thread(store.memory, query.memory_name, query.limits)
    return MemoryValues(entries=entries)


@activity.defn(name="capture_memory")
async def capture_memory(capture: MemoryCapture) -> int:
    """Keep the values (once per run, stage and key) and trim each window; returns how many
    were new."""
    store = await asyncio.to_thread(store_for, database_url())  # opening it may block
    return await asyncio.to_thread(
        store.remember, capture.memory_name, capture.entries, capture.limits
    )
