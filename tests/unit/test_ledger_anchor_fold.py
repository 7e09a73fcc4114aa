"""The ledger anchor's fold (pure): what Temporal keeps of a database's ledger heads, and the
identity that names the anchor (issue #25, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from armature_temporal.runtime.ledger_anchor import (
    MAX_CHECKPOINTS,
    MAX_CONFLICTS,
    RECENT_CHECKPOINTS,
    LedgerAnchorState,
    LedgerHead,
    advance,
    ledger_anchor_id,
)
from armature_temporal.store.ledger import database_identity

AT = "2025-03-01T12:00:00+00:00"


def _head(seq: int, *, store: str = "s1", genesis: str = "g0", tag: str = "") -> LedgerHead:
    return LedgerHead(store_id=store, genesis=genesis, seq=seq, hash=f"h{seq}{tag}", recorded_at=AT)


def _state() -> LedgerAnchorState:
    return LedgerAnchorState(database="sqlite:///x.db", key_id="k", store_id="s1", genesis="g0")


def test_newer_heads_advance_and_older_ones_arriving_late_change_nothing() -> None:
    state = advance(_state(), _head(3), AT)
    state = advance(state, _head(7), AT)
    late = advance(state, _head(5), AT)
    assert late.head == state.head and late.head is not None and late.head.seq == 7
    assert [c.seq for c in late.checkpoints] == [3, 7]
    assert late.heads_seen == 3 and late.conflicts_seen == 0
    again = advance(late, _head(7), AT)  # sent twice
    assert again.checkpoints == late.checkpoints and again.conflicts_seen == 0


@pytest.mark.parametrize(
    ("head", "why"),
    [
        (_head(9, store="s2"), "other store"),
        (_head(9, genesis="g1"), "other genesis"),
        (_head(7, tag="x"), "other hash"),
    ],
)
def test_a_head_that_does_not_continue_the_anchored_ledger_is_a_conflict(
    head: LedgerHead, why: str
) -> None:
    state = advance(advance(_state(), _head(3), AT), _head(7), AT)
    after = advance(state, head, AT)
    assert after.head == state.head and after.checkpoints == state.checkpoints
    assert after.conflicts_seen == 1 and [c.why for c in after.conflicts] == [why]


def test_conflicts_and_checkpoints_stay_bounded_and_keep_the_first_and_newest() -> None:
    state = _state()
    for seq in range(1, 1001):
        state = advance(state, _head(seq), AT)
        state = advance(state, _head(seq, store="evil"), AT)
    assert len(state.checkpoints) <= MAX_CHECKPOINTS
    seqs = [c.seq for c in state.checkpoints]
    assert seqs[0] == 1 and seqs[-RECENT_CHECKPOINTS:] == list(range(985, 1001))
    assert seqs == sorted(set(seqs))
    assert len(state.conflicts) == MAX_CONFLICTS and state.conflicts_seen == 1000
    assert len(state.model_dump_json()) < 20_000  # what continue-as-new carries


def test_the_anchor_is_named_after_where_the_database_is(tmp_path: Path) -> None:
    real = tmp_path / "home" / "armature.db"
    link = tmp_path / "link"
    real.parent.mkdir()
    link.symlink_to(real.parent)
    assert database_identity(f"sqlite:///{real}") == database_identity(
        f"sqlite:///{link}/armature.db"
    )
    pg = "postgresql+psycopg://worker:secret@DB.internal/armature?connect_timeout=3"
    assert database_identity(pg) == "postgresql://db.internal:5432/armature"
    assert database_identity("postgresql://reader@db.internal:5432/armature") == (
        database_identity(pg)
    )
    schema = "postgresql+psycopg://u@h/db?options=-csearch_path%3Dt_1"
    assert database_identity(schema) == "postgresql://h:5432/db?options=-csearch_path=t_1"
    assert ledger_anchor_id(database_identity(pg)) != ledger_anchor_id(database_identity(schema))
    assert ledger_anchor_id("x").startswith("armature-ledger-")
