"""Migration 12: proposals remember their review lane; a row from before it reads as the
``review`` lane (nothing old becomes auto-appliable) with no reasons."""

from __future__ import annotations

import json

from sqlalchemy import text

from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine
from tests.unit.test_lanes import _temperature, base


def test_a_v10_proposal_reads_as_review_and_new_ones_keep_their_lane(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=10)[-1] == 10
    old = _temperature(base(), pid="lanes-pold")
    assert old.lane == "auto"  # what it would be classified now; the old row has no lane
    later = {"lane", "lane_reasons", "predicted_fixes", "predicted_regressions", "base_failures"}
    row = old.model_dump(mode="json", exclude=later | {"test"})  # columns of migrations 11-13
    with engine.begin() as conn:
        cols, marks = ", ".join(row), ", ".join(":" + c for c in row)
        conn.execute(
            text(f"INSERT INTO improvement_proposals ({cols}) VALUES ({marks})"),
            {k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()},
        )
    release_engine(engine)
    store = TraceStore(db_url)
    try:
        kept = store.proposal("lanes-pold")
        assert kept is not None and kept.lane == "review" and kept.lane_reasons == []
        new = _temperature(base(), pid="lanes-pnew")
        store.save_proposals([new])
        again = store.proposal("lanes-pnew")
        assert again is not None and again.lane == "auto"
        assert again.lane_reasons == ["draft.role.temperature changed"]
    finally:
        store.close()
