"""The ``record_traces`` local activity: write a batch of a run's trace records to the store.

The workflow computes every record and its hash (deterministically) and sends them in batches;
writes are idempotent, so a retried batch never duplicates a record.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache

from temporalio import activity

from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.traces import TraceBatch

__all__ = ["record_traces", "store_for"]


@lru_cache(maxsize=4)
def store_for(url: str) -> TraceStore:
    """One TraceStore (engine and pool) per database URL per worker process."""
    return TraceStore(url)


@activity.defn(name="record_traces")
async def record_traces(batch: TraceBatch) -> int:
    """Store the batch; returns how many records were new."""
    store = store_for(database_url())
    return await asyncio.to_thread(store.write, batch.records)
