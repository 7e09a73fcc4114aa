"""Migration 22: an improvement round's effort report (proposals tried, runs and tokens spent,
why it stopped, its held-out figure, the judge-tier check), split from
:mod:`armature_temporal.store.migrations`, which lists and applies it in order. Frozen like
every migration: never edit one that has shipped."""

from __future__ import annotations

from sqlalchemy import Connection, text

__all__ = ["_v22_round_effort"]


def _v22_round_effort(conn: Connection) -> None:
    """Rounds keep their effort report as JSON; rounds stored before it keep NULL (shown as
    not reported)."""
    conn.execute(text("ALTER TABLE improve_rounds ADD COLUMN effort JSON"))
