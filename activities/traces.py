"""The ``record_traces`` local activity: write a batch of a run's trace records to the store.

The workflow computes every record and its hash (deterministically) and sends them in batches;
writes are idempotent, so a retried batch never duplicates a record. The records a write
actually inserted are counted in the worker's Prometheus metrics
(:func:`~armature_temporal.telemetry.metrics.observe_records`). A write that appends to
the store-wide ledger hands its new head to the worker's
:class:`~armature_temporal.service.anchors.LedgerAnchorSender`, which anchors it in Temporal in
the background.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any

from temporalio import activity
from temporalio.client import Client

from armature_temporal.runtime.ledger_anchor import LedgerAnchorState
from armature_temporal.runtime.models import PriorRunQuery, PriorRunResult
from armature_temporal.runtime.traces import TraceBatch, TraceRecord
from armature_temporal.service.anchors import LedgerAnchorSender
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.telemetry.metrics import observe_records

__all__ = ["anchor_sender", "load_prior_run", "record_traces", "store_for"]


@lru_cache(maxsize=4)
def store_for(url: str) -> TraceStore:
    """One TraceStore (engine and pool) per database URL per worker process."""
    return TraceStore(url)


@lru_cache(maxsize=4)
def anchor_sender(client: Client) -> LedgerAnchorSender:
    """One sender of ledger heads per Temporal client per worker process."""
    return LedgerAnchorSender(client)


@activity.defn(name="record_traces")
async def record_traces(batch: TraceBatch) -> int | dict[str, Any]:
    """Store the batch, each record with its MAC (the store computes them with the trace key
    under ARMATURE_HOME; the workflow never sees the key). Returns how many records were new,
    or with ``batch.ack`` that and the store's id."""
    store = await asyncio.to_thread(store_for, database_url())  # opening it may block
    new = await asyncio.to_thread(store.write_new, batch.records)
    hqs = await asyncio.to_thread(_count, store, new)
    _anchor_head(store)
    if not batch.ack:
        return len(new)
    ack: dict[str, Any] = {"stored": len(new), "store": await asyncio.to_thread(store.store_id)}
    if hqs:  # the run ended with this batch: its HQS goes on its invoke_workflow span
        ack["hqs"] = hqs
    return ack


def _count(store: TraceStore, new: list[TraceRecord]) -> dict[str, float | None]:
    """Add the newly stored records to this worker's metrics (only new ones: a retried batch,
    or one a replay re-sends, counts nothing again), with the HQS the store gave each run
    that ended; returns those HQS by run id."""
    hqs: dict[str, float | None] = {}
    for r in new:
        if r.kind == "run_end":
            row = store.run(r.run_id)
            hqs[r.run_id] = row.hqs if row is not None else None
    try:
        observe_records(new, hqs)
    except Exception:  # a view of the record never fails the write (it has landed)
        activity.logger.warning(
            "metrics not updated for %d trace record(s)", len(new), exc_info=True
        )
    return hqs


def _anchor_head(store: TraceStore) -> None:
    """Hand the newest ledger head this worker appended to the sender (it returns at once)."""
    head = store.ledger_head()
    if head is None:
        return
    key = store.trace_key()
    start = LedgerAnchorState(
        database=store.database_identity(),
        key_id=key.key_id if key is not None else "",
        store_id=head.store_id,
        genesis=head.genesis,
    )
    anchor_sender(activity.client()).note(start, head, store.runs_started)


def _carry(outputs: dict[str, Any], carry_forward: dict[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, ref in carry_forward.items():
        stage, _, field = ref.partition(".")
        output = outputs.get(stage)
        values[key] = output.get(field) if isinstance(output, dict) else None
    return values


@activity.defn(name="load_prior_run")
async def load_prior_run(query: PriorRunQuery) -> PriorRunResult:
    """The carry_forward values of the latest completed run of a spec, read from the store
    (full values, not strings); empty values when there is none yet."""
    store = await asyncio.to_thread(store_for, database_url())  # opening it may block
    runs = await asyncio.to_thread(store.runs, spec=query.spec_name, limit=50)
    for run in runs:
        if run.status == "completed" and run.run_id != query.exclude_run_id:
            return PriorRunResult(
                run_id=run.run_id, values=_carry(run.outputs or {}, query.carry_forward)
            )
    return PriorRunResult(values={key: None for key in query.carry_forward})
