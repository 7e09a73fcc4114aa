"""Trace store throughput and the dashboard query, on SQLite and PostgreSQL.

For each database:

* **store** — 4 writer processes (spawned) each write their share of ~100,000 trace records
  with ``TraceStore.write``, one batch per run (~20 records: run_start, attempts, stage
  outcomes, a tool call, a gate decision, run_end — what a workflow flushes), so the timing
  includes serialising, the idempotent upsert and the run summary (HQS, totals, chain head).
* **baseline** — the same processes insert the same rows, already serialised, with the
  driver's ``executemany`` into a database with the same schema, one transaction per batch:
  no ORM, no upsert, no run summary. The figure of merit is store ÷ baseline throughput.

Records are built (chains hashed) before the clock starts; each process waits on a barrier.
Then ``dashboard_summary`` over all of them (one spec, three versions) is timed: median of 5,
against one plain scan of the spec's records (``GROUP BY spec_hash``) as its baseline.

Targets: ≥ 2,000 traces/s on SQLite; the dashboard query ≤ 500 ms at 100,000 traces.

Run ``python benchmarks/trace_store.py [--traces N] [--writers W] [--pg URL|none] [--json]``.
PostgreSQL defaults to ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres`` (a scratch
database is created beside it and dropped); it is skipped, with the reason, when unreachable.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

TARGET_SQLITE_TRACES_S = 2000
TARGET_QUERY_MS = 500
SPEC_NAME = "bench-triage"
VERSIONS = [f"{n:x}" * 64 for n in (10, 11, 12)]
_T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
_TEXT = (
    "the customer reports that the invoice export fails after the upgrade and asks whether "
    "their data is safe while support checks the logs for the failing job"
)
_WORDS = _TEXT.split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def build_run(run_no: int, runs_total: int) -> list[Any]:
    """One run's chain (~20 records) with a realistic mix of retries, failures, judges, gates.

    Deterministic in ``run_no``; versions follow one another in time (a spec edited twice).
    """
    from armature_temporal.runtime.traces import TraceChain

    rng = random.Random(run_no)
    version = min(run_no * len(VERSIONS) // runs_total, len(VERSIONS) - 1)
    chain = TraceChain(f"bench-{run_no:06d}", SPEC_NAME, VERSIONS[version], "policy-1")
    start = _T0 + timedelta(seconds=10 * run_no)
    clock = 0.0

    def at() -> str:
        return (start + timedelta(seconds=clock)).isoformat()

    chain.add(
        "run_start",
        at(),
        data={
            "spec_version": str(version + 1),
            "inputs": {"ticket": _text(rng, 20)},
            "parent_run_id": None,
        },
    )
    failed_at = rng.randrange(8) if rng.random() < 0.06 else None
    failure = rng.choice(["output_invalid", "provider_error", "timeout"])
    status, reason = "completed", None
    for index, stage in enumerate(
        ["classify", "extract", "lookup", "fetch_logs", "diagnose", "draft", "polish", "judge"]
    ):
        if status != "completed":
            chain.add(
                "stage",
                at(),
                stage_id=stage,
                status="skipped",
                error_type="dependency_failed",
                error="not run: an upstream stage failed",
            )
            continue
        if stage == "fetch_logs":  # a tool stage
            clock += rng.uniform(0.05, 0.4)
            ok = index != failed_at
            chain.add(
                "tool",
                at(),
                stage_id=stage,
                status="completed" if ok else "failed",
                output={"stdout": _text(rng, 30), "exit_code": 0} if ok else None,
                error_type=None if ok else "tool_error",
                error=None if ok else "exit status 1",
                data={"tool": "shell", "policy_action": "allow", "approved": False},
            )
            chain.add(
                "stage",
                at(),
                stage_id=stage,
                status="completed" if ok else "failed",
                output={"stdout": _text(rng, 30)} if ok else None,
                error_type=None if ok else "tool_error",
                data={"kind": "tool"},
            )
            if not ok:
                status, reason = "failed", f"stage {stage!r} failed: tool_error"
            continue
        judge = stage == "judge"
        tries = 2 if rng.random() < 0.1 else 1
        for attempt in range(1, tries + 1):
            clock += rng.lognormvariate(-0.5, 0.4)
            valid = attempt == tries and not (index == failed_at and failure == "output_invalid")
            output: Any = (
                {"score": round(rng.betavariate(6, 2), 3), "rationale": _text(rng, 15)}
                if judge
                else {"content": _text(rng, 25)}
            )
            chain.add(
                "attempt",
                at(),
                stage_id=stage,
                attempt=attempt,
                role=stage.title(),
                role_type="judge" if judge else "worker",
                tier="small" if attempt == 1 else "frontier",
                model="gpt-4o-mini" if attempt == 1 else "gpt-4o",
                inputs_hash=f"{rng.getrandbits(256):064x}",
                inputs_provenance={"ticket": "user_input"},
                output=output if valid else _text(rng, 10),
                output_valid=valid,
                error_type=None if valid else "output_invalid",
                error=None if valid else "expected a JSON object",
                latency_ms=clock * 100,
                prompt_tokens=rng.randint(300, 900),
                completion_tokens=rng.randint(40, 200),
                cost_usd=rng.uniform(0.0002, 0.002),
                escalated=attempt > 1,
                data={
                    "messages": [
                        {"role": "system", "content": _text(rng, 30)},
                        {"role": "user", "content": _text(rng, 20)},
                    ]
                },
            )
        ok = index != failed_at
        score = output["score"] if judge and ok else None
        chain.add(
            "stage",
            at(),
            stage_id=stage,
            status="completed" if ok else "failed",
            attempt=tries,
            role=stage.title(),
            role_type="judge" if judge else "worker",
            tier="small" if tries == 1 else "frontier",
            output=output if ok else None,
            error_type=(failure if not ok else "low_quality" if score and score < 0.5 else None),
            error=None if ok else f"{failure} after {tries} attempt(s)",
            escalated=tries > 1,
            judge_score=score,
            data={"kind": "llm"},
        )
        if not ok:
            status, reason = "failed", f"stage {stage!r} failed: {failure}"
        if stage == "draft" and ok:
            rejected = rng.random() < 0.03
            chain.add(
                "gate",
                at(),
                stage_id=stage,
                status="rejected" if rejected else "completed",
                data={"decision": "reject" if rejected else "approve", "by": "ana"},
            )
            if rejected:
                status, reason = "rejected", "stage 'draft' rejected"
    chain.add(
        "run_end",
        at(),
        status=status,
        error=reason,
        output={"answer": _text(rng, 25)},
        latency_ms=clock * 1000,
    )
    return chain.take()


def _raw_rows(records: list[Any]) -> list[tuple[Any, ...]]:
    rows = []
    for record in records:
        values = record.model_dump(mode="json")
        rows.append(
            tuple(json.dumps(values[c]) if c in _JSON_COLUMNS else values[c] for c in _COLUMNS)
        )
    return rows


_JSON_COLUMNS = {"inputs_provenance", "output", "data"}
_COLUMNS = [
    "run_id", "seq", "kind", "spec_name", "spec_hash", "policy_version", "recorded_at",
    "stage_id", "iteration", "attempt", "role", "role_type", "tier", "model", "arm_id",
    "decision_id", "inputs_hash", "inputs_provenance", "status", "output", "output_valid",
    "error_type", "error", "latency_ms", "prompt_tokens", "completion_tokens", "cost_usd",
    "escalated", "judge_score", "data", "prev_hash", "hash",
]  # fmt: skip


def _writer(
    mode: str, url: str, writer: int, writers: int, traces: int, barrier: Barrier, out: Any
) -> None:
    """One writer process: build its share of runs, wait for the others, write, report."""
    batches: list[list[Any]] = []
    run_no, share = writer, -(-traces // writers)
    while sum(len(b) for b in batches) < share:
        batches.append(build_run(run_no, traces // 20))
        run_no += writers
    if mode == "store":
        from armature_temporal.store import TraceStore

        store = TraceStore(url)
        barrier.wait()
        for batch in batches:
            store.write(batch)
        store.close()
    else:
        rows = [_raw_rows(batch) for batch in batches]
        conn, sql = _raw_connection(url)
        barrier.wait()
        for batch_rows in rows:
            if url.startswith("sqlite"):
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(sql, batch_rows)
                conn.execute("COMMIT")
            else:
                with conn.transaction(), conn.cursor() as cursor:
                    cursor.executemany(sql, batch_rows)
        conn.close()
    out.put(sum(len(b) for b in batches))


def _raw_connection(url: str) -> tuple[Any, str]:
    """A plain driver connection (same PRAGMAs as the store's) and the INSERT to run."""
    columns = ", ".join(_COLUMNS)
    conn: Any
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.split("///", 1)[1], timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        marks = ", ".join("?" for _ in _COLUMNS)
        return conn, f"INSERT INTO trace_records ({columns}) VALUES ({marks})"
    import psycopg
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    conn = psycopg.connect(
        host=parts.host,
        port=parts.port or 5432,
        user=parts.username,
        password=parts.password,
        dbname=parts.database,
    )
    marks = ", ".join("%s" for _ in _COLUMNS)
    return conn, f"INSERT INTO trace_records ({columns}) VALUES ({marks})"


def measure_writes(mode: str, url: str, traces: int, writers: int) -> tuple[int, float]:
    """(records written, seconds) for ``writers`` processes writing ``traces`` records (whole
    runs, so a few more)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_writer,
            args=(mode, url, w, writers, traces, barrier, out),
        )
        for w in range(writers)
    ]
    for proc in procs:
        proc.start()
    barrier.wait(timeout=300)  # every writer has built its records
    start = time.perf_counter()
    written, reported = 0, 0
    while reported < writers:
        try:
            written += out.get(timeout=1)
            reported += 1
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"a {mode} writer failed (exit status {failed[0]})") from None
    elapsed = time.perf_counter() - start
    for proc in procs:
        proc.join()
    return written, elapsed


def measure_query(url: str) -> dict[str, Any]:
    """Median ms of 5 ``dashboard_summary`` calls, and of 5 plain scans as the baseline."""
    from sqlalchemy import text

    from armature_temporal.store import TraceStore
    from armature_temporal.store.queries import dashboard_summary

    store = TraceStore(url)
    scan = text(
        "SELECT spec_hash, count(*) FROM trace_records WHERE spec_name = :s GROUP BY spec_hash"
    )

    def timed(call: Any) -> float:
        begin = time.perf_counter()
        call()
        return (time.perf_counter() - begin) * 1000

    def plain_scan() -> None:
        with store.engine.connect() as conn:
            conn.execute(scan, {"s": SPEC_NAME}).all()

    summary = dashboard_summary(store, SPEC_NAME)  # warm the caches
    plain_scan()
    query_ms = statistics.median(
        timed(lambda: dashboard_summary(store, SPEC_NAME)) for _ in "12345"
    )
    scan_ms = statistics.median(timed(plain_scan) for _ in "12345")
    store.close()
    return {
        "query_ms": round(query_ms, 1),
        "scan_ms": round(scan_ms, 1),
        "summary": [s.model_dump() for s in summary],
    }


def bench_backend(
    name: str, store_url: str, raw_url: str, traces: int, writers: int
) -> dict[str, Any]:
    from armature_temporal.store import TraceStore

    TraceStore(raw_url).close()  # the same schema, migrated, for the baseline
    TraceStore(store_url).close()
    raw_n, raw_s = measure_writes("raw", raw_url, traces, writers)
    store_n, store_s = measure_writes("store", store_url, traces, writers)
    query = measure_query(store_url)
    store = TraceStore(store_url)
    stored = store.count()
    store.close()
    if stored != store_n:
        raise RuntimeError(f"{name}: wrote {store_n} records but the store holds {stored}")
    return {
        "backend": name,
        "records": store_n,
        "writers": writers,
        "store_traces_s": round(store_n / store_s),
        "baseline_traces_s": round(raw_n / raw_s),
        "ratio": round((store_n / store_s) / (raw_n / raw_s), 3),
        **query,
    }


def _pg_scratch(base_url: str) -> tuple[Any, list[str]] | str:
    """An autocommit connection to the server and two scratch database names, or the reason
    PostgreSQL cannot be used."""
    import psycopg
    from sqlalchemy.engine import make_url

    parts = make_url(base_url)
    try:
        admin = psycopg.connect(
            host=parts.host,
            port=parts.port or 5432,
            user=parts.username,
            password=parts.password,
            dbname=parts.database or "postgres",
            autocommit=True,
            connect_timeout=3,
        )
    except psycopg.Error as exc:
        return f"PostgreSQL at {parts.render_as_string(hide_password=True)} unreachable: {exc}"
    tag = uuid.uuid4().hex[:8]
    names = [f"armature_bench_{tag}_store", f"armature_bench_{tag}_raw"]
    for db in names:
        admin.execute(f'CREATE DATABASE "{db}"')
    return admin, names


def report_text(results: list[dict[str, Any]], skipped: list[str]) -> None:
    for r in results:
        target = f" (target ≥ {TARGET_SQLITE_TRACES_S:,})" if r["backend"] == "sqlite" else ""
        print(f"{r['backend']}: {r['records']:,} trace records, {r['writers']} writer processes")
        print(f"  store     {r['store_traces_s']:>8,} traces/s{target}")
        print(f"  baseline  {r['baseline_traces_s']:>8,} traces/s (raw executemany, same rows)")
        print(f"  ratio     {r['ratio']:>8.3f} (store / baseline)")
        print(
            f"  dashboard_summary {r['query_ms']:>7.1f} ms (median of 5; target ≤ "
            f"{TARGET_QUERY_MS} ms); plain scan {r['scan_ms']:.1f} ms; ratio "
            f"{r['query_ms'] / max(r['scan_ms'], 0.001):.2f}"
        )
        for s in r["summary"]:
            print(
                f"    {s['spec_hash'][:8]} v{s['spec_version']}: {s['runs']} runs, "
                f"HQS {s['mean_hqs']}, p50/p95 {s['latency_p50_ms']:.0f}/"
                f"{s['latency_p95_ms']:.0f} ms, {s['prompt_tokens'] + s['completion_tokens']:,} "
                f"tokens, ${s['cost_usd']:.2f}, failures {s['failures']}"
            )
    for line in skipped:
        print(line)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from sqlalchemy.engine import make_url

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=100_000, help="records (default 100,000)")
    parser.add_argument("--writers", type=int, default=4, help="writer processes (default 4)")
    parser.add_argument(
        "--pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server's URL, or 'none' to skip it",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="armature-bench-") as tmp:
        results.append(
            bench_backend(
                "sqlite",
                f"sqlite:///{Path(tmp) / 'store.db'}",
                f"sqlite:///{Path(tmp) / 'raw.db'}",
                args.traces,
                args.writers,
            )
        )
    if args.pg != "none":
        scratch = _pg_scratch(args.pg)
        if isinstance(scratch, str):
            skipped.append(f"postgresql: skipped — {scratch}")
        else:
            admin, (store_db, raw_db) = scratch
            server = make_url(args.pg)
            try:
                results.append(
                    bench_backend(
                        "postgresql",
                        server.set(database=store_db).render_as_string(hide_password=False),
                        server.set(database=raw_db).render_as_string(hide_password=False),
                        args.traces,
                        args.writers,
                    )
                )
            finally:
                for db in (store_db, raw_db):
                    admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                admin.close()
    if args.json:
        print(json.dumps({"results": results, "skipped": skipped}, indent=2))
    else:
        report_text(results, skipped)
        print(f"({time.perf_counter() - began:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
