"""Migration 15: an adapter keeps what decided its verdict (the base model's and its own
held-out loss, its paired runs' mean HQS difference, 95% interval and number of pairs); an
adapter stored before it still loads, with no figures and its old verdict, on SQLite and
PostgreSQL alike."""

from __future__ import annotations

from sqlalchemy import MetaData, Table

from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine
from tests.store.test_adapters import make_adapter

FIGURES = {
    "base_loss",
    "heldout_loss",
    "paired_diff",
    "paired_ci_low",
    "paired_ci_high",
    "paired_n",
}


def test_migration_15_keeps_old_adapters_and_stores_the_figures(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=13)[-1] == 13
    old = make_adapter("ft-0/draft").model_dump(mode="json", exclude=FIGURES)
    old["stage_id"] = old.pop("stage")
    with engine.begin() as conn:
        table = Table("adapters", MetaData(), autoload_with=conn)
        assert not FIGURES & set(table.c.keys())
        conn.execute(table.insert().values(**old, status_changed_at=None))
    assert 15 in migrate(engine)
    release_engine(engine)
    store = TraceStore(db_url)
    try:
        kept = store.adapter("ft-0/draft")
        assert kept is not None and kept.verdict == "verified"
        assert (kept.base_loss, kept.heldout_loss, kept.paired_diff, kept.paired_n) == (
            None,
            None,
            None,
            None,
        )
        assert store.latest_adapter("triage", "draft") == kept
        new = make_adapter(
            "ft-1/draft",
            minute=5,
            verdict="insufficient_evidence",  # 21 characters: wider than the old column
            base_loss=1.9000000000000001,
            heldout_loss=1.2,
            paired_diff=-0.0125,
            paired_ci_low=-0.05,
            paired_ci_high=0.0,
            paired_n=4,
        )
        store.save_adapters([new])
        assert store.adapter("ft-1/draft") == new
        # Not verified: `adapter: latest` still loads the older, verified one.
        assert store.latest_adapter("triage", "draft") == kept
    finally:
        store.close()


def test_a_preference_tuned_adapter_keeps_its_preference_report_and_source_runs(
    db_url: str,
) -> None:
    from armature_temporal.finetune.models import PreferenceReport

    report = PreferenceReport(
        adapter_dir="/var/armature/adapters/triage/draft/dpo",
        steps=40,
        train_pairs=10,
        eval_pairs=7,
        beta=0.1,
        train_loss_first=0.6931471805599453,
        train_loss_last=0.01,
        accuracy=1.0,
        accuracy_low=0.6456611570247934,
        accuracy_high=1.0,
        base_margin_accuracy=0.42857142857142855,
        adapter_margin_accuracy=0.5714285714285714,
        margin_diff=0.14285714285714285,
        margin_diff_low=-0.42857142857142855,
        margin_diff_high=0.5714285714285714,
        mean_reward_margin=1.25,
        seconds=5.5,
        device="cpu",
        source_runs=["run-a", "run-b"],
    )
    adapter = make_adapter(
        "ft-2/draft",
        examples=17,
        report=report,
        verdict="paired_not_better",
        paired_diff=-1.0,
        paired_ci_low=-1.0,
        paired_ci_high=-1.0,
        paired_n=7,
    )
    store = TraceStore(db_url)
    try:
        store.save_adapters([adapter])
        kept = store.adapter("ft-2/draft")
        assert kept == adapter and isinstance(kept.report, PreferenceReport)
        assert kept.report.source_runs == ["run-a", "run-b"]
        assert kept.base_loss is None and kept.heldout_loss is None
        assert store.latest_adapter("triage", "draft") is None  # not verified: never served
    finally:
        store.close()
