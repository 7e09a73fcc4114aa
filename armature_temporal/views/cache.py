"""The dashboard's cache section: per spec version, how many model attempts the answer cache
served (exact and semantic), the cost those hits saved (each saves what its source attempt
cost) and a few recent hits to audit (the task asked beside the source run), from the
attempt records (``data.cache``) alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.views.report import _View

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["CacheHitView", "CacheUsage", "cache_panel", "cache_usage"]

#: Recent hits a version's cache section lists.
HIT_SAMPLE = 5


class CacheHitView(_View):
    run_id: str
    stage_id: str | None
    kind: str
    similarity: float | None
    source_run: str | None
    saved_cost_usd: float


class CacheUsage(_View):
    """``attempts``: all model attempts; ``hits``: those the cache served."""

    attempts: int
    hits: int
    exact: int
    semantic: int
    hit_rate: float | None
    saved_cost_usd: float
    recent: list[CacheHitView]


def cache_usage(records: Sequence[TraceRecord]) -> CacheUsage:
    attempts = [r for r in records if r.kind == "attempt"]
    hits = [r for r in attempts if r.data.get("cache") in ("exact", "semantic")]
    return CacheUsage(
        attempts=len(attempts),
        hits=len(hits),
        exact=sum(r.data["cache"] == "exact" for r in hits),
        semantic=sum(r.data["cache"] == "semantic" for r in hits),
        hit_rate=round(len(hits) / len(attempts), 4) if attempts else None,
        saved_cost_usd=round(sum(float(r.data.get("saved_cost_usd") or 0) for r in hits), 6),
        recent=[
            CacheHitView(
                run_id=r.run_id,
                stage_id=r.stage_id,
                kind=r.data["cache"],
                similarity=r.data.get("similarity"),
                source_run=r.data.get("source_run"),
                saved_cost_usd=float(r.data.get("saved_cost_usd") or 0),
            )
            for r in hits[-HIT_SAMPLE:][::-1]
        ],
    )


def cache_panel(versions: Sequence[Any]) -> list[RenderableType]:
    """A panel of cache hits per version, or nothing when no version had a hit."""
    if not any(v.cache is not None and v.cache.hits for v in versions):
        return []
    from rich.panel import Panel
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("version", "attempts", "hits", "exact", "semantic", "hit rate", "saved"):
        table.add_column(column, no_wrap=True)
    for v in versions:
        c = v.cache
        if c is None:
            continue
        rate = "—" if c.hit_rate is None else f"{c.hit_rate:.0%}"
        label = f"v{v.spec_version or '?'} {v.spec_hash[:8]}"
        table.add_row(
            label, str(c.attempts), str(c.hits), str(c.exact), str(c.semantic), rate,
            f"${c.saved_cost_usd:.4f}",
        )  # fmt: skip
    title = "answer cache (armature cache stats SPEC audits the hits)"
    return [Panel(table, title=title, title_align="left", expand=False)]
