"""Every store test runs on SQLite (a temporary file) and on PostgreSQL.

PostgreSQL: a fresh, uniquely named database is created for the session on the server at
``$ARMATURE_TEST_PG_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``)
and dropped at the end; each test gets its own schema in it (``search_path``), so every test
starts from an empty store. The PostgreSQL cases skip, saying why, when the server is
unreachable.

Redis (the bandit store's fourth backend): ``redis_prefix`` gives a test its own key prefix on
the server at ``$ARMATURE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) and deletes its
keys afterwards; it skips, saying why, when the server does not answer.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy.engine import URL, make_url

from armature_temporal.store import TraceStore

REDIS_URL = os.environ.get("ARMATURE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_ADMIN_URL = os.environ.get(
    "ARMATURE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _connect(url: URL) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        host=url.host,
        port=url.port or 5432,
        user=url.username,
        password=url.password,
        dbname=url.database,
        autocommit=True,
        connect_timeout=3,
    )


@pytest.fixture(scope="session")
def pg_database() -> Iterator[URL]:
    """A fresh database for this test session, dropped at its end."""
    with fresh_database() as url:
        yield url


@contextlib.contextmanager
def fresh_database(prefix: str = "armature_test") -> Iterator[URL]:
    """A new, uniquely named database, dropped on exit; skips the test when PostgreSQL is
    unreachable (tests/store_outage.py uses it too)."""
    admin_url = make_url(PG_ADMIN_URL)
    try:
        admin = _connect(admin_url)
    except psycopg.OperationalError as exc:
        pytest.skip(
            f"PostgreSQL at {admin_url.render_as_string(hide_password=True)} is unreachable "
            f"({str(exc).strip()}); start it or point ARMATURE_TEST_PG_URL at one"
        )
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.set(database=name)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix no other test uses on the Redis server at ``REDIS_URL``; its keys are
    deleted after the test. Skips the test when the server does not answer."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        client.close()
        pytest.skip(
            f"Redis at {REDIS_URL} is unreachable ({exc}); start redis-server or point "
            "ARMATURE_TEST_REDIS_URL at one"
        )
    prefix = f"armature:test:{uuid.uuid4().hex[:12]}:"
    try:
        yield prefix
    finally:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        client.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's URL: a SQLite file, or a new schema in the session's database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'traces.db'}"
    database: URL = request.getfixturevalue("pg_database")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with _connect(database) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return database.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False
    )


@pytest.fixture
def store(db_url: str) -> Iterator[TraceStore]:
    opened = TraceStore(db_url)
    yield opened
    opened.close()
