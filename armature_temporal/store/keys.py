"""The trace key: a secret under ARMATURE_HOME that MACs what the store keeps.

The hash chain shows that records changed, unless whoever changed them recomputed every later
hash. The key closes that gap: each record, each run's summary and each ledger entry carries an
HMAC-SHA256 keyed by ``$ARMATURE_HOME/trace.key``, which lives beside the database, never in it.
Someone who can write the database but not read the key cannot make a MAC that checks.

The key is 32 random bytes (written as 64 hex digits), created ``0600`` on first use by the
process that first writes a record. Every worker that writes traces, and every machine that
verifies them, needs the same file: copy it (it is a secret; keep it ``0600``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armature_temporal.runtime.private import FILE_MODE, private_dir
from armature_temporal.settings import armature_home
from armature_temporal.store.engine import StoreError

__all__ = ["KEY_FILE", "TraceKey", "canonical", "key_id_of", "key_path", "load_key"]

KEY_FILE = "trace.key"


def key_path() -> Path:
    """``$ARMATURE_HOME/trace.key``."""
    return armature_home() / KEY_FILE


def canonical(value: Any) -> str:
    """The JSON a MAC covers: sorted keys, no spaces, unicode kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


@dataclass(frozen=True)
class TraceKey:
    """An HMAC-SHA256 key and its public id (which key made a MAC, without revealing it)."""

    secret: bytes
    path: Path

    @property
    def key_id(self) -> str:
        return hashlib.sha256(b"armature-trace-key-id\0" + self.secret).hexdigest()[:16]

    def mac(self, kind: str, *parts: str) -> str:
        message = "\x1f".join((kind, *parts)).encode("utf-8")
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def tagged(self, kind: str, *parts: str) -> str:
        """``<key id>:<mac>``: what the store keeps, so verify can tell another key from a
        forgery."""
        return f"{self.key_id}:{self.mac(kind, *parts)}"

    def checks(self, mac: str | None, kind: str, *parts: str) -> bool:
        """Whether ``mac`` (plain, or tagged with this key's id) is the MAC of ``parts``."""
        if mac is None:
            return False
        expected = self.tagged(kind, *parts) if ":" in mac else self.mac(kind, *parts)
        return hmac.compare_digest(mac, expected)

    def record_mac(self, run_id: str, seq: int, record_hash: str) -> str:
        """A record's MAC: over its hash, which covers its content and its place in the chain."""
        return self.tagged("record", run_id, str(seq), record_hash)

    def summary_mac(self, summary: dict[str, Any]) -> str:
        return self.tagged("summary", canonical(summary))

    def ledger_mac(self, entry_hash: str) -> str:
        return self.mac("ledger", entry_hash)

    def derived(self, purpose: str) -> TraceKey:
        """A key for one purpose only (``gate-decision``, ``gate-row``, ``proposal-row``),
        derived from this one: a MAC made for one purpose never checks for another, and
        whoever holds a derived key cannot make record MACs with it."""
        secret = hmac.new(
            self.secret, b"armature-derived-key\0" + purpose.encode("utf-8"), hashlib.sha256
        ).digest()
        return TraceKey(secret, self.path)


def key_id_of(mac: str | None) -> str | None:
    """The key id a tagged MAC names (None: untagged or no MAC)."""
    if mac is None or ":" not in mac:
        return None
    return mac.split(":", 1)[0]


def load_key(path: Path | None = None, *, create: bool) -> TraceKey | None:
    """The key at ``path`` (default :func:`key_path`); created when missing if ``create``,
    else ``None`` when missing.

    Raises:
        StoreError: The file is not a key Armature wrote (names the file and what to do).
    """
    path = path or key_path()
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        if not create:
            return None
        return _create(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(
            f"cannot read the trace key {path}: {exc}; it must be a file of 64 hex digits, "
            "mode 0600, readable by the user the workers run as"
        ) from None
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != 32:
        raise StoreError(
            f"the trace key {path} is not 64 hex digits; restore it from where you keep a copy "
            "(a new key makes every MAC already in the store fail to check)"
        )
    if path.stat().st_mode & 0o077:
        try:
            os.chmod(path, FILE_MODE)  # a key others can read is no key: take their access away
        except PermissionError:
            raise StoreError(
                f"the trace key {path} is readable by other users; run `chmod 600 {path}`"
            ) from None
    return TraceKey(secret, path)


def _create(path: Path) -> TraceKey:
    """Write a new key; if another process wrote one first, that one is the key."""
    private_dir(path.parent)
    secret = secrets.token_bytes(32)
    tmp = path.with_name(f".{path.name}.new{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, (secret.hex() + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if the file appeared meanwhile: never replace a key
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    found = load_key(path, create=False)
    assert found is not None
    return found
