"""The answer cache's local activities: ``cache_lookup`` before a model call, ``cache_keep``
after a valid answer, ``cache_settle`` at the run's end (:mod:`workflows.interpreter.cache`).

A lookup renders the call's messages exactly as ``llm_call`` does, so its exact key is the
request's. Semantic lookups search a :class:`~armature_temporal.cache.index.SemanticIndex` of
the partition's servable entries, built once per worker process and rebuilt when the
partition's entries change (:meth:`~armature_temporal.store.TraceStore.cache_version`).
Stages with lifecycle hooks at ``pre_stage`` or ``post_stage`` are never served: a hook may
modify or block what the model sees or says, and a cached answer would skip it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from temporalio import activity

from activities.traces import store_for
from armature_temporal.cache.keys import exact_key, partition_key, render_messages, task_of
from armature_temporal.cache.models import (
    CacheEntry,
    CacheHit,
    CacheKeep,
    CacheLookup,
    CacheProbe,
    CacheSettle,
)
from armature_temporal.runtime.confidence import confidence_of
from armature_temporal.runtime.hooks import HookRegistry
from armature_temporal.store.engine import database_url

__all__ = ["cache_hit", "cache_keep", "cache_lookup", "cache_settle", "embed_task"]

#: Semantic indexes kept per worker process: partition -> (version, embedding model, index).
_INDEXES: dict[str, tuple[Any, str, Any]] = {}


@lru_cache(maxsize=2)
def _embedder() -> Any:
    from armature_temporal.experience.embeddings import get_embedder

    return get_embedder(None)


def embed_task(task: str) -> tuple[list[float], str]:
    """The task's embedding and the embedder's name (the local model, else lexical)."""
    from armature_temporal.experience.embeddings import LOCAL_MODEL, LexicalEmbedder

    embedder = _embedder()
    name = "lexical" if isinstance(embedder, LexicalEmbedder) else LOCAL_MODEL
    return embedder.embed([task])[0], name


def _hooked() -> bool:
    registry = HookRegistry.default()
    return bool(registry.hooks("pre_stage") or registry.hooks("post_stage"))


def _hit(entry: CacheEntry, kind: str, similarity: float) -> CacheHit:
    return CacheHit(
        kind=kind,  # type: ignore[arg-type]
        entry_id=entry.id,
        source_run=entry.run_id,
        similarity=similarity,
        output=entry.output,
        text=entry.text,
        model=entry.model,
        simulated_quality=entry.simulated_quality,
        saved_cost_usd=entry.cost_usd,
        source_task=entry.task,
    )


def _nearest(
    store: Any, partition: str, vector: list[float], model: str, threshold: float
) -> tuple[str, float]:
    """The partition's nearest servable entry to ``vector`` and its cosine ('' when none
    reaches ``threshold``)."""
    from armature_temporal.cache.index import SemanticIndex

    version = store.cache_version(partition)
    known = _INDEXES.get(partition)
    if known is None or known[0] != version or known[1] != model:
        rows = store.cache_vectors(partition, model)
        index = SemanticIndex(len(vector))
        if rows:
            index.add([r[0] for r in rows], [r[1] for r in rows])
        _INDEXES[partition] = known = (version, model, index)
    found = known[2].nearest(vector, min_score=threshold) if len(known[2]) else None
    return found if found is not None else ("", 0.0)


def _lookup(query: CacheLookup, adapter: str | None, started: float) -> CacheProbe:
    inp = query.call
    try:
        messages = render_messages(inp)
    except TemplateError:
        return CacheProbe(skipped="the prompt does not render (llm_call reports why)")
    if _hooked():
        return CacheProbe(skipped="lifecycle hooks at pre_stage/post_stage are registered")
    rendered = json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)
    probe = CacheProbe(
        exact_key=exact_key(inp, messages, adapter),
        partition=partition_key(inp, query.spec_hash, query.config.scope),
        task=task_of(messages),
        inputs_hash=hashlib.sha256(rendered.encode("utf-8")).hexdigest(),
        messages=messages,
    )
    store = store_for(database_url())
    hit: CacheHit | None = None
    if query.exact:
        entry = store.cache_exact(probe.exact_key, spec_name=inp.spec_name)
        if entry is not None:
            hit = _hit(entry, "exact", 1.0)
    if hit is None and query.semantic and probe.task:
        from armature_temporal.cache.semantic import DEFAULT_THRESHOLD, is_hit

        vector, model = embed_task(probe.task)
        threshold = query.config.threshold or DEFAULT_THRESHOLD
        decider = query.config.semantic_decider
        min_score = threshold
        if decider == "classifier":  # the nearest entry above the model's floor is asked
            from armature_temporal.cache.pairs import load_pair_model

            min_score = load_pair_model().floor
        entry_id, similarity = _nearest(store, probe.partition, vector, model, min_score)
        entry = store.cache_entry(entry_id) if entry_id else None
        if (
            entry is not None
            and entry.status == "servable"
            and entry.expires_at > datetime.now(UTC).isoformat()  # the index may predate it
            and is_hit(similarity, threshold, query=probe.task, source=entry.task, decider=decider)
        ):
            hit = _hit(entry, "semantic", round(float(similarity), 6))
    if hit is not None:
        stated = {"text": hit.text, "output": hit.output, "schema": inp.stage.output_schema}
        hit = hit.model_copy(update={"confidence": confidence_of(**stated, logprobs=None)})
    latency = (time.perf_counter() - started) * 1000
    # The messages travel (in the run's history) only with a hit, whose attempt records them;
    # on a miss llm_call's result carries them.
    messages = probe.messages if hit is not None else []
    return probe.model_copy(update={"hit": hit, "latency_ms": latency, "messages": messages})


@activity.defn(name="cache_lookup")
async def cache_lookup(query: CacheLookup) -> CacheProbe:
    """A servable answer for the call (exact first, then semantic), or the keys to keep the
    model's answer under. Recording the hit is :func:`cache_keep`'s caller's business."""
    from activities.llm import _adapter_for

    started = time.perf_counter()
    inp = query.call
    adapter = await _adapter_for(inp) if inp.tier.provider == "local" else None
    return await asyncio.to_thread(_lookup, query, adapter, started)


def _keep(keep: CacheKeep) -> bool:
    probe = keep.probe
    created = datetime.now(UTC)
    vector: list[float] | None = None
    model: str | None = None
    if keep.semantic and probe.task:
        vector, model = embed_task(probe.task)
    entry = CacheEntry(
        id=hashlib.sha256(
            f"{keep.run_id}/{keep.stage_id}/{keep.attempt}/{probe.exact_key}".encode()
        ).hexdigest()[:40],
        spec_name=keep.spec_name,
        spec_hash=keep.spec_hash,
        stage_id=keep.stage_id,
        tier=keep.tier,
        exact_key=probe.exact_key,
        partition=probe.partition,
        task=probe.task,
        embedding=vector,
        embedding_model=model,
        output=keep.output,
        text=keep.text,
        model=keep.model,
        simulated_quality=keep.simulated_quality,
        cost_usd=keep.cost_usd,
        latency_ms=keep.latency_ms,
        prompt_tokens=keep.prompt_tokens,
        completion_tokens=keep.completion_tokens,
        run_id=keep.run_id,
        attempt=keep.attempt,
        created_at=created.isoformat(),
        expires_at=(created + timedelta(seconds=keep.config.ttl)).isoformat(),
    )
    store = store_for(database_url())
    return bool(store.put_cache_entry(entry, max_entries=keep.config.max_entries))


@activity.defn(name="cache_keep")
async def cache_keep(keep: CacheKeep) -> bool:
    """Keep a valid answer as a pending entry of its run (idempotent); True if it was new."""
    return await asyncio.to_thread(_keep, keep)


@activity.defn(name="cache_hit")
async def cache_hit(hit: dict[str, Any]) -> bool:
    """Record a served answer (once per run, stage and attempt) for stats and audit."""
    store = await asyncio.to_thread(store_for, database_url())
    entry = await asyncio.to_thread(store.cache_entry, hit["entry_id"])
    if entry is None:  # cleared meanwhile: the trace still has the hit
        return False
    return bool(
        await asyncio.to_thread(
            lambda: store.record_cache_hit(
                entry=entry,
                run_id=hit["run_id"],
                stage_id=hit["stage_id"],
                attempt_key=hit["attempt_key"],
                kind=hit["kind"],
                similarity=hit["similarity"],
                task=hit["task"],
            )
        )
    )


@activity.defn(name="cache_settle")
async def cache_settle(settle: CacheSettle) -> dict[str, int]:
    """Make the run's pending entries servable, or withheld with the reason."""
    store = await asyncio.to_thread(store_for, database_url())
    return dict(
        await asyncio.to_thread(
            lambda: store.settle_cache(
                settle.run_id, reason=settle.reason, withheld=settle.withheld
            )
        )
    )
