"""Read-side queries over the trace store, shared by the CLI and the dashboard.

Aggregates are per spec version (``spec_hash``) and never mix versions: a changed spec starts a
new series (see :mod:`armature_temporal.runtime.hqs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select

from armature_temporal.runtime.stats import percentile
from armature_temporal.store.schema import RunRow, TraceRow

if TYPE_CHECKING:
    from armature_temporal.store.trace_store import TraceStore

__all__ = ["VersionSummary", "dashboard_summary", "percentile"]


class VersionSummary(BaseModel):
    """One spec version's runs, as a dashboard shows them.

    Attributes:
        spec_hash: The version's content hash.
        spec_version: The ``version`` its spec declared (``None`` if it declared none).
        runs: Runs started, finished or not.
        statuses: Runs per status (``running``, ``completed``, ``failed``, ``rejected``, ...).
        mean_hqs: Mean HQS of its finished runs; ``None`` before the first finishes.
        failures: Failed or degraded stages per failure-taxonomy code
            (:data:`armature_temporal.runtime.traces.FAILURE_TAXONOMY`), most frequent first.
        latency_p50_ms: Median wall time of its finished runs.
        latency_p95_ms: 95th percentile of the same.
        prompt_tokens: Prompt tokens of every model attempt of its runs.
        completion_tokens: Completion tokens of the same.
        cost_usd: Their cost.
        first_started_at: When its first run started (ISO 8601).
        last_started_at: When its latest run started (ISO 8601).
    """

    model_config = ConfigDict(frozen=True)

    spec_hash: str
    spec_version: str | None
    runs: int
    statuses: dict[str, int]
    mean_hqs: float | None
    failures: dict[str, int]
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    first_started_at: str
    last_started_at: str


def dashboard_summary(store: TraceStore, spec_name: str) -> list[VersionSummary]:
    """Per version of spec ``spec_name``: run count, statuses, mean HQS, failure taxonomy
    counts, run latency p50/p95, tokens and cost. Newest version (latest run) first; an empty
    list when the spec has no runs.

    Three indexed queries (run aggregates, run latencies, stage failures); at 100,000 trace
    records it takes milliseconds (``benchmarks/trace_store.py``).
    """
    runs = RunRow.__table__.c
    traces = TraceRow.__table__.c
    with store.engine.connect() as conn:
        groups = conn.execute(
            select(
                runs.spec_hash,
                runs.status,
                func.count(),
                func.count(runs.hqs),
                func.sum(runs.hqs),
                func.sum(runs.prompt_tokens),
                func.sum(runs.completion_tokens),
                func.sum(runs.cost_usd),
                func.min(runs.started_at),
                func.max(runs.started_at),
                func.max(runs.spec_version),
            )
            .where(runs.spec_name == spec_name)
            .group_by(runs.spec_hash, runs.status)
        ).all()
        latencies = conn.execute(
            select(runs.spec_hash, runs.latency_ms)
            .where(runs.spec_name == spec_name, runs.latency_ms.is_not(None))
            .order_by(runs.spec_hash, runs.latency_ms)
        ).all()
        failures = conn.execute(
            select(traces.spec_hash, traces.error_type, func.count())
            .where(
                traces.spec_name == spec_name,
                traces.kind == "stage",
                traces.error_type.is_not(None),
            )
            .group_by(traces.spec_hash, traces.error_type)
        ).all()

    versions: dict[str, _Version] = {}
    for row in groups:
        spec_hash, status, count, scored, hqs_sum, prompt, completion, cost, first, last, ver = row
        version = versions.setdefault(spec_hash, _Version(first=first, last=last))
        version.add(
            status, count, scored, hqs_sum or 0.0, prompt or 0, completion or 0, cost or 0.0
        )
        version.first, version.last = min(version.first, first), max(version.last, last)
        version.spec_version = version.spec_version or ver
    by_version: dict[str, list[float]] = {}
    for spec_hash, latency in latencies:
        by_version.setdefault(spec_hash, []).append(latency)
    codes: dict[str, dict[str, int]] = {}
    for spec_hash, error_type, count in sorted(failures, key=lambda f: (-f[2], f[1])):
        codes.setdefault(spec_hash, {})[error_type] = count
    summaries = [
        VersionSummary(
            spec_hash=spec_hash,
            spec_version=version.spec_version,
            runs=version.runs,
            statuses=dict(sorted(version.statuses.items())),
            mean_hqs=round(version.hqs_sum / version.scored, 4) if version.scored else None,
            failures=codes.get(spec_hash, {}),
            latency_p50_ms=percentile(by_version.get(spec_hash, []), 50),
            latency_p95_ms=percentile(by_version.get(spec_hash, []), 95),
            prompt_tokens=version.prompt_tokens,
            completion_tokens=version.completion_tokens,
            cost_usd=round(version.cost_usd, 6),
            first_started_at=version.first,
            last_started_at=version.last,
        )
        for spec_hash, version in versions.items()
    ]
    summaries.sort(key=lambda s: (s.last_started_at, s.spec_hash), reverse=True)
    return summaries


@dataclass
class _Version:
    """Running totals of one version while its status groups are folded together."""

    first: str
    last: str
    spec_version: str | None = None
    runs: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    scored: int = 0
    hqs_sum: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(
        self,
        status: str,
        count: int,
        scored: int,
        hqs_sum: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
    ) -> None:
        self.runs += count
        self.statuses[status] = count
        self.scored += scored
        self.hqs_sum += hqs_sum
        self.prompt_tokens += int(prompt_tokens)
        self.completion_tokens += int(completion_tokens)
        self.cost_usd += float(cost_usd)
