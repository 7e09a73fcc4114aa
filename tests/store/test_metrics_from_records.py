"""The Prometheus view counts a trace record once: ``write_new`` reports only the records a
write inserted, so a retried batch (or one a replayed run sends again) adds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from armature_temporal.runtime.traces import TraceChain
from armature_temporal.store import TraceStore
from armature_temporal.telemetry.metrics import observe_records

AT = "2026-01-01T00:00:00+00:00"
LATER = "2026-01-01T00:00:02.500000+00:00"


def test_a_retried_batch_counts_nothing_twice(tmp_path: Path) -> None:
    spec = "metrics-retry-probe"
    chain = TraceChain("run-metrics-1", spec, "h", "p")
    chain.add("run_start", AT)
    chain.add(
        "attempt",
        AT,
        stage_id="a",
        tier="small",
        prompt_tokens=7,
        completion_tokens=5,
        cost_usd=0.25,
        output_valid=True,
    )
    chain.add("stage", LATER, stage_id="a", status="completed", data={"started_at": AT})
    chain.add("tool", LATER, stage_id="t", status="completed", data={"tool": "shell"})
    chain.add("run_end", LATER, status="completed", latency_ms=2500.0)
    batch = chain.take()
    store = TraceStore(f"sqlite:///{tmp_path / 'traces.db'}")

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"spec": spec, **labels}) or 0.0

    try:
        first = store.write_new(batch)
        assert first == batch
        observe_records(first, {"run-metrics-1": 0.8})
        again = store.write_new(batch)  # the activity retried after its write committed
        assert again == []
        observe_records(again, {})
        half = store.write_new(batch[:2])
        assert half == [] and store.write(batch) == 0
    finally:
        store.close()
    tokens = {"tier": "small"}
    assert value("armature_llm_tokens_total", direction="input", **tokens) == 7
    assert value("armature_llm_tokens_total", direction="output", **tokens) == 5
    assert value("armature_llm_cost_usd_total", **tokens) == 0.25
    assert value("armature_stage_duration_seconds_count", stage="a") == 1
    assert value("armature_stage_duration_seconds_sum", stage="a") == 2.5
    assert value("armature_tool_calls_total", stage="t", outcome="ok") == 1
    assert value("armature_runs_total", status="completed") == 1
    assert value("armature_run_hqs_sum") == 0.8


def test_a_metrics_failure_never_fails_the_trace_write(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The records have landed: counting them raising is logged, and the runs' HQS still
    comes back for their spans."""
    import activities.traces as traces

    def broken(*_: object) -> None:
        raise RuntimeError("a label the registry refuses")

    warned: list[tuple[object, ...]] = []

    class Logger:
        def warning(self, *args: object, **_: object) -> None:
            warned.append(args)

    monkeypatch.setattr(traces, "observe_records", broken)
    monkeypatch.setattr(traces.activity, "logger", Logger())
    chain = TraceChain("run-metrics-broken", "metrics-broken-probe", "h", "p")
    chain.add("run_start", AT)
    chain.add("run_end", LATER, status="completed", latency_ms=2500.0)
    store = TraceStore(f"sqlite:///{tmp_path / 'traces.db'}")
    try:
        new = store.write_new(chain.take())
        row = store.run("run-metrics-broken")
        assert row is not None and len(new) == 2
        assert traces._count(store, new) == {"run-metrics-broken": row.hqs}
    finally:
        store.close()
    assert warned == [("metrics not updated for %d trace record(s)", 2)]
