"""The store-wide ledger: every run's start and end, append-only, hash-chained and MAC'd.

A run's own chain cannot show that the run was deleted whole; the ledger can. Entry ``n``
stores ``hash_n = sha256(hash_{n-1} || canonical JSON of entry n)`` from a fixed genesis, and
``mac_n = HMAC(trace key, hash_n)``. Entry 0 (``genesis``) is written when the first keyed run
starts: it names the store (``store_id``, which each run's Temporal memo repeats) and lists the
runs already in the store, recorded before keying (legacy: no MACs to check).

Appends are serialised (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped
advisory lock), so two writers never take the same ``seq``. Each append returns the ledger's new
head, which the workers send to the ledger's anchor in Temporal
(:mod:`~armature_temporal.runtime.ledger_anchor`), keyed by :func:`database_identity`.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, func, insert, select, text
from sqlalchemy.engine import make_url

from armature_temporal.runtime.ledger_anchor import LedgerHead
from armature_temporal.store._base import table_of
from armature_temporal.store.keys import TraceKey, canonical
from armature_temporal.store.schema import LedgerRow, RunRow, TraceRow

__all__ = [
    "LEDGER_GENESIS",
    "LedgerEntry",
    "LedgerEvent",
    "LedgerState",
    "append",
    "database_identity",
    "legacy_digest",
    "read_ledger",
    "runs_started",
    "store_id_of",
]

LEDGER_GENESIS = hashlib.sha256(b"armature-ledger").hexdigest()
#: Legacy run ids listed by name in the genesis entry (beyond this, only their digest).
_LEGACY_LISTED = 10_000


class LedgerEvent(BaseModel):
    """What a write adds: a run started, or ended with this summary."""

    event: str
    run_id: str
    data: dict[str, Any] = Field(default_factory=dict)


class LedgerEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    seq: int
    event: str
    run_id: str | None
    recorded_at: str
    data: dict[str, Any]
    key_id: str
    prev_hash: str
    hash: str
    mac: str

    def content(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"hash", "mac"})


def entry_hash(prev_hash: str, content: dict[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical(content)).encode("utf-8")).hexdigest()


def legacy_digest(run_ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(run_ids)).encode("utf-8")).hexdigest()


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(8127002)"))


def _last(conn: Connection) -> Any:
    table = table_of(LedgerRow)
    return conn.execute(select(table).order_by(table.c.seq.desc()).limit(1)).mappings().first()


def _all_run_ids(conn: Connection) -> set[str]:
    runs, traces = table_of(RunRow), table_of(TraceRow)
    ids = set(conn.execute(select(runs.c.run_id)).scalars())
    ids.update(conn.execute(select(traces.c.run_id).distinct()).scalars())
    return ids


def append(
    conn: Connection, key: TraceKey, events: Sequence[LedgerEvent], *, new_runs: set[str]
) -> LedgerHead:
    """Append ``events`` in the caller's transaction, writing the genesis entry first when the
    ledger is empty (``new_runs``: runs this transaction starts, which are not legacy).
    Returns the ledger's new head (its store id and genesis read back from entry 0)."""
    _lock(conn)
    last = _last(conn)
    now = datetime.now(UTC).isoformat()
    rows: list[dict[str, Any]] = []
    prev, seq = (LEDGER_GENESIS, 0) if last is None else (str(last["hash"]), int(last["seq"]) + 1)

    def add(event: str, run_id: str | None, data: dict[str, Any]) -> None:
        nonlocal prev, seq
        content = {
            "seq": seq,
            "event": event,
            "run_id": run_id,
            "recorded_at": now,
            "data": data,
            "key_id": key.key_id,
            "prev_hash": prev,
        }
        digest = entry_hash(prev, content)
        rows.append({**content, "hash": digest, "mac": key.ledger_mac(digest)})
        prev, seq = digest, seq + 1

    if last is None:
        legacy = sorted(_all_run_ids(conn) - new_runs)
        store_id = uuid.uuid4().hex
        add(
            "genesis",
            None,
            {
                "store_id": store_id,
                "legacy_runs": len(legacy),
                "legacy_digest": legacy_digest(legacy),
                **({"legacy_run_ids": legacy} if len(legacy) <= _LEGACY_LISTED else {}),
            },
        )
    for item in events:
        add(item.event, item.run_id, item.data)
    conn.execute(insert(table_of(LedgerRow)), rows)
    store_id, genesis = (
        (str(rows[0]["data"]["store_id"]), str(rows[0]["hash"])) if last is None else _genesis(conn)
    )
    return LedgerHead(store_id=store_id, genesis=genesis, seq=seq - 1, hash=prev, recorded_at=now)


def _genesis(conn: Connection) -> tuple[str, str]:
    """The store id entry 0 names and its hash (both "" when the ledger has not begun)."""
    table = table_of(LedgerRow)
    row = conn.execute(select(table.c.data, table.c.hash).where(table.c.seq == 0)).first()
    if row is None:
        return "", ""
    data = row[0]
    return (str(data.get("store_id", "")) if isinstance(data, dict) else ""), str(row[1])


def store_id_of(conn: Connection) -> str:
    """The store id in the genesis entry ("" when the ledger has not begun)."""
    return _genesis(conn)[0]


def runs_started(conn: Connection, upto: int) -> int:
    """How many runs the ledger records starting, up to entry ``upto``."""
    table = table_of(LedgerRow)
    query = select(func.count()).where(table.c.event == "run_start", table.c.seq <= upto)
    return int(conn.execute(query).scalar_one())


def database_identity(url: str) -> str:
    """Where the database at ``url`` is, without credentials or connection options: the key
    of its ledger's anchor in Temporal, so every worker and every verifier of one database
    must name the same one.

    SQLite: the file's resolved path. PostgreSQL: host, port and database, and the
    ``options`` query parameter (a ``search_path`` picks the schema that holds the store).
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = parsed.database or ""
        if path and path != ":memory:" and not path.startswith("file:"):
            path = os.path.realpath(path)
        return f"sqlite:///{path}"
    options = parsed.query.get("options")
    if isinstance(options, tuple):
        options = "&".join(options)
    port: int | str = parsed.port or {"postgresql": 5432}.get(backend) or ""
    where = f"{backend}://{(parsed.host or 'localhost').lower()}:{port}/{parsed.database or ''}"
    return where + (f"?options={options}" if options else "")


class LedgerState(BaseModel):
    """The ledger as read back: its entries, and the first place it does not hold."""

    entries: list[LedgerEntry] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    store_id: str = ""
    legacy_run_ids: list[str] | None = None
    legacy_digest: str | None = None
    legacy_runs: int = 0

    @property
    def started(self) -> dict[str, LedgerEntry]:
        return {e.run_id: e for e in self.entries if e.event == "run_start" and e.run_id}

    @property
    def ended(self) -> dict[str, LedgerEntry]:
        return {e.run_id: e for e in self.entries if e.event == "run_end" and e.run_id}


def read_ledger(conn: Connection, key: TraceKey | None) -> LedgerState:
    """Read and check the whole ledger: ``seq`` without gaps from the genesis entry, every
    hash, every link, and (with the key) every MAC."""
    table = table_of(LedgerRow)
    rows = conn.execute(select(table).order_by(table.c.seq)).mappings().all()
    state = LedgerState()
    prev = LEDGER_GENESIS
    for expected, row in enumerate(rows):
        entry = LedgerEntry.model_validate({**row, "data": row["data"] or {}})
        state.entries.append(entry)
        if state.problems:
            continue
        label = (
            f"ledger entry {entry.seq} ({entry.event}{' ' + entry.run_id if entry.run_id else ''})"
        )
        if entry.seq != expected:
            state.problems.append(
                f"ledger entry {expected} is missing: the ledger jumps from {expected - 1} to "
                f"{entry.seq} (entries were deleted)"
            )
        elif entry_hash(entry.prev_hash, entry.content()) != entry.hash:
            state.problems.append(f"{label} does not match its hash: it was edited")
        elif entry.prev_hash != prev:
            state.problems.append(
                f"{label} does not follow entry {expected - 1}: entries were removed or replaced"
            )
        elif key is not None and entry.key_id != key.key_id:
            state.problems.append(
                f"{label} was made with trace key {entry.key_id}, but {key.path} is key "
                f"{key.key_id}: restore the store's key to check its MACs"
            )
        elif key is not None and not key.checks(entry.mac, "ledger", entry.hash):
            state.problems.append(
                f"{label} has a MAC that does not check: it was rewritten without the key"
            )
        prev = entry.hash
    if state.entries:
        genesis = state.entries[0]
        if genesis.event != "genesis" and not state.problems:
            state.problems.append(
                "ledger entry 0 is not the genesis entry: the ledger was rewritten"
            )
        state.store_id = str(genesis.data.get("store_id", ""))
        listed = genesis.data.get("legacy_run_ids")
        state.legacy_run_ids = [str(r) for r in listed] if isinstance(listed, list) else None
        state.legacy_digest = genesis.data.get("legacy_digest")
        state.legacy_runs = int(genesis.data.get("legacy_runs", 0))
    return state
