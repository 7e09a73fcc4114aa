"""OpenTelemetry traces: on by the standard variables, off otherwise, never in a run's way.

:func:`configure` reads the OpenTelemetry SDK's own environment (``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_TIMEOUT``, ``OTEL_SDK_DISABLED``,
``OTEL_TRACES_EXPORTER=none``) and, when they ask for traces, installs a replay-safe tracer
provider (temporalio's contrib: in workflow code a span replayed from history is never ended,
so never exported, a second time) exporting OTLP over HTTP. :func:`client_plugins` is then
Temporal's OpenTelemetry plugin, for every client this process connects (and the workers built
on it): Armature's spans sit under Temporal's ``StartWorkflow``/``RunWorkflow``/``RunActivity``.

An unreachable collector costs a run nothing: finished spans go into a bounded queue that a
background thread exports; when the queue is full, or an export fails, the spans are dropped,
counted in ``armature_otel_spans_dropped_total`` and logged (at most once a minute).
Prompt and reply text goes into spans only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (:func:`capture_content`), the
GenAI conventions' opt-in, and even then with secrets redacted.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from armature_temporal.errors import ArmatureError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "QUEUE_SIZE",
    "TracingError",
    "capture_content",
    "client_plugins",
    "configure",
    "dropped_spans",
    "enabled",
    "shutdown",
    "wanted",
]

log = logging.getLogger("armature.telemetry")

#: The GenAI semantic conventions' opt-in for prompt and reply text in spans.
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Finished spans waiting for export; past it, new spans are dropped (and counted).
QUEUE_SIZE = 2048
#: Spans per export request, and how often the queue is sent (ms).
BATCH_SIZE = 512
SCHEDULE_DELAY_MS = 1000
#: Seconds one export may take (``OTEL_EXPORTER_OTLP_TIMEOUT`` overrides), and how long a
#: stopping process waits for what is still queued.
EXPORT_TIMEOUT_S = 5.0
SHUTDOWN_WAIT_MS = 1000
#: At most one "spans dropped" log line per this many seconds.
LOG_EVERY_S = 60.0

#: ``service.name`` when neither ``OTEL_SERVICE_NAME`` nor :func:`configure`'s argument says;
#: the CLI sets it per command (``armature-worker``, ``armature-submit``, ...).
DEFAULT_SERVICE = "armature"

_lock = threading.Lock()
_provider: Any = None
_dropped = 0


class TracingError(ArmatureError, ValueError):
    """The OpenTelemetry settings ask for something Armature cannot do (named, with the fix)."""


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint is set, the SDK is not
    disabled, and the traces exporter is not ``none``."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def enabled() -> bool:
    """Whether this process exports traces (:func:`configure` installed the provider)."""
    return _provider is not None


def capture_content(environ: Mapping[str, str] | None = None) -> bool:
    """Whether prompt and reply text may go into spans (the conventions' explicit opt-in)."""
    env = os.environ if environ is None else environ
    return env.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1", "yes")


def dropped_spans() -> int:
    """Spans this process could not export (queue full, collector unreachable or refusing)."""
    return _dropped


def _check(env: Mapping[str, str]) -> None:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    ).strip()
    if protocol and protocol != "http/protobuf":
        raise TracingError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: Armature exports OTLP over HTTP "
            "(http/protobuf) only; point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP "
            "port (usually 4318) and unset the protocol variable"
        )
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = env.get(name, "").strip()
        if value and not value.startswith(("http://", "https://")):
            raise TracingError(
                f"{name}={value!r} is not an http:// or https:// URL; give the collector's "
                "OTLP/HTTP address, e.g. http://localhost:4318"
            )


def _count_dropped(n: int, why: str) -> None:
    global _dropped
    if n <= 0:
        return
    with _lock:
        _dropped += n
        first = _DropLog.last == 0.0
        due = time.monotonic() - _DropLog.last >= LOG_EVERY_S
        if first or due:
            _DropLog.last = time.monotonic()
    from armature_temporal.telemetry import metrics

    metrics.SPANS_DROPPED.inc(n)
    if first or due:
        log.warning(
            "OpenTelemetry: %d span(s) dropped (%s); %d dropped so far in this process. Runs "
            "are unaffected; check that the collector at OTEL_EXPORTER_OTLP_ENDPOINT is up",
            n,
            why,
            _dropped,
        )


class _DropLog:
    last = 0.0


def _processor(exporter: SpanExporter) -> Any:
    """A batch processor that counts what it drops: its own queue overflowing, or a batch
    its exporter could not send."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class CountingExporter(SpanExporter):
        def __init__(self, inner: SpanExporter, queued: _Queued) -> None:
            self.inner, self.queued = inner, queued

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.queued.taken(len(spans))
            try:
                result = self.inner.export(spans)
            except Exception as exc:  # the exporter must not kill the export thread
                _count_dropped(len(spans), f"export failed: {type(exc).__name__}: {exc}")
                return SpanExportResult.FAILURE
            if result is not SpanExportResult.SUCCESS:
                _count_dropped(len(spans), "the collector could not be reached or refused them")
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return self.inner.force_flush(timeout_millis)

    class CountingProcessor(BatchSpanProcessor):
        def __init__(self, inner: SpanExporter) -> None:
            self.queued = _Queued(QUEUE_SIZE)
            super().__init__(
                CountingExporter(inner, self.queued),
                max_queue_size=QUEUE_SIZE,
                max_export_batch_size=BATCH_SIZE,
                schedule_delay_millis=SCHEDULE_DELAY_MS,
                export_timeout_millis=int(EXPORT_TIMEOUT_S * 1000),
            )

        def on_end(self, span: ReadableSpan) -> None:
            if not span.context.trace_flags.sampled:
                return
            if self.queued.put():  # the queue was full: the processor drops its oldest
                _count_dropped(1, "the export queue was full")
            super().on_end(span)

    return CountingProcessor(exporter)


class _Queued:
    """How many spans the batch processor holds: +1 per finished span, −n per batch handed
    to the exporter; at the bound, a new span pushes the oldest out (the SDK's deque)."""

    def __init__(self, bound: int) -> None:
        self.bound, self.n, self.lock = bound, 0, threading.Lock()

    def put(self) -> bool:
        with self.lock:
            if self.n >= self.bound:
                return True
            self.n += 1
            return False

    def taken(self, k: int) -> None:
        with self.lock:
            self.n = max(0, self.n - k)


def configure(
    service_name: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
) -> bool:
    """Install the replay-safe tracer provider once per process if the environment asks for
    traces (:func:`wanted`); returns whether this process exports traces.

    Args:
        service_name: ``service.name`` when ``OTEL_SERVICE_NAME`` is unset (``armature-worker``,
            ``armature-cli``, ...).
        environ: The variables to read (default: this process's).
        exporter: Replace the OTLP/HTTP exporter (what it sends is still counted).

    Raises:
        TracingError: the variables ask for a protocol or an endpoint Armature cannot use.
    """
    global _provider
    env = os.environ if environ is None else environ
    if _provider is not None:
        return True
    if exporter is None and not wanted(env):
        return False
    _check(env)
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from temporalio.contrib.opentelemetry import create_tracer_provider

    attributes: dict[str, Any] = {"service.namespace": "armature"}
    if not env.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service_name or DEFAULT_SERVICE
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        timeout = None if env.get("OTEL_EXPORTER_OTLP_TIMEOUT") else EXPORT_TIMEOUT_S
        exporter = OTLPSpanExporter(timeout=timeout)
    # shutdown_on_exit=False: the SDK's own exit hook waits up to 30 s for a dead collector;
    # :func:`shutdown` (registered below) waits SHUTDOWN_WAIT_MS at most.
    provider = create_tracer_provider(resource=Resource.create(attributes), shutdown_on_exit=False)
    # Every logger the exporter and the batch processor log through (a filter acts on the
    # logger it is added to, not on its children): imported by now.
    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith(_NOISY):
            logging.getLogger(name).addFilter(_Sparse())
    provider.add_span_processor(_processor(exporter))
    with _lock:
        if _provider is not None:
            return True
        trace.set_tracer_provider(provider)
        _provider = provider
    atexit.register(shutdown)
    return True


def shutdown(timeout_ms: int = SHUTDOWN_WAIT_MS) -> None:
    """Send what is queued and stop exporting, waiting ``timeout_ms`` at most.

    The SDK's flush exports in the calling thread and a dead collector holds it for the
    exporter's whole retry budget, so it runs in a daemon thread that the process does not
    wait for past ``timeout_ms``."""
    provider = _provider
    if provider is None:
        return

    def flush_and_stop() -> None:
        provider.force_flush(timeout_ms)
        provider.shutdown()

    stopping = threading.Thread(target=flush_and_stop, daemon=True)
    stopping.start()
    stopping.join(timeout_ms / 1000)


class _Sparse(logging.Filter):
    """Lets a logger's records through at most once per :data:`LOG_EVERY_S`: the exporter's
    retries against a dead collector would otherwise log several lines per batch. The first
    one says why (refused, timed out, 401); the dropped spans are counted either way."""

    def __init__(self) -> None:
        super().__init__()
        self.last = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if self.last and now - self.last < LOG_EVERY_S:
            return False
        self.last = now
        return True


#: The SDK loggers that speak for every failed export or full queue.
_NOISY = ("opentelemetry.exporter.otlp", "opentelemetry.sdk._shared_internal")


def client_plugins() -> list[Any]:
    """The plugins every Temporal client of this process connects with: Temporal's
    OpenTelemetry plugin (with its StartWorkflow/RunWorkflow/RunActivity spans) when this
    process exports traces, none otherwise."""
    if _provider is None:
        return []
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    return [OpenTelemetryPlugin(add_temporal_spans=True)]
