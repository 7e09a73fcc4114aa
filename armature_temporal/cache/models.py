"""The cache's entry and the payloads of its activities (``cache_lookup``, ``cache_keep``,
``cache_settle``).

An entry is written ``pending`` when a run's attempt is valid; when the run ends it becomes
``servable`` (the run completed, no gate rejected, no judge scored the stage below
:data:`LOW_SCORE`) or ``withheld`` with the reason. Only servable, unexpired entries are served.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.confidence import Confidence
from armature_temporal.runtime.models import LLMCallInput
from armature_temporal.spec.caching import StageCache

__all__ = [
    "ENTRY_STATUSES",
    "LOW_SCORE",
    "CacheEntry",
    "CacheHit",
    "CacheKeep",
    "CacheLookup",
    "CacheProbe",
    "CacheSettle",
]

EntryStatus = Literal["pending", "servable", "withheld"]
ENTRY_STATUSES: tuple[str, ...] = ("pending", "servable", "withheld")
#: A judge score below this withholds the judged stage's entries.
LOW_SCORE = 0.5


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CacheEntry(_Model):
    """One stored answer: where it came from (run, stage, attempt), what it cost, its keys."""

    id: str
    spec_name: str
    spec_hash: str
    stage_id: str
    tier: str
    exact_key: str
    partition: str
    task: str
    embedding: list[float] | None = None
    embedding_model: str | None = None
    output: Any = None
    text: str = ""
    model: str = ""
    simulated_quality: float | None = None
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    run_id: str
    attempt: int = 1
    status: EntryStatus = "pending"
    reason: str | None = None
    created_at: str
    expires_at: str
    hits: int = 0


class CacheLookup(_Model):
    """The workflow asks: is there a servable answer for this call?"""

    call: LLMCallInput
    config: StageCache
    spec_hash: str
    exact: bool
    semantic: bool


class CacheHit(_Model):
    """A served answer and its provenance (traced as the attempt's ``data.cache``)."""

    kind: Literal["exact", "semantic"]
    entry_id: str
    source_run: str
    similarity: float
    output: Any = None
    text: str = ""
    model: str = ""
    simulated_quality: float | None = None
    saved_cost_usd: float = 0.0
    source_task: str = ""
    #: Re-derived from the stored answer (stated or hedging: its logprobs are not kept).
    confidence: Confidence | None = None


class CacheProbe(_Model):
    """What ``cache_lookup`` found: a hit, or the keys under which to keep the model's answer;
    ``skipped`` says why the cache was not consulted (then nothing is kept either)."""

    exact_key: str = ""
    partition: str = ""
    task: str = ""
    inputs_hash: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    latency_ms: float = 0.0
    hit: CacheHit | None = None
    skipped: str | None = None


class CacheKeep(_Model):
    """Keep a valid answer as a pending entry of this run."""

    probe: CacheProbe
    config: StageCache
    semantic: bool
    spec_name: str
    spec_hash: str
    stage_id: str
    tier: str
    run_id: str
    attempt: int
    output: Any = None
    text: str = ""
    model: str = ""
    simulated_quality: float | None = None
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class CacheSettle(_Model):
    """At the run's end: its entries become servable, or withheld with the reason (per stage
    in ``withheld``; ``reason`` for all of them)."""

    run_id: str
    reason: str | None = None
    withheld: dict[str, str] = Field(default_factory=dict)
