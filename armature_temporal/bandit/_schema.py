"""The bandit tables (SQLAlchemy 2 typed ORM) and their numbered migrations.

The migrations run on start-up, each in its own transaction with its bookkeeping row in
``bandit_schema_migrations`` (separate from the trace store's ``schema_migrations``, so the two
numberings never collide). Never edit a migration that has shipped; add the next number.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    inspect,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "BANDIT_MIGRATIONS",
    "ArmRow",
    "ConfigRow",
    "DecisionRow",
    "EventRow",
    "SnapshotRow",
    "StatsRow",
    "migrate_bandit_tables",
]


class _Base(DeclarativeBase):
    pass


class ConfigRow(_Base):
    """A bandit's configuration (storage excluded), as JSON."""

    __tablename__ = "bandit_configs"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    config: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[str] = mapped_column(String(40))


class ArmRow(_Base):
    """An arm, active or retired; rows are never deleted so history survives."""

    __tablename__ = "bandit_arms"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    arm_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    params: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(10))
    origin: Mapped[str] = mapped_column(String(10))
    parents: Mapped[str] = mapped_column(Text)
    generation: Mapped[int] = mapped_column(Integer)
    prior_alpha: Mapped[float] = mapped_column(Float)
    prior_beta: Mapped[float] = mapped_column(Float)
    low_rounds: Mapped[int] = mapped_column(Integer)
    position: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[str] = mapped_column(String(40))
    retired_at: Mapped[str | None] = mapped_column(String(40))


class StatsRow(_Base):
    """Evidence and detector state of one arm in one context (``''`` is the global one)."""

    __tablename__ = "bandit_stats"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    context: Mapped[str] = mapped_column(String(200), primary_key=True)
    arm_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    s: Mapped[float] = mapped_column(Float)
    f: Mapped[float] = mapped_column(Float)
    up: Mapped[float] = mapped_column(Float)
    down: Mapped[float] = mapped_column(Float)
    n: Mapped[int] = mapped_column(Integer)
    rewarded: Mapped[int] = mapped_column(Integer)
    reward_sum: Mapped[float] = mapped_column(Float)
    resets: Mapped[int] = mapped_column(Integer)


class DecisionRow(_Base):
    """One selection; ``reward`` is set once, atomically, by the first valid reward."""

    __tablename__ = "bandit_decisions"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    decision_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    context: Mapped[str] = mapped_column(String(200))
    arm_id: Mapped[str] = mapped_column(String(100))
    user_id: Mapped[str | None] = mapped_column(String(200))
    a0: Mapped[float] = mapped_column(Float)
    b0: Mapped[float] = mapped_column(Float)
    created_at: Mapped[str] = mapped_column(String(40))
    reward: Mapped[float | None] = mapped_column(Float)
    rewarded_at: Mapped[str | None] = mapped_column(String(40))

    __table_args__ = (Index("ix_bandit_decisions_arm", "name", "context", "arm_id"),)


class EventRow(_Base):
    """One logged change (configuration, arm added/retired/bred, change detected)."""

    __tablename__ = "bandit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), index=True)
    at: Mapped[str] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(30))
    arm_id: Mapped[str | None] = mapped_column(String(100))
    context: Mapped[str | None] = mapped_column(String(200))
    detail: Mapped[str] = mapped_column(Text)


class SnapshotRow(_Base):
    """One arm's posterior at one maintenance round."""

    __tablename__ = "bandit_snapshots"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100))
    taken_at: Mapped[str] = mapped_column(String(40))
    context: Mapped[str] = mapped_column(String(200))
    arm_id: Mapped[str] = mapped_column(String(100))
    pulls: Mapped[int] = mapped_column(Integer)
    rewarded: Mapped[int] = mapped_column(Integer)
    reward_sum: Mapped[float] = mapped_column(Float)
    alpha: Mapped[float] = mapped_column(Float)
    beta: Mapped[float] = mapped_column(Float)
    mean: Mapped[float] = mapped_column(Float)
    low: Mapped[float] = mapped_column(Float)
    high: Mapped[float] = mapped_column(Float)
    p_best: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_bandit_snapshots_name_at", "name", "taken_at"),)


def _v1_initial(conn: Connection) -> None:
    """Configs, arms, per-context stats, decisions, events, snapshots."""
    meta = MetaData()
    Table(
        "bandit_configs",
        meta,
        Column("name", String(100), primary_key=True),
        Column("config", Text, nullable=False),
        Column("fingerprint", String(64), nullable=False),
        Column("updated_at", String(40), nullable=False),
    )
    Table(
        "bandit_arms",
        meta,
        Column("name", String(100), nullable=False),
        Column("arm_id", String(100), nullable=False),
        Column("params", Text, nullable=False),
        Column("status", String(10), nullable=False),
        Column("origin", String(10), nullable=False),
        Column("parents", Text, nullable=False),
        Column("generation", Integer, nullable=False),
        Column("prior_alpha", Float, nullable=False),
        Column("prior_beta", Float, nullable=False),
        Column("low_rounds", Integer, nullable=False),
        Column("position", Integer, nullable=False),
        Column("created_at", String(40), nullable=False),
        Column("retired_at", String(40)),
        PrimaryKeyConstraint("name", "arm_id"),
    )
    Table(
        "bandit_stats",
        meta,
        Column("name", String(100), nullable=False),
        Column("context", String(200), nullable=False),
        Column("arm_id", String(100), nullable=False),
        *(Column(c, Float, nullable=False) for c in ("s", "f", "up", "down")),
        Column("n", Integer, nullable=False),
        Column("rewarded", Integer, nullable=False),
        Column("reward_sum", Float, nullable=False),
        Column("resets", Integer, nullable=False),
        PrimaryKeyConstraint("name", "context", "arm_id"),
    )
    Table(
        "bandit_decisions",
        meta,
        Column("name", String(100), nullable=False),
        Column("decision_id", String(200), nullable=False),
        Column("context", String(200), nullable=False),
        Column("arm_id", String(100), nullable=False),
        Column("user_id", String(200)),
        Column("a0", Float, nullable=False),
        Column("b0", Float, nullable=False),
        Column("created_at", String(40), nullable=False),
        Column("reward", Float),
        Column("rewarded_at", String(40)),
        PrimaryKeyConstraint("name", "decision_id"),
        Index("ix_bandit_decisions_arm", "name", "context", "arm_id"),
    )
    Table(
        "bandit_events",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("name", String(100), nullable=False, index=True),
        Column("at", String(40), nullable=False),
        Column("kind", String(30), nullable=False),
        Column("arm_id", String(100)),
        Column("context", String(200)),
        Column("detail", Text, nullable=False),
    )
    Table(
        "bandit_snapshots",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("name", String(100), nullable=False),
        Column("taken_at", String(40), nullable=False),
        Column("context", String(200), nullable=False),
        Column("arm_id", String(100), nullable=False),
        Column("pulls", Integer, nullable=False),
        Column("rewarded", Integer, nullable=False),
        *(
            Column(c, Float, nullable=False)
            for c in ("reward_sum", "alpha", "beta", "mean", "low", "high", "p_best")
        ),
        Index("ix_bandit_snapshots_name_at", "name", "taken_at"),
    )
    meta.create_all(conn)


#: (version, name, function), in order.
BANDIT_MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial", _v1_initial),
]
_LOCK_KEY = 8127002  # PostgreSQL advisory lock for bandit migrations


def migrate_bandit_tables(engine: Engine) -> list[int]:
    """Apply every pending bandit migration; returns the versions applied."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS bandit_schema_migrations ("
                "version INTEGER PRIMARY KEY, name VARCHAR(100) NOT NULL, "
                "applied_at VARCHAR(40) NOT NULL)"
            )
        )
    done: list[int] = []
    for version, name, apply in BANDIT_MIGRATIONS:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})"))
            applied = (
                {
                    int(r[0])
                    for r in conn.execute(text("SELECT version FROM bandit_schema_migrations"))
                }
                if inspect(conn).has_table("bandit_schema_migrations")
                else set()
            )
            if version in applied:
                continue
            apply(conn)
            conn.execute(
                text(
                    "INSERT INTO bandit_schema_migrations (version, name, applied_at) "
                    "VALUES (:v, :n, :t)"
                ),
                {"v": version, "n": name, "t": datetime.now(UTC).isoformat()},
            )
            done.append(version)
    return done
