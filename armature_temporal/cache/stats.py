"""``armature cache stats``: a spec's cache entries by status and stage, its hits (exact and
semantic), the cost they saved (each hit saves what its source attempt cost) and a sample of
recent hits to audit, each query task beside the task whose answer it reused."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from armature_temporal.store import TraceStore

__all__ = ["CacheStats", "HitSample", "StageEntries", "cache_stats"]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class StageEntries(_View):
    stage_id: str
    servable: int
    pending: int
    withheld: int
    expired: int
    hits: int


class HitSample(_View):
    """One served answer: the task asked, the task whose answer it reused, how similar."""

    at: str
    kind: str
    similarity: float
    run_id: str
    stage_id: str
    source_run: str | None
    task: str
    source_task: str | None
    saved_cost_usd: float


class CacheStats(_View):
    spec_name: str
    entries: dict[str, int]
    stages: list[StageEntries]
    withheld_reasons: dict[str, int]
    hits: dict[str, int]
    saved_cost_usd: float
    sample: list[HitSample]


def _reason_kind(reason: str | None) -> str:
    """A withheld reason without its figures (``judge grade scored it 0.12`` → ``judge
    grade scored it``), so they count together."""
    text = reason or "unknown"
    return text.split(" (")[0].rstrip("0123456789. ")


def cache_stats(store: TraceStore, spec_name: str, *, sample: int = 10) -> CacheStats:
    """What the store holds for ``spec_name``'s cache (see the module docstring)."""
    now = datetime.now(UTC).isoformat()
    entries = store.cache_entries(spec_name)
    hits = store.cache_hits(spec_name)
    status: Counter[str] = Counter()
    per_stage: dict[str, Counter[str]] = {}
    reasons: Counter[str] = Counter()
    for e in entries:
        counts = per_stage.setdefault(e.stage_id, Counter())
        state = "expired" if e.status == "servable" and e.expires_at <= now else e.status
        status[state] += 1
        counts[state] += 1
        counts["hits"] += e.hits
        if e.status == "withheld":
            reasons[_reason_kind(e.reason)] += 1
    kinds = Counter(h["kind"] for h in hits)
    shown: list[dict[str, Any]] = hits[:sample]
    return CacheStats(
        spec_name=spec_name,
        entries={s: status[s] for s in ("servable", "pending", "withheld", "expired")},
        stages=[
            StageEntries(
                stage_id=stage,
                **{k: c[k] for k in ("servable", "pending", "withheld", "expired", "hits")},
            )
            for stage, c in sorted(per_stage.items())
        ],
        withheld_reasons=dict(reasons.most_common()),
        hits={"exact": kinds["exact"], "semantic": kinds["semantic"], "all": len(hits)},
        saved_cost_usd=round(sum(float(h["saved_cost_usd"] or 0) for h in hits), 6),
        sample=[
            HitSample(
                at=h["at"],
                kind=h["kind"],
                similarity=h["similarity"],
                run_id=h["run_id"],
                stage_id=h["stage_id"],
                source_run=h["source_run"],
                task=h["task"],
                source_task=h["source_task"],
                saved_cost_usd=h["saved_cost_usd"],
            )
            for h in shown
        ],
    )
