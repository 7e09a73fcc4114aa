"""Migration 21: ``armature eval``'s results (the ``evals`` table), split from
:mod:`armature_temporal.store.migrations`, which lists and applies it in order. Frozen like
every migration: never edit one that has shipped."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = ["_v21_evals"]


def _v21_evals(conn: Connection) -> None:
    """One row per eval of a spec version on a cases file: counts and pass rate, and every
    case's runs and verdicts as JSON."""
    meta = MetaData()
    Table(
        "evals",
        meta,
        Column("id", String(200), primary_key=True),
        Column("spec_name", String(100), nullable=False),
        Column("spec_version", String(50), nullable=False),
        Column("spec_hash", String(64), nullable=False),
        Column("cases_file", Text, nullable=False),
        Column("created_at", String(40), nullable=False),
        Column("repeat", Integer, nullable=False),
        Column("cases", Integer, nullable=False),
        Column("passed", Integer, nullable=False),
        Column("failed", Integer, nullable=False),
        Column("errors", Integer, nullable=False),
        Column("pass_rate", Float),
        Column("results", JSON, nullable=False),
        Index("ix_evals_spec", "spec_name", "created_at"),
    )
    meta.create_all(conn)
