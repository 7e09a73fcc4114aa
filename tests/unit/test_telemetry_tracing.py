"""Tracing settings, the export queue's drop accounting, and the content opt-in.

The tracer provider is global to a process, so what installs one runs in a subprocess.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from armature_temporal.runtime.llm import Completion
from armature_temporal.telemetry import chat, genai, tracing

REPO = Path(__file__).resolve().parents[2]


def test_traces_are_wanted_only_when_an_endpoint_is_set_and_nothing_turns_them_off() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert not tracing.wanted({**on, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({**on, "OTEL_TRACES_EXPORTER": "none"})


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'",
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ],
)
def test_settings_armature_cannot_use_are_refused_with_the_fix(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(tracing.TracingError) as err:
        tracing.configure(environ=env)
    assert named in str(err.value)
    assert "4318" in str(err.value)  # the OTLP/HTTP port to use instead
    assert not tracing.enabled()


def test_provider_names_follow_the_conventions() -> None:
    assert genai.provider_name("litellm", "openai/gpt-4o") == "openai"
    assert genai.provider_name("litellm", "bedrock/anthropic.claude-3") == "aws.bedrock"
    assert genai.provider_name("litellm", "gemini/gemini-2.0-flash") == "gcp.gemini"
    assert genai.provider_name("litellm", "claude-3-5-sonnet") == "anthropic"
    assert genai.provider_name("simulate", "sim-small") == "simulate"
    assert genai.clean({"a": None, "b": [1, 2], "c": {"x": 1}}) == {"b": [1, 2], "c": '{"x": 1}'}


def _span_after(completion: Completion, messages: list[dict[str, str]]) -> dict[str, object]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("chat m") as span:
        chat.completed(span, completion, messages)
    (finished,) = exporter.get_finished_spans()
    return dict(finished.attributes or {})


def test_prompt_and_reply_text_go_into_spans_only_with_the_opt_in_and_without_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-proj-" + "Q7x2Lm9Pz4Rt8Vw1Ks6Dn3Hb5Jc0Fg"
    messages = [{"role": "user", "content": f"summarize; my key is {key}"}]
    completion = Completion(text="a summary", model="m", prompt_tokens=7, completion_tokens=3)
    monkeypatch.delenv(tracing.CAPTURE_CONTENT_ENV, raising=False)
    plain = _span_after(completion, messages)
    assert plain["gen_ai.usage.input_tokens"] == 7
    assert plain["gen_ai.usage.output_tokens"] == 3
    assert not any("messages" in k for k in plain)

    monkeypatch.setenv(tracing.CAPTURE_CONTENT_ENV, "true")
    captured = _span_after(completion, messages)
    sent = json.loads(str(captured["gen_ai.input.messages"]))
    assert "summarize" in sent[0]["content"]
    assert key not in str(captured["gen_ai.input.messages"])
    assert "[REDACTED:secret]" in sent[0]["content"]
    assert "a summary" in str(captured["gen_ai.output.messages"])


def _run(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=60,
    )


def test_a_full_queue_drops_and_counts_instead_of_waiting_for_the_exporter() -> None:
    """The exporter blocks until told; every span still ends at once, and what the bounded
    queue could not hold is counted (in the process and in the Prometheus counter)."""
    done = _run(
        """
        import threading
        from opentelemetry import trace
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
        from prometheus_client import REGISTRY
        from armature_temporal.telemetry import tracing

        release = threading.Event()
        class Stuck(SpanExporter):
            def export(self, spans):
                release.wait(30)
                return SpanExportResult.SUCCESS
        assert tracing.configure(environ={}, exporter=Stuck())
        tracer = trace.get_tracer("t")
        n = tracing.QUEUE_SIZE + tracing.BATCH_SIZE + 300
        for i in range(n):
            tracer.start_span(f"s{i}").end()
        blocked = not release.is_set()
        dropped = tracing.dropped_spans()
        metric = REGISTRY.get_sample_value("armature_otel_spans_dropped_total")
        release.set()
        print(blocked, n, dropped, metric)
        """
    )
    assert done.returncode == 0, done.stderr
    blocked, n, dropped, metric = done.stdout.split()
    assert blocked == "True"  # every span ended while the exporter was still stuck
    # At most a full queue plus the one batch the exporter holds were kept.
    assert int(dropped) >= int(n) - tracing.QUEUE_SIZE - tracing.BATCH_SIZE
    assert float(metric) == int(dropped)
    assert "span(s) dropped (the export queue was full)" in done.stderr
    assert done.stderr.count("span(s) dropped") == 1  # one line, not one per span


def test_an_unreachable_collector_is_counted_and_logged() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _run(
        """
        from opentelemetry import trace
        from armature_temporal.telemetry import tracing

        assert tracing.configure()
        for i in range(10):
            trace.get_tracer("t").start_span(f"s{i}").end()
        trace.get_tracer_provider().force_flush(10_000)
        print(tracing.dropped_spans())
        """,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "10"
    assert "10 span(s) dropped (the collector could not be reached or refused them)" in done.stderr
    # The exporter's own retry lines: the first says why, the rest are held back.
    assert done.stderr.count("Transient error") <= 1
