"""The run API's tokens in the store (``api_tokens``).

A token is ``arm_`` and 43 URL-safe characters: 256 random bits. Only its SHA-256 is stored —
for a secret that random a fast hash is the right one (nothing to guess, nothing to stretch) —
and a presented token is found by its hash and compared in constant time. The plain token is
returned once, by :meth:`TokenStore.create_token`, and can never be shown again.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from armature_temporal.errors import ArmatureError
from armature_temporal.service.api.principal import SCOPES, Principal
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import ApiTokenRow

__all__ = [
    "RESERVED_NAMES",
    "TOKEN_PREFIX",
    "ApiToken",
    "TokenError",
    "TokenStore",
    "reserved_name",
    "token_hash",
]

#: What every token starts with, so a leaked one is recognisable (and greppable).
TOKEN_PREFIX = "arm_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
#: Names other parts of Armature record as who decided or acted, so a token may not take them
#: (a gate decision records its token's name): ``loopback`` (the open server), ``signal`` (an
#: unauthenticated decision), ``timeout`` (a gate nobody decided in time), ``anonymous`` and
#: ``open`` (inbox sessions), ``system``, and the experience loop's deciders (``scan``,
#: ``utility``, ``distiller``, ``learn``). Any name starting with ``armature`` is reserved too
#: (``armature improve`` decides the gates of verification runs). Compared case-insensitively.
RESERVED_NAMES = frozenset(
    {
        "loopback",
        "signal",
        "timeout",
        "anonymous",
        "open",
        "system",
        "scan",
        "utility",
        "distiller",
        "learn",
    }
)
_TOKEN = re.compile(r"arm_[A-Za-z0-9_-]{43}")
#: A token's last use is written at most this often (seconds), so reads stay reads.
LAST_USED_EVERY_S = 60.0


class TokenError(ArmatureError):
    """A token could not be created or revoked (bad name or scope, name taken, unknown)."""


class ApiToken(BaseModel):
    """A stored token as ``armature tokens list`` shows it: everything but the secret."""

    model_config = ConfigDict(frozen=True)

    name: str
    scopes: list[str]
    created_at: str
    revoked_at: str | None = None
    last_used_at: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def token_hash(token: str) -> str:
    """The stored form of a token: the hex SHA-256 of its text."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def reserved_name(name: str) -> bool:
    """Whether ``name`` is one Armature records for its own deciders (:data:`RESERVED_NAMES`,
    or any name starting with ``armature``), case-insensitively."""
    folded = name.strip().casefold()
    return folded in RESERVED_NAMES or folded.startswith("armature")


def _checked_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise TokenError(
            f"token name {name!r} is not allowed: use 1-64 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit (e.g. ci-bot); decisions record it"
        )
    if reserved_name(name):
        raise TokenError(
            f"token name {name!r} is reserved: Armature records it (or names starting with "
            "'armature') for its own deciders — 'signal' for an unauthenticated decision, "
            "'timeout' for a gate nobody decided, 'loopback' for the open server — so a "
            "decision made with this token would read as one of those; name the token after "
            "who uses it (e.g. ci-bot, alice)"
        )
    return name


def _checked_scopes(scopes: list[str]) -> list[str]:
    if not scopes:
        raise TokenError(
            f"a token needs at least one scope; choose from {list(SCOPES)}, e.g. --scope read"
        )
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        from armature_temporal.errors import did_you_mean

        first = unknown[0]
        raise TokenError(
            f"unknown scope {first!r}{did_you_mean(first, list(SCOPES))}; scopes are "
            f"{list(SCOPES)} (admin holds all of them)"
        )
    return sorted(set(scopes), key=SCOPES.index)


class TokenStore(StoreBase):
    """The TraceStore's API tokens (``api_tokens``)."""

    def create_token(self, name: str, scopes: list[str]) -> str:
        """Store a new token called ``name`` with ``scopes``; returns the plain token, which
        is not stored and cannot be shown again.

        Raises:
            TokenError: the name is malformed, reserved (:func:`reserved_name`) or taken
                (revoked tokens keep their names, so that decisions recorded under a name stay
                unambiguous), or a scope is unknown.
        """
        _checked_name(name)
        held = _checked_scopes(scopes)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        table = table_of(ApiTokenRow)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    table.insert().values(
                        name=name, secret_hash=token_hash(token), scopes=held, created_at=_now()
                    )
                )
        except IntegrityError:
            raise TokenError(
                f"a token named {name!r} exists already (revoked tokens keep their names); "
                "choose another name, or see `armature tokens list`"
            ) from None
        return token

    def list_tokens(self) -> list[ApiToken]:
        """Every token, oldest first, revoked ones included; never the secrets."""
        table = table_of(ApiTokenRow)
        columns = [table.c[f] for f in ApiToken.model_fields]
        with self.engine.connect() as conn:
            rows = conn.execute(select(*columns).order_by(table.c.created_at, table.c.name))
            return [ApiToken.model_validate(dict(row)) for row in rows.mappings()]

    def revoke_token(self, name: str) -> ApiToken:
        """Revoke the token called ``name`` (from now on it is refused); returns it as it is
        now. Revoking a revoked token changes nothing.

        Raises:
            TokenError: there is no token called ``name``.
        """
        table = table_of(ApiTokenRow)
        with self.engine.begin() as conn:
            conn.execute(
                update(table)
                .where(table.c.name == name, table.c.revoked_at.is_(None))
                .values(revoked_at=_now())
            )
        for token in self.list_tokens():
            if token.name == name:
                return token
        from armature_temporal.errors import did_you_mean

        names = [t.name for t in self.list_tokens()]
        raise TokenError(
            f"no token named {name!r}{did_you_mean(name, names)}; see `armature tokens list`"
        )

    def principal_for(self, token: str) -> Principal | None:
        """The principal an active token stands for, or None (malformed, unknown, revoked,
        or named with a reserved name: one stored before names were reserved is unusable).

        The row is found by the token's hash and the hashes compared with
        :func:`hmac.compare_digest`, so neither the lookup's timing nor the comparison says
        how much of a guess was right.
        """
        if not _TOKEN.fullmatch(token):
            return None
        presented = token_hash(token)
        table = table_of(ApiTokenRow)
        with self.engine.connect() as conn:
            row: Any = (
                conn.execute(
                    select(
                        table.c.name, table.c.secret_hash, table.c.scopes, table.c.last_used_at
                    ).where(table.c.secret_hash == presented, table.c.revoked_at.is_(None))
                )
                .mappings()
                .first()
            )
        if row is None or not hmac.compare_digest(row["secret_hash"], presented):
            return None
        if reserved_name(row["name"]):
            return None
        self._touch(row["name"], row["last_used_at"])
        return Principal(row["name"], frozenset(row["scopes"]))

    def active_tokens(self, tokens: list[str]) -> list[str]:
        """Those of ``tokens`` that :meth:`principal_for` would accept now, in one query (the
        run API re-checks the tokens of its open event streams with it)."""
        by_hash = {token_hash(t): t for t in tokens if _TOKEN.fullmatch(t)}
        if not by_hash:
            return []
        table = table_of(ApiTokenRow)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.name, table.c.secret_hash).where(
                    table.c.secret_hash.in_(list(by_hash)), table.c.revoked_at.is_(None)
                )
            ).all()
        return [
            by_hash[row.secret_hash]
            for row in rows
            if row.secret_hash in by_hash and not reserved_name(row.name)
        ]

    def reserved_active(self) -> list[str]:
        """Names of active tokens stored with a name that is now reserved (unusable: see
        :func:`reserved_name`), for ``armature serve`` to warn about."""
        return [t.name for t in self.list_tokens() if t.active and reserved_name(t.name)]

    def _touch(self, name: str, last_used_at: str | None) -> None:
        """Record a use, at most every :data:`LAST_USED_EVERY_S` seconds per token."""
        now = datetime.now(UTC)
        if last_used_at is not None:
            elapsed = (now - datetime.fromisoformat(last_used_at)).total_seconds()
            if elapsed < LAST_USED_EVERY_S:
                return
        table = table_of(ApiTokenRow)
        with self.engine.begin() as conn:
            conn.execute(
                update(table).where(table.c.name == name).values(last_used_at=now.isoformat())
            )

    def active_token_count(self) -> int:
        """How many tokens are not revoked (0: a loopback server may run open)."""
        table = table_of(ApiTokenRow)
        with self.engine.connect() as conn:
            count = conn.execute(
                select(func.count()).select_from(table).where(table.c.revoked_at.is_(None))
            ).scalar_one()
        return int(count)
