"""The knowledge layer's schema migrations (18: knowledge collections, 19: their full-text
index stemmed, 20: facts), split from :mod:`armature_temporal.store.migrations`, which lists
and applies them in order. Frozen like every migration: never edit one that has shipped."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

__all__ = ["_v18_knowledge", "_v19_knowledge_stemming", "_v20_facts"]


def _v18_knowledge(conn: Connection) -> None:
    """Knowledge collections: documents and their chunks (text, sha256, vector), and a
    full-text index over the chunks: SQLite's FTS5 (a table of its own, kept in step by the
    store), PostgreSQL's tsvector with a GIN index."""
    meta = MetaData()
    Table(
        "knowledge_sources",
        meta,
        Column("collection", String(100), primary_key=True),
        Column("source", String(1000), primary_key=True),
        Column("sha256", String(64), nullable=False),
        Column("chunks", Integer, nullable=False),
        Column("embedder", String(100), nullable=False),
        Column("added_at", String(40), nullable=False),
    )
    Table(
        "knowledge_chunks",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("collection", String(100), nullable=False),
        Column("source", String(1000), nullable=False),
        Column("ord", Integer, nullable=False),
        Column("heading", Text, nullable=False),
        Column("text", Text, nullable=False),
        Column("sha256", String(64), nullable=False),
        Column("vector", JSON, nullable=False),
        Index("ix_knowledge_chunks_source", "collection", "source", "ord"),
    )
    meta.create_all(conn)
    if conn.dialect.name == "sqlite":
        conn.execute(
            text(
                "CREATE VIRTUAL TABLE knowledge_fts USING fts5("
                "text, heading, chunk_id UNINDEXED, collection UNINDEXED)"
            )
        )
    else:
        conn.execute(
            text(
                "CREATE INDEX ix_knowledge_chunks_fts ON knowledge_chunks "
                "USING GIN (to_tsvector('english', heading || ' ' || text))"
            )
        )


def _v19_knowledge_stemming(conn: Connection) -> None:
    """SQLite's full-text index of knowledge chunks stems words (FTS5's ``porter`` tokenizer
    over ``unicode61``), as PostgreSQL's ``english`` configuration already does: the table is
    made again and filled from ``knowledge_chunks``, so a collection indexed before is found
    as before, now by stems. PostgreSQL: nothing to change."""
    if conn.dialect.name != "sqlite":
        return
    conn.execute(text("DROP TABLE knowledge_fts"))
    conn.execute(
        text(
            "CREATE VIRTUAL TABLE knowledge_fts USING fts5("
            "text, heading, chunk_id UNINDEXED, collection UNINDEXED, "
            "tokenize = 'porter unicode61')"
        )
    )
    conn.execute(
        text(
            "INSERT INTO knowledge_fts (text, heading, chunk_id, collection) "
            "SELECT text, heading, id, collection FROM knowledge_chunks ORDER BY id"
        )
    )


def _v20_facts(conn: Connection) -> None:
    """Facts that outlive a run: the facts (with status and version links), each sighting's
    provenance, and what happened to each fact. (19 is the knowledge index's stemming.)"""
    meta = MetaData()
    Table(
        "facts",
        meta,
        Column("id", String(40), primary_key=True),
        Column("namespace", String(200), nullable=False),
        Column("subject", String(500), nullable=False),
        Column("subject_name", Text, nullable=False),
        Column("predicate", String(200), nullable=False),
        Column("value", JSON),
        Column("object_entity", String(500)),
        Column("object_name", Text),
        Column("text", Text, nullable=False),
        Column("kind", String(20), nullable=False),
        Column("confidence", Float, nullable=False),
        Column("cardinality", String(10), nullable=False),
        Column("supersedes", Boolean, nullable=False),
        Column("status", String(20), nullable=False),
        Column("superseded_by", String(40)),
        Column("previous", String(40)),
        Column("recorded_at", String(40), nullable=False),
        Column("findings", JSON),
        Index("ix_facts_slot", "namespace", "subject", "predicate", "status"),
        Index("ix_facts_namespace_status", "namespace", "status"),
        Index("ix_facts_object", "namespace", "object_entity"),
    )
    Table(
        "fact_provenance",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("fact_id", String(40), nullable=False),
        Column("namespace", String(200), nullable=False),
        Column("run_id", String(200), nullable=False),
        Column("stage", String(100), nullable=False),
        Column("field", String(500), nullable=False),
        Column("recorded_at", String(40), nullable=False),
        Column("source_hash", String(64), nullable=False),
        UniqueConstraint(
            "fact_id", "namespace", "run_id", "stage", "field", name="uq_fact_provenance"
        ),
    )
    Table(
        "fact_events",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("fact_id", String(40), nullable=False),
        Column("at", String(40), nullable=False),
        Column("event", String(20), nullable=False),
        Column("other", String(40)),
        Column("detail", JSON),
        Index("ix_fact_events_fact", "fact_id", "id"),
    )
    meta.create_all(conn)
