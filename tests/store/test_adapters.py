"""Fine-tune adapters in the trace store, on SQLite and PostgreSQL alike (``db_url`` is
parametrised in conftest.py): a faithful round trip, idempotent saves, listing, the adapter a
``provider: local`` tier with ``adapter: latest`` loads, the status compare-and-set (also under
a race), and the migration that adds the table to an old store."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from sqlalchemy import inspect, text

from armature_temporal.finetune.models import Adapter, TrainReport
from armature_temporal.store import AdapterError, StoreError, TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def make_adapter(
    adapter_id: str = "ft-1/draft",
    *,
    spec: str = "triage",
    stage: str = "draft",
    minute: int = 0,
    **overrides: Any,
) -> Adapter:
    fields: dict[str, Any] = {
        "id": adapter_id,
        "spec_name": spec,
        "stage": stage,
        "base_model": "/models/qwen2.5-0.5b-instruct",
        "path": f"/var/armature/adapters/{spec}/{stage}/{adapter_id.replace('/', '_')}",
        "created_at": (T0 + timedelta(minutes=minute)).isoformat(),
        "finetune_run_id": f"finetune-{spec}-{minute}",
        "examples": 137,
        "report": TrainReport(
            adapter_dir=f"/var/armature/adapters/{spec}/{stage}",
            steps=100,
            train_examples=110,
            eval_examples=27,
            train_loss_first=2.718281828459045,
            train_loss_last=0.123456789012345,
            eval_loss_before=1.9,
            eval_loss_after=1.2000000000000002,
            seconds=83.25,
            device="cuda",
        ),
        "verdict": "verified",
        "detail": "held-out loss 1.90 → 1.20 (ünïcode — kept)",
    }
    fields.update(overrides)
    return Adapter.model_validate(fields)


def sql(store: TraceStore, statement: str, **params: Any) -> list[Any]:
    with store.engine.begin() as conn:
        result = conn.execute(text(statement), params)
        return list(result.all()) if result.returns_rows else []


# --- saving and reading -------------------------------------------------------------------------


def test_round_trip_keeps_every_field(store: TraceStore) -> None:
    saved = make_adapter()
    assert store.save_adapters([saved]) == 1
    loaded = store.adapter(saved.id)
    assert loaded == saved
    assert loaded is not None and loaded.model_dump() == saved.model_dump()
    assert loaded.report == saved.report and isinstance(loaded.report, TrainReport)
    assert loaded.report.train_loss_last == 0.123456789012345
    assert loaded.report.eval_loss_after == 1.2000000000000002
    assert (loaded.stage, loaded.status) == ("draft", "active")
    assert store.adapters() == [saved]
    assert store.adapter("ft-1/nope") is None
    # The model's ``stage`` is the ``stage_id`` column.
    assert sql(store, "SELECT stage_id, status, status_changed_at FROM adapters") == [
        ("draft", "active", None)
    ]


def test_a_not_better_retired_adapter_round_trips(store: TraceStore) -> None:
    saved = make_adapter(verdict="not_better", status="retired", examples=0, detail="")
    store.save_adapters([saved])
    assert store.adapter(saved.id) == saved


def test_saving_again_is_idempotent_and_leaves_stored_adapters_alone(store: TraceStore) -> None:
    batch = [make_adapter(f"ft-1/s{i}", stage=f"s{i}", minute=i) for i in range(3)]
    assert store.save_adapters(batch) == 3
    store.set_adapter_status("ft-1/s0", "retired", expected="active")
    # A retried activity re-sends the batch (here with a new one and a changed copy of s1).
    resent = [*batch, make_adapter("ft-1/s3", stage="s3", minute=3)]
    resent[1] = batch[1].model_copy(update={"detail": "rewritten"})
    resent[0] = batch[0]  # still "active" in the re-sent copy
    assert store.save_adapters(resent) == 1
    assert store.save_adapters(resent) == 0
    assert sql(store, "SELECT count(*) FROM adapters") == [(4,)]
    assert store.adapter("ft-1/s1") == batch[1]
    s0 = store.adapter("ft-1/s0")
    assert s0 is not None and s0.status == "retired"


def test_duplicate_ids_in_one_batch_are_stored_once(store: TraceStore) -> None:
    first = make_adapter("ft-1/draft")
    assert store.save_adapters([first, first.model_copy(update={"detail": "second"})]) == 1
    assert store.adapters() == [first]
    assert store.save_adapters([]) == 0


def test_listing_is_newest_first_filtered_and_limited(store: TraceStore) -> None:
    draft = [make_adapter(f"d{i}", stage="draft", minute=i) for i in range(4)]
    review = [make_adapter(f"v{i}", stage="review", minute=10 + i) for i in range(2)]
    refund = [make_adapter("r0", spec="refund", stage="draft", minute=20)]
    store.save_adapters([draft[2], review[0], refund[0], draft[0], review[1]])
    store.save_adapters([draft[3], draft[1]])
    store.set_adapter_status("d1", "retired", expected="active")
    store.set_adapter_status("v0", "retired", expected="active")

    assert [a.id for a in store.adapters()] == ["r0", "v1", "v0", "d3", "d2", "d1", "d0"]
    assert [a.id for a in store.adapters(limit=3)] == ["r0", "v1", "v0"]
    assert [a.id for a in store.adapters(spec="triage", limit=2)] == ["v1", "v0"]
    assert [a.id for a in store.adapters(stage="draft")] == ["r0", "d3", "d2", "d1", "d0"]
    assert [a.id for a in store.adapters(spec="triage", stage="draft")] == ["d3", "d2", "d1", "d0"]
    assert [a.id for a in store.adapters(spec="refund")] == ["r0"]
    assert [a.id for a in store.adapters(status="retired")] == ["v0", "d1"]
    assert [a.id for a in store.adapters(spec="triage", stage="draft", status="active")] == [
        "d3",
        "d2",
        "d0",
    ]
    assert store.adapters(spec="nothing") == []
    assert store.adapters(stage="nothing") == []
    # Same creation time: the order is still stable (by id, descending).
    store.save_adapters([make_adapter("d3b", minute=3), make_adapter("d3a", minute=3)])
    assert [a.id for a in store.adapters(stage="draft", spec="triage", limit=3)] == [
        "d3b",
        "d3a",
        "d3",
    ]


def test_a_row_written_without_a_status_is_active(store: TraceStore) -> None:
    sql(
        store,
        "INSERT INTO adapters (id, spec_name, stage_id, base_model, path, created_at, "
        "finetune_run_id) VALUES ('raw', 'triage', 'draft', '/m', '/a', "
        "'2025-01-01T00:00:00+00:00', 'ft')",
    )
    assert sql(store, "SELECT status, status_changed_at FROM adapters") == [("active", None)]


# --- the adapter ``adapter: latest`` loads ------------------------------------------------------


def test_latest_adapter_is_the_newest_verified_active_one_of_that_spec_and_stage(
    store: TraceStore,
) -> None:
    assert store.latest_adapter("triage", "draft") is None
    store.save_adapters(
        [
            make_adapter("old", minute=0),
            make_adapter("good", minute=5),
            make_adapter("worse", minute=6, verdict="not_better"),
            make_adapter("retired", minute=7),
            make_adapter("other-stage", stage="review", minute=8),
            make_adapter("other-spec", spec="refund", minute=9),
            make_adapter("older", minute=1),
        ]
    )
    store.set_adapter_status("retired", "retired", expected="active")

    latest = store.latest_adapter("triage", "draft")
    assert latest == make_adapter("good", minute=5)
    other_stage = store.latest_adapter("triage", "review")
    assert other_stage is not None and other_stage.id == "other-stage"
    other_spec = store.latest_adapter("refund", "draft")
    assert other_spec is not None and other_spec.id == "other-spec"
    assert store.latest_adapter("triage", "classify") is None
    assert store.latest_adapter("nothing", "draft") is None

    # Retiring it falls back to the next newest; reactivating the retired one picks it.
    store.set_adapter_status("good", "retired", expected="active")
    fallback = store.latest_adapter("triage", "draft")
    assert fallback is not None and fallback.id == "older"
    store.set_adapter_status("retired", "active", expected="retired")
    back = store.latest_adapter("triage", "draft")
    assert back is not None and back.id == "retired" and back.status == "active"


def test_latest_adapter_is_none_when_none_is_verified_and_active(store: TraceStore) -> None:
    store.save_adapters(
        [
            make_adapter("worse", minute=0, verdict="not_better"),
            make_adapter("gone", minute=1, status="retired"),
        ]
    )
    assert store.latest_adapter("triage", "draft") is None


# --- status ----------------------------------------------------------------------------------


def test_status_changes_once_and_a_second_attempt_says_when_it_changed(store: TraceStore) -> None:
    store.save_adapters([make_adapter("ft-1/draft")])
    before = datetime.now(UTC)
    retired = store.set_adapter_status("ft-1/draft", "retired", expected="active")
    after = datetime.now(UTC)
    assert retired == make_adapter("ft-1/draft", status="retired")
    assert store.adapter("ft-1/draft") == retired
    [(changed_at,)] = sql(store, "SELECT status_changed_at FROM adapters WHERE id = 'ft-1/draft'")
    when = datetime.fromisoformat(changed_at)
    assert when.utcoffset() == timedelta(0) and before <= when <= after

    for expected in ("active", "retired"):
        with pytest.raises(AdapterError) as raised:
            store.set_adapter_status("ft-1/draft", "retired", expected=expected)
        assert str(raised.value) == (
            f"adapter ft-1/draft is already retired (since {changed_at}); nothing changed"
        )
        assert (raised.value.adapter_id, raised.value.status, raised.value.changed_at) == (
            "ft-1/draft",
            "retired",
            changed_at,
        )
    assert isinstance(raised.value, StoreError)
    assert store.adapter("ft-1/draft") == retired
    assert sql(store, "SELECT status_changed_at FROM adapters WHERE id = 'ft-1/draft'") == [
        (changed_at,)
    ]


def test_expected_status_is_checked(store: TraceStore) -> None:
    store.save_adapters([make_adapter("a")])
    with pytest.raises(AdapterError, match=r"^adapter a is active, not retired; nothing changed$"):
        store.set_adapter_status("a", "retired", expected="retired")
    # Never changed: "already active" has no "since".
    with pytest.raises(AdapterError, match=r"^adapter a is already active; nothing changed$"):
        store.set_adapter_status("a", "active", expected="active")
    store.set_adapter_status("a", "retired", expected="active")
    back = store.set_adapter_status("a", "active", expected="retired")
    assert back.status == "active"


def test_unknown_adapter_raises_saying_how_to_list_them(store: TraceStore) -> None:
    store.save_adapters([make_adapter("ft-1/draft")])
    with pytest.raises(AdapterError) as raised:
        store.set_adapter_status("ft-9/x", "retired", expected="active")
    assert str(raised.value) == "no adapter 'ft-9/x'; list them with `armature adapters list`"
    assert (raised.value.adapter_id, raised.value.status) == ("ft-9/x", None)
    assert [a.status for a in store.adapters()] == ["active"]


def test_two_threads_racing_to_retire_an_adapter_one_wins(db_url: str) -> None:
    stores = [TraceStore(db_url), TraceStore(db_url)]
    try:
        ids = [f"ft-1/s{i}" for i in range(8)]
        stores[0].save_adapters(
            [make_adapter(i, stage=f"s{n}", minute=n) for n, i in enumerate(ids)]
        )
        for adapter_id in ids:
            barrier = threading.Barrier(2)

            def retire(n: int, adapter_id: str = adapter_id, barrier: Any = barrier) -> Any:
                barrier.wait()
                status: Literal["retired"] = "retired"
                try:
                    return stores[n].set_adapter_status(adapter_id, status, expected="active")
                except AdapterError as exc:
                    return exc

            with ThreadPoolExecutor(2) as pool:
                results = list(pool.map(retire, [0, 1]))
            won = [r for r in results if isinstance(r, Adapter)]
            lost = [r for r in results if isinstance(r, AdapterError)]
            assert len(won) == 1 and len(lost) == 1, results
            assert str(lost[0]).startswith(f"adapter {adapter_id} is already retired (since ")
            assert stores[1].adapter(adapter_id) == won[0]
    finally:
        for opened in stores:
            opened.close()


# --- migration -----------------------------------------------------------------------------------


def test_a_v4_database_gains_the_adapters_table(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=4) == [1, 2, 3, 4]
    assert not inspect(engine).has_table("adapters")
    release_engine(engine)
    # The v4 store is in use: it holds a proposal.
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO improvement_proposals (id, spec_name, improve_run_id, created_at) "
                "VALUES ('imp-1/p0', 'triage', 'imp', '2025-01-01T00:00:00+00:00')"
            )
        )
    release_engine(engine)

    store = TraceStore(db_url)
    try:
        applied = sql(store, "SELECT version, name FROM schema_migrations")
        assert (5, "adapters") in applied
        assert [v for v, _ in applied if v == 5] == [5]
        indexes = {ix["name"] for ix in inspect(store.engine).get_indexes("adapters")}
        assert "ix_adapters_spec_stage_created" in indexes
        # The proposal the v4 store held is untouched.
        assert sql(store, "SELECT id, status FROM improvement_proposals") == [
            ("imp-1/p0", "proposed")
        ]
        saved = make_adapter()
        assert store.save_adapters([saved]) == 1
        assert store.adapters(spec="triage", stage="draft") == [saved]
        assert store.latest_adapter("triage", "draft") == saved
        assert store.set_adapter_status(saved.id, "retired", expected="active").status == "retired"
        assert store.latest_adapter("triage", "draft") is None
    finally:
        store.close()
    # Opening it again applies nothing more.
    reopened = make_engine(db_url)
    try:
        assert migrate(reopened) == []
    finally:
        release_engine(reopened)
