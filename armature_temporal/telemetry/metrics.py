"""Prometheus metrics: Armature's ``armature_*`` families and the Temporal SDK's ``temporal_*``
runtime metrics, on one endpoint.

Where each number comes from (none is recorded in workflow code, so a replay never counts
anything twice):

- runs, stages and their durations, model tokens and cost, cache hits, gate waits, tool call
  outcomes, bandit selections and HQS are derived from the trace records that
  ``record_traces`` **newly inserted** (:func:`observe_records`). The store inserts a record
  once per ``(run_id, seq)`` and reports which ones were new, so a retried batch, a replayed
  workflow or a second worker sending the same records counts nothing again: the trace store
  is the record, and these counters are a view of it.
- API requests and their latency are counted by the run API's middleware
  (:func:`observe_request`), in ``armature serve``.
- ``armature_otel_spans_dropped_total`` is incremented by the OpenTelemetry exporter (spans
  it could not send).

Every label is low-cardinality: spec names, stage ids and tier names (fixed by the specs
served), fixed sets of statuses and outcomes, route templates. Never run ids or free text.

The metrics live in prometheus_client's default registry (``REGISTRY``), so the process and
platform collectors come along. :class:`TemporalRuntimeMetrics` adds the SDK's metrics to it:
the SDK's Rust core serves them on a private loopback port (:func:`install_temporal_runtime`)
and each scrape reads them from there.
"""

from __future__ import annotations

import errno
import logging
import socket
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from armature_temporal.errors import ArmatureError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from armature_temporal.runtime.traces import TraceRecord

__all__ = [
    "API_LATENCY",
    "API_REQUESTS",
    "BANDIT_SELECTIONS",
    "CACHE_HITS",
    "GATE_WAIT",
    "LLM_CALLS",
    "LLM_COST",
    "LLM_TOKENS",
    "METRIC_NAMES",
    "RUNS",
    "RUN_HQS",
    "SPANS_DROPPED",
    "STAGES",
    "STAGE_DURATION",
    "TOOL_CALLS",
    "MetricsPortError",
    "TemporalRuntimeMetrics",
    "exposition",
    "install_temporal_runtime",
    "observe_records",
    "observe_request",
    "start_metrics_server",
]

log = logging.getLogger(__name__)

#: Seconds, from a cached answer (tens of ms) to a long tool loop or a gate waiting for hours.
SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600, 14400, 86400)
#: An HTTP request's seconds: answers are quick, ``POST /run`` waits for the run.
REQUEST_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

STAGE_DURATION = Histogram(
    "armature_stage_duration_seconds",
    "wall time of a stage that ran, from its start to its trace record (gate waits included)",
    ["spec", "stage"],
    buckets=SECONDS,
)
STAGES = Counter(
    "armature_stages",
    "stages traced, by their final status (completed, failed, skipped, rejected, cancelled)",
    ["spec", "stage", "status"],
)
RUNS = Counter("armature_runs", "runs that ended, by their final status", ["spec", "status"])
RUN_HQS = Histogram(
    "armature_run_hqs",
    "health-quality score (0-1) of each run that ended and could be scored",
    ["spec"],
    buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
)
LLM_TOKENS = Counter(
    "armature_llm_tokens",
    "model tokens paid for (stage attempts, evaluations, critiques, context summaries); "
    "direction is input (prompt) or output (completion)",
    ["spec", "tier", "direction"],
)
LLM_COST = Counter(
    "armature_llm_cost_usd",
    "model cost in US dollars, as the provider's price list gives it",
    ["spec", "tier"],
)
LLM_CALLS = Counter(
    "armature_llm_calls",
    "model calls traced, by what they were for (attempt, evaluation, critique, context) and "
    "whether the output was valid",
    ["spec", "tier", "purpose", "valid"],
)
CACHE_HITS = Counter(
    "armature_cache_hits",
    "stage attempts answered from the answer cache, by kind (exact or semantic)",
    ["spec", "kind"],
)
GATE_WAIT = Histogram(
    "armature_gate_wait_seconds",
    "how long a gate (a stage's approval or a tool call's) waited for its decision",
    ["spec", "decision"],
    buckets=SECONDS,
)
TOOL_CALLS = Counter(
    "armature_tool_calls",
    "tool calls traced, by outcome: ok, or the failure's type (tool_error, policy_blocked, "
    "timeout, ...)",
    ["spec", "stage", "outcome"],
)
BANDIT_SELECTIONS = Counter(
    "armature_bandit_selections",
    "stages that ran with an arm a bandit selected, by arm",
    ["spec", "stage", "arm"],
)
API_REQUESTS = Counter(
    "armature_api_requests",
    "run API requests answered, by method, route template and status code",
    ["method", "route", "status"],
)
API_LATENCY = Histogram(
    "armature_api_request_duration_seconds",
    "run API request time, from its arrival to the end of its answer (an event stream's "
    "whole life)",
    ["method", "route"],
    buckets=REQUEST_SECONDS,
)
SPANS_DROPPED = Counter(
    "armature_otel_spans_dropped",
    "spans OpenTelemetry could not export (queue full or collector unreachable)",
)

#: Every family this module defines, as /metrics names it (counters end in ``_total``).
METRIC_NAMES = (
    "armature_stage_duration_seconds",
    "armature_stages_total",
    "armature_runs_total",
    "armature_run_hqs",
    "armature_llm_tokens_total",
    "armature_llm_cost_usd_total",
    "armature_llm_calls_total",
    "armature_cache_hits_total",
    "armature_gate_wait_seconds",
    "armature_tool_calls_total",
    "armature_bandit_selections_total",
    "armature_api_requests_total",
    "armature_api_request_duration_seconds",
    "armature_otel_spans_dropped_total",
)

#: Records of a model call someone paid for (the run's totals count the same ones).
_CALLS = ("attempt", "evaluation", "critique", "context")
#: Longest label value kept: ids in specs are short; anything longer is cut, not dropped.
_LABEL_MAX = 80


def _label(value: str | None, default: str = "") -> str:
    return (value or default)[:_LABEL_MAX]


def _seconds_between(start: str, end: str) -> float | None:
    try:
        return max(
            0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
        )
    except (TypeError, ValueError):
        return None


def observe_records(records: Iterable[TraceRecord], hqs: dict[str, float | None]) -> None:
    """Count what ``records`` say: call it with the records the store **newly** inserted.

    Args:
        records: Trace records just inserted (never ones already stored).
        hqs: For each run whose ``run_end`` is among them, its HQS as the store scored it
            (None: unscored).
    """
    for r in records:
        spec = _label(r.spec_name)
        if r.kind in _CALLS:
            tier = _label(r.tier, "none")
            valid = "unknown" if r.output_valid is None else str(r.output_valid).lower()
            LLM_CALLS.labels(spec, tier, r.kind, valid).inc()
            # Incremented by 0 too: the series exist (at 0) from a spec's first model call.
            LLM_TOKENS.labels(spec, tier, "input").inc(max(0, r.prompt_tokens))
            LLM_TOKENS.labels(spec, tier, "output").inc(max(0, r.completion_tokens))
            LLM_COST.labels(spec, tier).inc(max(0.0, r.cost_usd))
            kind = r.data.get("cache") if r.kind == "attempt" else None
            if kind in ("exact", "semantic"):
                CACHE_HITS.labels(spec, kind).inc()
        elif r.kind == "stage":
            stage = _label(r.stage_id)
            STAGES.labels(spec, stage, _label(r.status, "unknown")).inc()
            started = r.data.get("started_at")
            if isinstance(started, str):
                seconds = _seconds_between(started, r.recorded_at)
                if seconds is not None:
                    STAGE_DURATION.labels(spec, stage).observe(seconds)
            if r.arm_id:
                BANDIT_SELECTIONS.labels(spec, stage, _label(r.arm_id)).inc()
        elif r.kind == "tool":
            outcome = "ok" if r.status == "completed" else _label(r.error_type, "tool_error")
            TOOL_CALLS.labels(spec, _label(r.stage_id), outcome).inc()
        elif r.kind == "gate":
            since = r.data.get("waiting_since")
            if isinstance(since, str):
                seconds = _seconds_between(since, r.recorded_at)
                if seconds is not None:
                    GATE_WAIT.labels(spec, _label(r.status, "unknown")).observe(seconds)
        elif r.kind == "run_end":
            RUNS.labels(spec, _label(r.status, "completed")).inc()
            score = hqs.get(r.run_id)
            if score is not None:
                RUN_HQS.labels(spec).observe(score)


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    """Count one answered run API request (``route``: its template, such as ``/run/{run_id}``)."""
    API_REQUESTS.labels(method, route, str(status)).inc()
    API_LATENCY.labels(method, route).observe(seconds)


# --- the Temporal SDK's metrics ------------------------------------------------------------


class MetricsPortError(ArmatureError):
    """The metrics port cannot be listened on."""


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def install_temporal_runtime() -> str:
    """Make the Temporal SDK's default runtime export its metrics in Prometheus' format on a
    free loopback port, and add them to this process's registry
    (:class:`TemporalRuntimeMetrics`). Returns that port's ``host:port``.

    Call it before the process connects its first Temporal client: clients and workers take
    the default runtime when they are made.
    """
    from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

    bind = f"127.0.0.1:{_free_loopback_port()}"
    runtime = Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(
                bind_address=bind, counters_total_suffix=True, durations_as_seconds=True
            )
        )
    )
    Runtime.set_default(runtime, error_if_already_set=True)
    REGISTRY.register(TemporalRuntimeMetrics(f"http://{bind}/metrics"))
    return bind


class TemporalRuntimeMetrics(Collector):
    """The SDK core's Prometheus text (read from ``url`` at each scrape), as families of this
    registry: one endpoint serves ``temporal_*`` beside ``armature_*``.

    A scrape that cannot read them leaves them out (and logs why) rather than failing the
    armature families with it.
    """

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def collect(self) -> Iterator[Metric]:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as answer:
                text = answer.read().decode("utf-8")
            families = list(text_string_to_metric_families(text))
        except (OSError, ValueError) as exc:
            log.warning("Temporal SDK metrics unavailable at %s: %s", self.url, exc)
            return
        yield from families

    def describe(self) -> Sequence[Metric]:
        return []  # unknown until scraped: the registry then checks no names


def exposition() -> bytes:
    """This process's metrics in Prometheus' text format (what ``/metrics`` answers)."""
    return generate_latest(REGISTRY)


def start_metrics_server(host: str, port: int) -> None:
    """Serve :func:`exposition` at ``http://host:port/metrics`` from a background thread.

    Raises:
        MetricsPortError: the port is taken (or the host is not this machine's), naming it
            and the fix.
    """
    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:
        raise MetricsPortError(
            f"cannot serve metrics on {host}:{port} (--metrics-port {port}): {exc.strerror or exc}"
            ". Another process listens there (a second worker on this machine?): give each "
            "worker its own --metrics-port, or stop what uses the port"
            + (
                ""
                if exc.errno == errno.EADDRINUSE
                else "; check that --metrics-host names an address of this machine"
            )
        ) from None
