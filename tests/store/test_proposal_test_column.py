"""Migration 13: a proposal keeps the statistical test that decided it; a proposal stored
before it (no such column) still loads, with no test."""

from __future__ import annotations

from sqlalchemy import MetaData, Table

from armature_temporal.improve.models import Proposal, SpecChange, VerificationTest
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine

TEST = VerificationTest(
    kind="non_inferiority",
    margin=0.02,
    m=2,
    holm_rank=1,
    alpha_adj=0.025,
    p_one_sided=0.0002,
    adj_ci_low=0.0,
    adj_ci_high=0.0,
    baseline_cost=4.0,
    candidate_cost=3.0,
    cost_unit="tier units",
)


def _proposal(pid: str, test: VerificationTest | None) -> Proposal:
    return Proposal(
        id=pid,
        spec_name="s",
        improve_run_id="improve-s-1",
        created_at="2026-12-02T01:00:00+00:00",
        base_spec_hash="a" * 64,
        candidate_spec_hash="b" * 64,
        changes=[SpecChange(stage="x", field="model_tier", old="large", new="small", why="easy")],
        baseline_hqs=[0.9, 0.9],
        candidate_hqs=[0.9, 0.9],
        delta=0.0,
        ci_low=0.0,
        ci_high=0.0,
        verdict="verified",
        detail="non-inferiority test (margin 0.02 HQS): ...",
        diff="",
        spec_text="name: s\n",
        base_spec_text="name: s\n",
        test=test,
    )


def test_migration_13_keeps_old_proposals_and_stores_the_test(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=10)[-1] == 10
    later = {"test", "lane", "lane_reasons", "predicted_fixes", "predicted_regressions"}
    old = _proposal("s-pold", None).model_dump(
        mode="json", exclude=later | {"base_failures", "status"}
    )  # columns of migrations 11-13
    with engine.begin() as conn:
        table = Table("improvement_proposals", MetaData(), autoload_with=conn)
        assert "test" not in table.c
        conn.execute(table.insert().values(**old, status_changed_at=None))
    assert 13 in migrate(engine)
    release_engine(engine)
    store = TraceStore(db_url)
    try:
        kept_old = store.proposal("s-pold")
        assert kept_old is not None and kept_old.test is None
        store.save_proposals([_proposal("s-pnew", TEST)])
        kept_new = store.proposal("s-pnew")
        assert kept_new is not None and kept_new.test == TEST
    finally:
        store.close()
