"""Opening the trace database: SQLite under ARMATURE_HOME by default, PostgreSQL by URL.

One engine per database per process (:func:`make_engine` shares it, :func:`release_engine`
gives it back), and nothing here opens a live database file outside SQLite: closing any
descriptor of a file drops every POSIX lock the process holds on it, SQLite's included, and
another process then took the database for unused, checkpointed it and deleted the ``-wal``
this process still wrote to — every later run went unrecorded. The registry is the one piece
of module state: it exists because SQLite's locks are per process.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from armature_temporal.errors import ArmatureError
from armature_temporal.runtime.private import FILE_MODE, private_dir, tighten
from armature_temporal.settings import armature_home

__all__ = ["StoreError", "database_url", "make_engine", "release_engine", "sqlite_path"]

#: The engines of this process by database, with how many holders each has.
_ENGINES: dict[str, tuple[Engine, int]] = {}
_ENGINES_LOCK = threading.Lock()


class StoreError(ArmatureError):
    """The trace store cannot be opened, or its contents are not what Armature wrote."""


def database_url(url: str | None = None) -> str:
    """``url``, else ``$ARMATURE_DB_URL``, else SQLite at ``$ARMATURE_HOME/armature.db``."""
    chosen = url or os.environ.get("ARMATURE_DB_URL")
    if chosen:
        return chosen
    home = private_dir(armature_home())
    return f"sqlite:///{home / 'armature.db'}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None: not SQLite, in memory, or a ``file:`` URI)."""
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[-1].split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return Path(path)


def make_engine(url: str) -> Engine:
    """This process's engine for ``url`` (made on first use, then shared; give it back with
    :func:`release_engine`), tuned for many concurrent writers.

    SQLite: WAL journal, a 30 s busy timeout and ``BEGIN IMMEDIATE`` transactions, so
    concurrent writers queue instead of failing. PostgreSQL: pre-ping pooled connections, and
    a 10 s connect timeout unless the URL sets ``connect_timeout``.
    """
    path = sqlite_path(url)
    key = f"sqlite:///{os.path.realpath(path)}" if path is not None else url
    with _ENGINES_LOCK:
        held = _ENGINES.get(key)
        if held is not None:
            _ENGINES[key] = (held[0], held[1] + 1)
            return held[0]
        engine = _new_engine(url, path)
        _ENGINES[key] = (engine, 1)
        return engine


def release_engine(engine: Engine) -> None:
    """Give back an engine :func:`make_engine` gave; the last holder's release closes it."""
    with _ENGINES_LOCK:
        key = next((k for k, (e, _) in _ENGINES.items() if e is engine), None)
        if key is not None:
            held, count = _ENGINES[key]
            if count > 1:
                _ENGINES[key] = (held, count - 1)
                return
            del _ENGINES[key]
    engine.dispose()


def _new_engine(url: str, path: Path | None) -> Engine:
    try:
        if url.startswith("sqlite"):
            if path is not None:
                _create_private(path)
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
    SQLite opens it — SQLite gives its ``-wal`` and ``-shm`` files the database file's mode —
    and tighten an existing one and its ``-wal``/``-shm`` by path (``chmod``): an existing
    database file is never opened here (see the module docstring)."""
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        pass  # another process's, perhaps open: left to SQLite
    else:
        os.close(fd)  # new: no connection of this process can have it open yet
    for suffix in ("", "-wal", "-shm"):
        tighten(Path(f"{path}{suffix}"))


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
