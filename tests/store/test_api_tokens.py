"""The run API's tokens in the store, on SQLite and PostgreSQL: only a hash is kept, revoked
tokens are refused, scopes are checked, names are unique, migration 16 adds the table."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import text

from armature_temporal.service.api.principal import Principal
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store.engine import make_engine, release_engine
from armature_temporal.store.tokens import TokenError


def stored_rows(store: TraceStore) -> list[tuple[object, ...]]:
    with store.engine.connect() as conn:
        return [
            tuple(row)
            for row in conn.execute(text("SELECT name, secret_hash, scopes FROM api_tokens"))
        ]


def test_create_token_stores_its_sha256_and_never_the_secret(store: TraceStore) -> None:
    token = store.create_token("ci-bot", ["run", "read"])
    assert token.startswith("arm_") and len(token) == 47
    [(name, secret_hash, _)] = stored_rows(store)
    assert name == "ci-bot"
    assert secret_hash == hashlib.sha256(token.encode()).hexdigest()
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT * FROM api_tokens")).all()
    dump = " ".join(str(value) for row in rows for value in row)
    assert token not in dump and token[4:] not in dump
    assert store.principal_for(token) == Principal("ci-bot", frozenset({"read", "run"}))
    listed = store.list_tokens()
    assert [(t.name, t.scopes, t.active) for t in listed] == [("ci-bot", ["read", "run"], True)]
    assert "secret" not in listed[0].model_dump() and token not in listed[0].model_dump_json()


def test_revoked_unknown_and_malformed_tokens_stand_for_nobody(store: TraceStore) -> None:
    token = store.create_token("alice", ["approve"])
    other = store.create_token("bob", ["read"])
    assert store.active_token_count() == 2
    revoked = store.revoke_token("alice")
    assert revoked.revoked_at is not None and not revoked.active
    assert store.principal_for(token) is None
    assert store.principal_for(other) == Principal("bob", frozenset({"read"}))
    assert store.active_token_count() == 1
    assert store.revoke_token("alice").revoked_at == revoked.revoked_at  # idempotent
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    for guess in (flipped, "arm_short", "", token + "x", other.upper()):
        assert store.principal_for(guess) is None, guess
    with pytest.raises(TokenError, match="no token named 'carol'"):
        store.revoke_token("carol")


def test_token_names_are_unique_even_after_revocation(store: TraceStore) -> None:
    store.create_token("alice", ["read"])
    store.revoke_token("alice")
    with pytest.raises(TokenError, match="a token named 'alice' exists already"):
        store.create_token("alice", ["read"])
    assert [t.name for t in store.list_tokens()] == ["alice"]


@pytest.mark.parametrize(
    ("name", "scopes", "words"),
    [
        ("ok", ["aprove"], "unknown scope 'aprove' (did you mean 'approve'?)"),
        ("ok", [], "at least one scope"),
        ("has space", ["read"], "token name 'has space' is not allowed"),
        ("", ["read"], "token name '' is not allowed"),
        ("Loopback", ["read"], "token name 'Loopback' is reserved"),
        ("armature_bot", ["read"], "names starting with 'armature'"),
    ],
)
def test_create_token_refuses_bad_names_and_scopes(
    store: TraceStore, name: str, scopes: list[str], words: str
) -> None:
    with pytest.raises(TokenError) as caught:
        store.create_token(name, scopes)
    assert words in str(caught.value)
    assert stored_rows(store) == []


def test_a_use_is_recorded_as_last_used(store: TraceStore) -> None:
    token = store.create_token("ci", ["read"])
    assert store.list_tokens()[0].last_used_at is None
    store.principal_for(token)
    assert store.list_tokens()[0].last_used_at is not None


def test_migration_16_adds_api_tokens_to_a_store_at_15(db_url: str) -> None:
    engine = make_engine(db_url)
    assert migrate(engine, upto=15)[-1] == 15
    assert migrate(engine, upto=16) == [16]
    release_engine(engine)
    store = TraceStore(db_url)
    try:
        token = store.create_token("ci", ["admin"])
        assert store.principal_for(token) == Principal("ci", frozenset({"admin"}))
    finally:
        store.close()
