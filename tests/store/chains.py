"""Realistic run chains for the store tests, built with the real :class:`TraceChain`.

Also the entry point of the writer processes in the concurrency test (spawned, so it must be a
module-level function of an importable module).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from armature_temporal.runtime.traces import TraceChain, TraceRecord
from armature_temporal.store import TraceStore

__all__ = ["SPEC_HASH", "SPEC_NAME", "make_run", "write_runs"]

SPEC_NAME = "triage"
SPEC_HASH = "a" * 64
_T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


def _at(seconds: float) -> str:
    return (_T0 + timedelta(seconds=seconds)).isoformat()


def make_run(
    run_id: str,
    *,
    spec_name: str = SPEC_NAME,
    spec_hash: str = SPEC_HASH,
    stages: tuple[str, ...] = ("classify", "draft", "review"),
    retry_stage: str | None = None,
    fail_stage: str | None = None,
    judge_score: float | None = None,
    gate_stage: str | None = None,
    gate_by: str = "ana",
    gate_claimed_by: str | None = None,
    latency_ms: float = 4000.0,
    start: float = 0.0,
    hqs_weights: dict[str, float] | None = None,
) -> list[TraceRecord]:
    """One finished run's chain: run_start, per stage its attempt(s) and outcome, an optional
    judge stage and gate decision, and run_end.

    Every attempt costs 100 prompt + 20 completion tokens and $0.001, so a test can check the
    run summary's totals by counting attempts.
    """
    chain = TraceChain(run_id, spec_name, spec_hash, "policy-1")
    clock = start
    chain.add(
        "run_start",
        _at(clock),
        data={
            "spec_version": "3",
            "inputs": {"ticket": f"ticket {run_id}"},
            "parent_run_id": None,
            **({"hqs_weights": hqs_weights} if hqs_weights is not None else {}),
        },
    )
    status = "completed"
    reason: str | None = None
    for stage in stages:
        tries = 2 if stage == retry_stage else 1
        for attempt in range(1, tries + 1):
            clock += 0.5
            ok = attempt == tries and stage != fail_stage
            chain.add(
                "attempt",
                _at(clock),
                stage_id=stage,
                attempt=attempt,
                role=stage.title(),
                role_type="worker",
                tier="small",
                model="simulate/small",
                inputs_hash=f"{attempt:064x}",
                inputs_provenance={"ticket": "user_input"},
                output={"content": f"{stage} of {run_id}, try {attempt}"} if ok else None,
                output_valid=ok,
                error_type=None if ok else "output_invalid",
                error=None if ok else "expected JSON with key 'content'",
                latency_ms=400.0,
                prompt_tokens=100,
                completion_tokens=20,
                cost_usd=0.001,
                data={"messages": [{"role": "user", "content": f"Do {stage}."}]},
            )
        failed = stage == fail_stage
        chain.add(
            "stage",
            _at(clock),
            stage_id=stage,
            status="failed" if failed else "completed",
            attempt=tries,
            role=stage.title(),
            role_type="worker",
            tier="small",
            output=None if failed else {"content": f"{stage} of {run_id}"},
            error_type="output_invalid" if failed else None,
            error="output invalid after 1 attempt(s)" if failed else None,
            data={"kind": "llm"},
        )
        if failed:
            status, reason = "failed", f"stage {stage!r} failed: output invalid"
            break
        if stage == gate_stage:
            chain.add(
                "gate",
                _at(clock + 1),
                stage_id=stage,
                status="completed",
                data={
                    "decision": "approve",
                    "by": gate_by,
                    "comment": "looks right",
                    **({"claimed_by": gate_claimed_by} if gate_claimed_by else {}),
                },
            )
    if judge_score is not None and status == "completed":
        clock += 0.5
        chain.add(
            "stage",
            _at(clock),
            stage_id="judge",
            status="completed",
            attempt=1,
            role="Judge",
            role_type="judge",
            output={"score": judge_score},
            judge_score=judge_score,
            error_type="low_quality" if judge_score < 0.5 else None,
        )
    chain.add(
        "run_end",
        _at(start + latency_ms / 1000),
        status=status,
        error=reason,
        output={"answer": f"done {run_id}"},
        latency_ms=latency_ms,
    )
    return chain.take()


def write_runs(url: str, prefix: str, runs: int, batch: int) -> int:
    """Open the store at ``url`` and write ``runs`` runs' records in batches of ``batch``
    records, each batch sent twice (a retried activity). Returns records newly stored."""
    store = TraceStore(url)
    stored = 0
    try:
        for n in range(runs):
            records = make_run(f"{prefix}-{n:04d}", retry_stage="draft", start=float(n))
            for i in range(0, len(records), batch):
                part = records[i : i + batch]
                stored += store.write(part)
                store.write(part)
    finally:
        store.close()
    return stored
