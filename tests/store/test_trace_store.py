"""The trace store, on SQLite and PostgreSQL alike (``db_url`` is parametrised in conftest.py):
idempotent writes and run summaries, concurrent writer processes, migrations from the first
schema, tamper evidence through the database, and errors that say what to do."""

from __future__ import annotations

import multiprocessing as mp
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, Table, insert, inspect, text

from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.store import MIGRATIONS, StoreError, TraceStore, migrate
from armature_temporal.store import migrations as migrations_module
from armature_temporal.store.engine import make_engine, release_engine
from armature_temporal.store.schema import Base, TraceRow
from tests.store.chains import SPEC_HASH, make_run, write_runs


def sql(store: TraceStore, statement: str, **params: Any) -> list[Any]:
    """Run raw SQL against the store's database, as someone with database access could."""
    with store.engine.begin() as conn:
        result = conn.execute(text(statement), params)
        return list(result.all()) if result.returns_rows else []


# --- idempotent writes and run summaries ------------------------------------------------------


def test_retried_batch_is_stored_once_and_the_run_summary_is_right(store: TraceStore) -> None:
    records = make_run("run-a", retry_stage="draft", judge_score=0.8, gate_stage="draft")

    assert store.write(records) == len(records)
    assert store.write(records) == 0  # the activity retried after its first write committed

    assert store.count() == len(records)
    assert store.records("run-a") == records
    run = store.run("run-a")
    assert run is not None
    assert (run.spec_name, run.spec_hash, run.spec_version) == ("triage", SPEC_HASH, "3")
    assert (run.status, run.reason) == ("completed", None)
    assert run.inputs == {"ticket": "ticket run-a"}
    assert run.outputs == {"answer": "done run-a"}
    assert (run.started_at, run.finished_at) == (records[0].recorded_at, records[-1].recorded_at)
    assert run.latency_ms == 4000.0
    # 4 attempts (draft needed two) of 100 + 20 tokens and $0.001 each.
    assert (run.prompt_tokens, run.completion_tokens) == (400, 80)
    assert run.cost_usd == pytest.approx(0.004)
    # First run of its version: no latency baseline, so that component is left out.
    # success 1, output_valid 3/4, judge 0.8, happy_path 3/4 (draft retried), weights renormalised:
    # (0.25 + 0.2625 + 0.16 + 0.075) / 0.90
    assert run.hqs == pytest.approx(
        (0.25 * 1 + 0.35 * 0.75 + 0.20 * 0.8 + 0.10 * 0.75) / 0.90, abs=1e-4
    )
    assert run.hqs == 0.8306
    assert run.chain_head == records[-1].hash
    gates = store.gate_decisions("run-a")
    assert [(g.stage_id, g.decision, g.decided_by, g.comment) for g in gates] == [
        ("draft", "approve", "ana", "looks right")
    ]
    assert store.verify() == (1, [])


def test_run_flushed_in_batches_each_retried_counts_every_record_once(store: TraceStore) -> None:
    records = make_run("run-b", retry_stage="classify", gate_stage="review")
    batches = [records[i : i + 3] for i in range(0, len(records), 3)]

    new = [store.write(batch) + store.write(batch) for batch in batches]

    assert new == [len(batch) for batch in batches]
    assert store.count() == len(records)
    assert store.records("run-b") == records
    run = store.run("run-b")
    assert run is not None and run.status == "completed"
    assert (run.prompt_tokens, run.chain_head) == (400, records[-1].hash)
    assert len(store.gate_decisions("run-b")) == 1


def test_failed_run_summary_keeps_its_reason_and_scores_no_success(store: TraceStore) -> None:
    records = make_run("run-f", fail_stage="draft")
    store.write(records)

    run = store.run("run-f")
    assert run is not None
    assert (run.status, run.reason) == ("failed", "stage 'draft' failed: output invalid")
    # success 0, output_valid 1/2, happy_path 1/2: (0 + 0.35·0.5 + 0.10·0.5) / 0.70
    assert run.hqs == pytest.approx((0.35 * 0.5 + 0.10 * 0.5) / 0.70, abs=1e-4)
    assert run.hqs == 0.3214
    assert run.prompt_tokens == 200
    assert run.cost_usd == pytest.approx(0.002)


def test_a_run_is_scored_with_the_hqs_weights_it_recorded(store: TraceStore) -> None:
    store.write(make_run("run-w", fail_stage="draft", hqs_weights={"success": 0.0}))
    store.write(make_run("run-x", fail_stage="draft", hqs_weights={"speed": 1.0}))

    weighted, unknown = store.run("run-w"), store.run("run-x")
    assert weighted is not None and unknown is not None
    # The failed run of the test above, its success not counted: (0.35·0.5 + 0.10·0.5) / 0.45
    assert weighted.hqs == 0.5
    # Weights no valid plan has: the run is recorded, unscored.
    assert (unknown.status, unknown.hqs) == ("failed", None)


def test_latency_is_scored_against_earlier_runs_and_a_retry_keeps_the_score(
    store: TraceStore,
) -> None:
    first = make_run("run-1", latency_ms=4000.0)
    second = make_run("run-2", latency_ms=8000.0, start=60.0)
    store.write(first)
    store.write(second)
    score = store.run("run-2")
    assert score is not None
    # All else perfect: success, output_valid and happy_path are 1; latency 4000/8000:
    # (0.25 + 0.35 + 0.10 + 0.10·0.5) / 0.80
    assert score.hqs == 0.9375

    for n in (3, 4):  # fast runs move the version's median to 2500 ms
        store.write(make_run(f"run-{n}", latency_ms=1000.0, start=60.0 * n))
    assert store.write(second[-2:]) == 0  # run-2's last batch retried after that
    again = store.run("run-2")
    assert again is not None and again.hqs == score.hqs


# --- concurrent writers -------------------------------------------------------------------------


def test_four_writer_processes_lose_and_duplicate_nothing(db_url: str) -> None:
    """Four spawned processes open the same new store at once (racing its migrations) and write
    30 runs each in batches of 4 records, every batch twice."""
    runs, per_run = 30, len(make_run("x", retry_stage="draft"))
    with mp.get_context("spawn").Pool(4) as pool:
        stored = pool.starmap(write_runs, [(db_url, f"w{w}", runs, 4) for w in range(4)])

    store = TraceStore(db_url)
    try:
        assert stored == [runs * per_run] * 4
        assert store.count() == 4 * runs * per_run
        assert store.run_ids() == sorted(f"w{w}-{n:04d}" for w in range(4) for n in range(runs))
        summaries = store.runs(limit=1000)
        assert len(summaries) == 4 * runs
        assert all(r.status == "completed" and r.prompt_tokens == 400 for r in summaries)
        assert all(r.chain_head is not None and r.hqs is not None for r in summaries)
        assert store.verify() == (4 * runs, [])
    finally:
        store.close()


# --- migrations ---------------------------------------------------------------------------------


def test_first_schema_database_is_migrated_and_its_data_stays_readable(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=1) == [1]
    old = make_run("old-run", retry_stage="draft")
    with engine.begin() as conn:  # written the v1 way, into the v1 tables as they exist
        meta = MetaData()
        runs = Table("runs", meta, autoload_with=conn)
        traces = Table("trace_records", meta, autoload_with=conn)
        assert "hqs" not in runs.c and "chain_head" not in runs.c
        conn.execute(insert(traces), [r.model_dump(mode="json") for r in old])
        conn.execute(
            insert(runs).values(
                run_id="old-run",
                spec_name="triage",
                spec_hash=SPEC_HASH,
                spec_version="3",
                policy_version="policy-1",
                status="completed",
                inputs={"ticket": "ticket old-run"},
                outputs={"answer": "done old-run"},
                started_at=old[0].recorded_at,
                finished_at=old[-1].recorded_at,
                latency_ms=4000.0,
                prompt_tokens=400,
                completion_tokens=80,
                cost_usd=0.004,
            )
        )
        v1_applied_at = conn.execute(
            text("SELECT applied_at FROM schema_migrations WHERE version = 1")
        ).scalar_one()
    release_engine(engine)

    store = TraceStore(db_url)
    try:
        applied = sql(store, "SELECT version, name, applied_at FROM schema_migrations ORDER BY 1")
        assert [(v, n) for v, n, _ in applied] == [(v, n) for v, n, _ in MIGRATIONS]
        assert applied[0][2] == v1_applied_at
        assert store.records("old-run") == old
        run = store.run("old-run")
        assert run is not None
        assert (run.status, run.prompt_tokens, run.outputs) == (
            "completed",
            400,
            {"answer": "done old-run"},
        )
        assert (run.hqs, run.chain_head) == (None, None)
        assert store.verify() == (1, [])
        new = make_run("new-run", start=60.0, latency_ms=8000.0)
        store.write(new)
        fresh = store.run("new-run")
        assert fresh is not None and fresh.chain_head == new[-1].hash
        # old-run's 4000 ms is the baseline: latency scores 0.5, all else 1 (see above).
        assert fresh.hqs == 0.9375
    finally:
        store.close()


def test_up_to_date_database_reopens_without_running_migrations(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    TraceStore(db_url).close()

    def refuse(_: Any) -> None:
        raise AssertionError("a migration ran again on an up-to-date database")

    monkeypatch.setattr(migrations_module, "MIGRATIONS", [(v, n, refuse) for v, n, _ in MIGRATIONS])
    store = TraceStore(db_url)
    try:
        assert migrate(store.engine) == []
        assert sql(store, "SELECT count(*) FROM schema_migrations") == [(len(MIGRATIONS),)]
    finally:
        store.close()


POSTGRES_EXPRESSION_INDEXES = {"ix_knowledge_chunks_fts"}


def test_migrations_build_the_schema_that_schema_py_describes(store: TraceStore) -> None:
    inspector = inspect(store.engine)
    for table in Base.metadata.sorted_tables:
        columns = {c["name"] for c in inspector.get_columns(table.name)}
        assert columns == {c.name for c in table.columns}, table.name
        indexes = {
            i["name"]: tuple(i["column_names"])
            for i in inspector.get_indexes(table.name)
            if not i.get("duplicates_constraint")
            # PostgreSQL's full-text index is over an expression, which schema.py cannot
            # describe for both dialects (SQLite keeps an FTS5 table instead)
            and i["name"] not in POSTGRES_EXPRESSION_INDEXES
        }
        assert indexes == {i.name: tuple(c.name for c in i.columns) for i in table.indexes}
        uniques = {u["name"] for u in inspector.get_unique_constraints(table.name)}
        assert uniques == {
            c.name for c in table.constraints if c.__class__.__name__ == "UniqueConstraint"
        }, table.name


# --- tamper evidence ----------------------------------------------------------------------------

# make_run("run-1", retry_stage="draft", judge_score=0.8, gate_stage="draft") has 11 records:
# 0 run_start, 1-2 classify, 3-4 draft attempts, 5 draft stage, 6 gate, 7-8 review, 9 judge,
# 10 run_end.
RUN_KWARGS: dict[str, Any] = {"retry_stage": "draft", "judge_score": 0.8, "gate_stage": "draft"}


def _edit_one_byte_of_output(store: TraceStore, records: list[TraceRecord]) -> None:
    [(stored,)] = sql(
        store,
        "SELECT CAST(output AS TEXT) FROM trace_records WHERE run_id = 'run-1' AND seq = 5",
    )
    assert "draft of run-1" in stored
    value = ":v" if store.engine.dialect.name == "sqlite" else "CAST(:v AS json)"
    sql(
        store,
        f"UPDATE trace_records SET output = {value} WHERE run_id = 'run-1' AND seq = 5",
        v=stored.replace("draft of", "draft 0f"),
    )


def _delete_middle(store: TraceStore, records: list[TraceRecord]) -> None:
    sql(store, "DELETE FROM trace_records WHERE run_id = 'run-1' AND seq = 4")


def _forge(records: list[TraceRecord], seq: int, prev_hash: str) -> dict[str, Any]:
    forged = records[5].model_copy(
        update={"seq": seq, "prev_hash": prev_hash, "output": {"content": "wire the funds"}}
    )
    return forged.sealed().model_dump(mode="json")


def _append_forged_linked(store: TraceStore, records: list[TraceRecord]) -> None:
    """A forger who read the chain: the record links to run_end and its hash is right."""
    with store.engine.begin() as conn:
        conn.execute(insert(TraceRow), [_forge(records, 11, records[10].hash)])


def _append_forged_unlinked(store: TraceStore, records: list[TraceRecord]) -> None:
    with store.engine.begin() as conn:
        conn.execute(insert(TraceRow), [_forge(records, 11, "0" * 64)])


def _splice_forged(store: TraceStore, records: list[TraceRecord]) -> None:
    """Make room at seq 3 (through a temporary range: seq is unique) and insert a record that
    links to record 2 with a right hash."""
    sql(store, "UPDATE trace_records SET seq = seq + 1000 WHERE run_id = 'run-1' AND seq >= 3")
    sql(store, "UPDATE trace_records SET seq = seq - 999 WHERE run_id = 'run-1' AND seq >= 1000")
    with store.engine.begin() as conn:
        conn.execute(insert(TraceRow), [_forge(records, 3, records[2].hash)])


def _swap(store: TraceStore, records: list[TraceRecord]) -> None:
    for old, new in ((2, -1), (7, 2), (-1, 7)):
        sql(
            store,
            "UPDATE trace_records SET seq = :new WHERE run_id = 'run-1' AND seq = :old",
            old=old,
            new=new,
        )


def _truncate_last(store: TraceStore, records: list[TraceRecord]) -> None:
    sql(store, "DELETE FROM trace_records WHERE run_id = 'run-1' AND seq = 10")


def _delete_all(store: TraceStore, records: list[TraceRecord]) -> None:
    sql(store, "DELETE FROM trace_records WHERE run_id = 'run-1'")


@pytest.mark.parametrize(
    ("tamper", "problem", "seq"),
    [
        (_edit_one_byte_of_output, "edited", 5),
        (_delete_middle, "deleted", 4),
        (_append_forged_linked, "inserted", 11),
        (_append_forged_unlinked, "inserted", 11),
        (_splice_forged, "inserted", 3),
        (_swap, "reordered", 2),
        (_truncate_last, "deleted", 10),
        (_delete_all, "deleted", None),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_tampering_in_the_database_is_reported_with_its_problem_and_seq(
    store: TraceStore,
    tamper: Callable[[TraceStore, list[TraceRecord]], None],
    problem: str,
    seq: int | None,
) -> None:
    chains = {f"run-{n}": make_run(f"run-{n}", start=60.0 * n, **RUN_KWARGS) for n in range(3)}
    for records in chains.values():
        store.write(records)
    assert store.verify() == (3, [])

    tamper(store, chains["run-1"])

    checked, breaks = store.verify()
    assert checked == 3
    assert {b.run_id for b in breaks} == {"run-1"}
    chain = [(b.run_id, b.problem, b.seq) for b in breaks if b.check == "chain"]
    assert chain == [("run-1", problem, seq)]
    assert store.verify(["run-0", "run-2"]) == (2, [])


# --- errors -------------------------------------------------------------------------------------


def test_corrupt_sqlite_file_names_the_file_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "armature.db"
    junk = random.Random(7).randbytes(8192)
    path.write_bytes(junk)

    with pytest.raises(StoreError) as caught:
        TraceStore(f"sqlite:///{path}")

    message = str(caught.value)
    assert str(path) in message
    assert "not a database" in message
    assert f"move it aside (mv {path} {path}.corrupt)" in message
    assert path.read_bytes() == junk  # left as it was, for whoever looks into it


@pytest.mark.parametrize("url", ["nosuchdb://host/db", "not a url", "mysql://u@h/db"])
def test_bad_url_raises_store_error_naming_urls_that_work(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        TraceStore(url)
    message = str(caught.value)
    assert f"{url!r} is not a database URL Armature can use" in message
    assert "sqlite:///" in message and "postgresql+psycopg://" in message


def test_unreachable_postgresql_raises_store_error_saying_what_to_check() -> None:
    with pytest.raises(StoreError) as caught:
        TraceStore("postgresql+psycopg://postgres:secret@127.0.0.1:1/armature")
    message = str(caught.value)
    assert "postgresql+psycopg://postgres:***@127.0.0.1:1/armature" in message
    assert "check that the server runs and the URL (ARMATURE_DB_URL) is right" in message
    assert "secret" not in message
