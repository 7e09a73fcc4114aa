"""Opening the trace database: SQLite under ARMATURE_HOME by default, PostgreSQL by URL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from armature_temporal.errors import ArmatureError
from armature_temporal.runtime.private import FILE_MODE, private_dir
from armature_temporal.settings import armature_home

__all__ = ["StoreError", "database_url", "make_engine"]


class StoreError(ArmatureError):
    """The trace store cannot be opened, or its contents are not what Armature wrote."""


def database_url(url: str | None = None) -> str:
    """``url``, else ``$ARMATURE_DB_URL``, else SQLite at ``$ARMATURE_HOME/armature.db``."""
    chosen = url or os.environ.get("ARMATURE_DB_URL")
    if chosen:
        return chosen
    home = private_dir(armature_home())
    return f"sqlite:///{home / 'armature.db'}"


def make_engine(url: str) -> Engine:
    """An engine tuned for many concurrent writers.

    SQLite: WAL journal, a 30 s busy timeout and ``BEGIN IMMEDIATE`` transactions, so
    concurrent writers queue instead of failing. PostgreSQL: pre-ping pooled connections, and
    a 10 s connect timeout unless the URL sets ``connect_timeout``.
    """
    try:
        if url.startswith("sqlite"):
            path = url.split("///", 1)[-1]
            if path and path != ":memory:" and not path.startswith("file:"):
                _create_private(Path(path))
            engine = create_engine(url, connect_args={"timeout": 30})
            _sqlite_tuning(engine)
            return engine
        # A server that accepts and then never answers (hung, or behind a dropped link) must
        # not hold a worker's thread for ever: connecting gives up after 10 s, and is retried.
        timeout = {} if "connect_timeout" in url else {"connect_timeout": 10}
        return create_engine(
            url, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args=timeout
        )
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StoreError(
            f"ARMATURE_DB_URL {url!r} is not a database URL Armature can use ({exc}); use "
            "sqlite:///path/armature.db or postgresql+psycopg://user:password@host:5432/db"
        ) from None


def _create_private(path: Path) -> None:
    """Create the SQLite file ``0600`` (in a ``0700`` directory when that is new) before
    SQLite opens it: SQLite gives its ``-wal`` and ``-shm`` files the database file's mode."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    os.close(fd)


def _sqlite_tuning(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy issues BEGIN itself (below)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
