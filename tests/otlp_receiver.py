"""A real OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` (protobuf, from the OpenTelemetry protocol package
``opentelemetry-proto``), decoded and kept in memory.

It speaks the wire protocol a collector speaks (the OTLP exporter cannot tell it from one), on
127.0.0.1 and a free port, in a thread. :class:`ReceivedSpan` is what the tests read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any]
    service: str
    scope: str


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which) if which else None


@dataclass
class Receiver:
    """What arrived: every span, and the number of export requests."""

    port: int = 0
    spans: list[ReceivedSpan] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def take(self, body: bytes) -> None:
        """Keep a request's body; it is decoded when read (:meth:`snapshot`), so receiving
        costs the sender's benchmark next to nothing."""
        with self.lock:
            self.bodies.append(body)
            self.requests += 1

    def _decode(self, body: bytes) -> list[ReceivedSpan]:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got = []
        for rs in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        ReceivedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex() or None,
                            kind=s.kind,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status_code=s.status.code,
                            attributes={kv.key: _value(kv.value) for kv in s.attributes},
                            service=str(resource.get("service.name", "")),
                            scope=ss.scope.name,
                        )
                    )
        return got

    def snapshot(self) -> list[ReceivedSpan]:
        with self.lock:
            bodies, self.bodies = self.bodies, []
        decoded = [span for body in bodies for span in self._decode(body)]
        with self.lock:
            self.spans.extend(decoded)
            return list(self.spans)

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [s for s in self.snapshot() if s.name.startswith(prefix)]

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], what: str, timeout: float = 30.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.snapshot()):
            if time.monotonic() > deadline:
                names = sorted(s.name for s in self.snapshot())
                raise AssertionError(
                    f"timed out after {timeout:g}s waiting for {what}; got {names}"
                )
            time.sleep(0.05)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver listening until the block ends."""
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            received.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
