"""The SQL bandit store: SQLite (WAL, one file, many processes) or PostgreSQL.

Rewards are applied in the database, never read-modify-written in Python: one transaction
claims the decision (``UPDATE ... SET reward = :r WHERE reward IS NULL``; a second reward finds
nothing to claim and is refused) and updates the arm's global and context rows with a single
``UPDATE`` whose right-hand sides are :func:`~._math.observe_one` written in SQL — evidence,
CUSUM statistics and the reset on a detected change. Concurrent rewards from any number of
processes therefore serialise only on the rows they touch and lose nothing. Selections read
the posteriors and insert the decision row; they hold no application lock (on SQLite the
insert takes the file's brief write lock, as every SQLite write does). Pulls are counted from
the decision rows, so no hot counter row exists.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

import numpy as np
from sqlalchemy import Connection, Engine, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Session

from armature_temporal.bandit._backend import duplicate_error, no_arms_error, unknown_error
from armature_temporal.bandit._errors import UnknownBanditError
from armature_temporal.bandit._math import Dynamics, SelectionRule, seeded_posterior, thompson
from armature_temporal.bandit._models import (
    ArmRecord,
    ArmStats,
    BanditEvent,
    RewardReceipt,
    Selection,
    Snapshot,
)
from armature_temporal.bandit._schema import (
    ArmRow,
    ConfigRow,
    EventRow,
    SnapshotRow,
    migrate_bandit_tables,
)
from armature_temporal.store.engine import StoreError, make_engine, release_engine

__all__ = ["SqlBackend"]

T = TypeVar("T")
_RETRYABLE_SQLSTATES = {"40P01", "40001"}  # deadlock detected, serialization failure
_NAMED = re.compile(r"(?<![:\w]):(\w+)")

_SELECT_ARMS = (
    "SELECT a.arm_id, a.params, a.prior_alpha, a.prior_beta, g.s, g.f, c.s, c.f "
    "FROM bandit_arms a "
    "LEFT JOIN bandit_stats g ON g.name = a.name AND g.arm_id = a.arm_id AND g.context = '' "
    "LEFT JOIN bandit_stats c ON c.name = a.name AND c.arm_id = a.arm_id AND c.context = :c "
    "WHERE a.name = :n AND a.status = 'active' ORDER BY a.position, a.arm_id"
)
_INSERT_DECISION = (
    "INSERT INTO bandit_decisions (name, decision_id, context, arm_id, user_id, a0, b0, "
    "created_at) VALUES (:n, :d, :c, :a, :u, :a0, :b0, :t)"
)
_INSERT_DECISION_IDEMPOTENT = _INSERT_DECISION + " ON CONFLICT (name, decision_id) DO NOTHING"
_EXISTING_DECISION = (
    "SELECT d.arm_id, d.context, d.user_id, a.params FROM bandit_decisions d "
    "JOIN bandit_arms a ON a.name = d.name AND a.arm_id = d.arm_id "
    "WHERE d.name = :n AND d.decision_id = :d"
)
_CLAIM = (
    "UPDATE bandit_decisions SET reward = :r, rewarded_at = :t "
    "WHERE name = :n AND decision_id = :d AND reward IS NULL "
    "RETURNING arm_id, context, a0, b0"
)
_CLAIMED = "SELECT reward, rewarded_at FROM bandit_decisions WHERE name = :n AND decision_id = :d"
_ENSURE_STATS = (
    "INSERT INTO bandit_stats (name, context, arm_id, s, f, up, down, n, rewarded, reward_sum, "
    "resets) VALUES (:n, :c, :a, 0.0, 0.0, 0.0, 0.0, 0, 0, 0.0, 0) "
    "ON CONFLICT (name, context, arm_id) DO NOTHING"
)
_RESET_CONTEXT = (
    "UPDATE bandit_stats SET s = 0.0, f = 0.0, up = 0.0, down = 0.0, n = 0 "
    "WHERE name = :n AND context = :c AND arm_id <> :a"
)
_INSERT_EVENT = (
    "INSERT INTO bandit_events (name, at, kind, arm_id, context, detail) "
    "VALUES (:n, :t, :k, :a, :c, :detail)"
)


def _observe_sql(dyn: Dynamics, greatest: str) -> str:
    """The SET clause of :func:`~._math.observe_one` (every right-hand side reads old values)."""
    mean = "((:a0 + s) / (:a0 + :b0 + s + f))"
    s_new, f_new = "(:g * s + :r)", "(:g * f + (1.0 - :r))"
    if dyn.window is not None:
        total = f"({s_new} + {f_new})"
        scale = f"(CASE WHEN {total} > :w THEN :w / {total} ELSE 1.0 END)"
        s_new, f_new = f"({s_new} * {scale})", f"({f_new} * {scale})"
    if dyn.detect:
        on = "(n >= :warm)"
        down_raw = f"(down + {mean} - :r - :drift)"
        up_raw = f"(up + :r - {mean} - :drift)"
        alarm = f"({on} AND ({down_raw} > :h OR {up_raw} > :h))"
        up = f"CASE WHEN {alarm} THEN 0.0 WHEN {on} THEN {greatest}(0.0, {up_raw}) ELSE up END"
        down = (
            f"CASE WHEN {alarm} THEN 0.0 WHEN {on} THEN {greatest}(0.0, {down_raw}) ELSE down END"
        )
    else:
        alarm, up, down = "(1 = 0)", "up", "down"
    return (
        f"s = CASE WHEN {alarm} THEN 0.0 ELSE {s_new} END, "
        f"f = CASE WHEN {alarm} THEN 0.0 ELSE {f_new} END, "
        f"up = {up}, down = {down}, "
        f"n = CASE WHEN {alarm} THEN 0 ELSE n + 1 END, "
        "rewarded = rewarded + 1, reward_sum = reward_sum + :r, "
        f"resets = resets + CASE WHEN {alarm} THEN 1 ELSE 0 END"
    )


class SqlBackend:
    """Bandits in a SQL database shared by every process that opens the same URL."""

    kind: Literal["sqlite", "postgres"]

    def __init__(self, url: str) -> None:
        self.engine: Engine = make_engine(url)
        self.kind = "postgres" if self.engine.dialect.name == "postgresql" else "sqlite"
        try:
            migrate_bandit_tables(self.engine)
        except (DatabaseError, OperationalError) as exc:
            where = self.engine.url.render_as_string(hide_password=True)
            release_engine(self.engine)
            raise StoreError(
                f"cannot open the bandit store at {where}: {exc.orig or exc}. For PostgreSQL "
                "check that the server runs and the URL is right; for SQLite that the file is "
                "writable (a corrupt file can be moved aside)"
            ) from None
        self._greatest = "GREATEST" if self.kind == "postgres" else "MAX"
        self._update_sql: dict[Dynamics, tuple[str, str]] = {}
        self._dbapi_sql: dict[str, str] = {}
        self._dbapi_error: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        self._params: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        release_engine(self.engine)

    def _parse(self, raw: str) -> dict[str, Any]:
        parsed = self._params.get(raw)
        if parsed is None:
            parsed = self._params[raw] = json.loads(raw)
        return parsed

    # --- configuration -----------------------------------------------------------------

    def load_config(self, name: str) -> dict[str, Any] | None:
        with Session(self.engine) as session:
            row = session.get(ConfigRow, name)
            return None if row is None else dict(json.loads(row.config))

    def save_config(self, name: str, config: dict[str, Any], fingerprint: str, at: str) -> bool:
        insert = postgresql.insert if self.kind == "postgres" else sqlite.insert
        with self.engine.begin() as conn:
            old = conn.execute(
                select(ConfigRow.fingerprint).where(ConfigRow.name == name)
            ).scalar_one_or_none()
            values = {
                "name": name,
                "config": json.dumps(config, sort_keys=True),
                "fingerprint": fingerprint,
                "updated_at": at,
            }
            stmt = insert(ConfigRow).values(**values)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["name"], set_={k: v for k, v in values.items() if k != "name"}
                )
            )
        return old != fingerprint

    def arm_records(self, name: str) -> list[ArmRecord]:
        with Session(self.engine) as session:
            rows = session.scalars(
                select(ArmRow).where(ArmRow.name == name).order_by(ArmRow.position, ArmRow.arm_id)
            ).all()
            return [
                ArmRecord.model_validate(
                    {
                        field: getattr(r, field)
                        for field in ArmRecord.model_fields
                        if field not in ("params", "parents")
                    }
                    | {"params": json.loads(r.params), "parents": json.loads(r.parents)}
                )
                for r in rows
            ]

    def add_arm(self, name: str, record: ArmRecord) -> bool:
        insert = postgresql.insert if self.kind == "postgres" else sqlite.insert
        with self.engine.begin() as conn:
            top = conn.execute(
                text("SELECT COALESCE(MAX(position), -1) FROM bandit_arms WHERE name = :n"),
                {"n": name},
            ).scalar_one()
            values = record.model_dump()
            values.update(
                name=name,
                params=json.dumps(record.params, sort_keys=True),
                parents=json.dumps(record.parents),
                position=max(record.position, int(top) + 1),
            )
            result = conn.execute(
                insert(ArmRow)
                .values(**values)
                .on_conflict_do_nothing(index_elements=["name", "arm_id"])
            )
            return bool(result.rowcount)

    def set_arm(self, name: str, arm_id: str, **fields: Any) -> None:
        if "params" in fields:
            fields["params"] = json.dumps(fields["params"], sort_keys=True)
        with self.engine.begin() as conn:
            conn.execute(
                update(ArmRow).where(ArmRow.name == name, ArmRow.arm_id == arm_id).values(**fields)
            )

    # --- the hot path ------------------------------------------------------------------
    # Selections and rewards use the pooled DBAPI connection of the same engine directly:
    # SQLAlchemy's per-statement overhead was two thirds of a select+update pair on SQLite.

    def _sql(self, statement: str) -> str:
        """``statement`` in the driver's paramstyle (sqlite3: ``:name``; psycopg: ``%(name)s``)."""
        cached = self._dbapi_sql.get(statement)
        if cached is None:
            cached = statement if self.kind == "sqlite" else _NAMED.sub(r"%(\1)s", statement)
            self._dbapi_sql[statement] = cached
        return cached

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A DBAPI cursor in one transaction (``BEGIN IMMEDIATE`` on SQLite, as the engine's
        own transactions), committed on success, rolled back on any exception."""
        conn = self.engine.raw_connection()
        try:
            cursor = conn.cursor()
            if self.kind == "sqlite":
                cursor.execute("BEGIN IMMEDIATE")
            try:
                yield cursor
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        finally:
            conn.close()

    def _retrying(self, work: Callable[[], T]) -> T:
        """Run ``work`` (one transaction); again when PostgreSQL breaks a deadlock. Other
        database errors become :class:`StoreError`."""
        for attempt in range(5):
            try:
                return work()
            except self._dbapi_error as exc:
                code = getattr(exc, "sqlstate", None)
                if code in _RETRYABLE_SQLSTATES and attempt < 4:
                    continue
                where = self.engine.url.render_as_string(hide_password=True)
                raise StoreError(f"bandit store {where}: {exc}") from exc
        raise AssertionError("unreachable")

    def select(
        self,
        name: str,
        context: str,
        user_id: str | None,
        decision_id: str | None,
        rng: np.random.Generator,
        rule: SelectionRule,
        now: Callable[[], str],
    ) -> Selection:
        def work() -> Selection:
            with self._transaction() as cur:
                cur.execute(self._sql(_SELECT_ARMS), {"n": name, "c": context})
                rows = cur.fetchall()
                if not rows:
                    raise no_arms_error(name)
                i = 0
                if len(rows) > 1:
                    table = np.array([r[2:] for r in rows], dtype=float)  # NULL -> nan
                    a0, b0, gs, gf, cs, cf = np.nan_to_num(table, nan=0.0).T
                    if context == "":
                        alpha, beta = a0 + gs, b0 + gf
                    else:
                        alpha, beta = seeded_posterior(a0, b0, gs, gf, cs, cf, rule.seed_strength)
                    i = int(thompson(alpha, beta, rng, rule.optimistic))
                arm_id, raw_params, a0_i, b0_i = rows[i][:4]
                values = {
                    "n": name,
                    "c": context,
                    "a": arm_id,
                    "u": user_id,
                    "a0": a0_i,
                    "b0": b0_i,
                    "t": now(),
                }
                chosen_id, chosen_ctx, chosen_user = decision_id, context, user_id
                if chosen_id is None:
                    chosen_id = uuid.uuid4().hex
                    cur.execute(self._sql(_INSERT_DECISION), values | {"d": chosen_id})
                else:
                    cur.execute(self._sql(_INSERT_DECISION_IDEMPOTENT), values | {"d": chosen_id})
                    if not cur.rowcount:  # a retried selection: the first answer, no new pull
                        cur.execute(self._sql(_EXISTING_DECISION), {"n": name, "d": chosen_id})
                        arm_id, chosen_ctx, chosen_user, raw_params = cur.fetchone()
            return Selection.model_construct(
                name=name,
                decision_id=chosen_id,
                arm_id=arm_id,
                params=dict(self._parse(raw_params)),
                context=chosen_ctx,
                user_id=chosen_user,
            )

        return self._retrying(work)

    def _statements(self, dyn: Dynamics) -> tuple[str, str]:
        cached = self._update_sql.get(dyn)
        if cached is None:
            body = _observe_sql(dyn, self._greatest)
            head = f"UPDATE bandit_stats SET {body} WHERE name = :n AND arm_id = :a AND "
            cached = (
                self._sql(head + "context IN ('', :c) RETURNING context, n"),
                self._sql(head + "context = :c RETURNING context, n"),
            )
            self._update_sql[dyn] = cached
        return cached

    def reward(
        self, name: str, decision_id: str, reward: float, at: str, dyn: Dynamics
    ) -> RewardReceipt:
        both, one = self._statements(dyn)
        params: dict[str, Any] = {"r": reward, "n": name, "g": dyn.discount}
        if dyn.window is not None:
            params["w"] = dyn.window
        if dyn.detect:
            params |= {"warm": dyn.warmup, "drift": dyn.drift, "h": dyn.threshold}

        def work() -> tuple[str, str, list[str]]:
            with self._transaction() as cur:
                cur.execute(self._sql(_CLAIM), {"r": reward, "t": at, "n": name, "d": decision_id})
                claimed = cur.fetchone()
                if claimed is None:
                    cur.execute(self._sql(_CLAIMED), {"n": name, "d": decision_id})
                    prior = cur.fetchone()
                    if prior is None:
                        raise unknown_error(name, decision_id)
                    raise duplicate_error(name, decision_id, prior[0], prior[1])
                arm_id, context, a0, b0 = claimed
                values = params | {"a": arm_id, "c": context, "a0": a0, "b0": b0}
                cur.execute(both, values)
                done = {r[0]: r[1] for r in cur.fetchall()}
                for missing in {"", context} - done.keys():  # first reward of arm in context
                    cur.execute(self._sql(_ENSURE_STATS), {"n": name, "c": missing, "a": arm_id})
                    cur.execute(one, values | {"c": missing})
                    done.update({r[0]: r[1] for r in cur.fetchall()})
                alarms = sorted(c for c, n in done.items() if n == 0)
                for ctx in alarms:
                    cur.execute(
                        self._sql(_INSERT_EVENT),
                        {
                            "n": name,
                            "t": at,
                            "k": "change_detected",
                            "a": arm_id,
                            "c": ctx,
                            "detail": json.dumps({"decision_id": decision_id, "reward": reward}),
                        },
                    )
                return arm_id, context, alarms

        arm_id, context, alarms = self._retrying(work)
        if alarms and dyn.reset == "context":
            # Separate transaction: it locks other arms' rows, so it must hold no row itself.
            def reset() -> None:
                with self._transaction() as cur:
                    for ctx in alarms:
                        cur.execute(self._sql(_RESET_CONTEXT), {"n": name, "c": ctx, "a": arm_id})

            self._retrying(reset)
        return RewardReceipt(
            name=name,
            decision_id=decision_id,
            arm_id=arm_id,
            context=context,
            reward=reward,
            change_detected=bool(alarms),
        )

    # --- reading and logging -------------------------------------------------------------

    def contexts(self, name: str) -> list[str]:
        """The context keys this bandit has decided in ('' left out), sorted."""
        with self.engine.begin() as conn:
            rows = conn.execute(
                text(
                    "SELECT DISTINCT context FROM bandit_decisions WHERE name = :n "
                    "AND context <> '' ORDER BY context"
                ),
                {"n": name},
            )
            return [r[0] for r in rows]

    def stats(self, name: str, context: str) -> dict[str, ArmStats]:
        with self.engine.begin() as conn:
            arms = [
                r[0]
                for r in conn.execute(
                    text("SELECT arm_id FROM bandit_arms WHERE name = :n"), {"n": name}
                )
            ]
            if (
                not arms
                and not conn.execute(
                    text("SELECT 1 FROM bandit_configs WHERE name = :n"), {"n": name}
                ).first()
            ):
                raise UnknownBanditError(f"bandit {name!r} is not configured in this store")
            where = "name = :n" + ("" if context == "" else " AND context = :c")
            pulls: dict[str, int] = dict(
                conn.execute(
                    text(
                        f"SELECT arm_id, COUNT(*) FROM bandit_decisions WHERE {where} "
                        "GROUP BY arm_id"
                    ),
                    {"n": name, "c": context},
                ).all()
            )
            rows = {
                r[0]: r
                for r in conn.execute(
                    text(
                        "SELECT arm_id, s, f, rewarded, reward_sum, resets FROM bandit_stats "
                        "WHERE name = :n AND context = :c"
                    ),
                    {"n": name, "c": context},
                )
            }
        out: dict[str, ArmStats] = {}
        for arm_id in arms:
            row = rows.get(arm_id)
            count = int(pulls.get(arm_id, 0))
            out[arm_id] = (
                ArmStats(arm_id=arm_id, pulls=count)
                if row is None
                else ArmStats(
                    arm_id=arm_id,
                    s=row[1],
                    f=row[2],
                    pulls=count,
                    rewarded=row[3],
                    reward_sum=row[4],
                    resets=row[5],
                )
            )
        return out

    def log(self, name: str, events: Sequence[BanditEvent]) -> None:
        if not events:
            return
        with self.engine.begin() as conn:
            self._log(conn, name, events)

    def _log(self, conn: Connection, name: str, events: Sequence[BanditEvent]) -> None:
        conn.execute(
            text(_INSERT_EVENT),
            [
                {
                    "n": name,
                    "t": e.at,
                    "k": e.kind,
                    "a": e.arm_id,
                    "c": e.context,
                    "detail": json.dumps(e.detail, sort_keys=True),
                }
                for e in events
            ],
        )

    def events(self, name: str) -> list[BanditEvent]:
        with Session(self.engine) as session:
            rows = session.scalars(
                select(EventRow).where(EventRow.name == name).order_by(EventRow.id)
            ).all()
            return [
                BanditEvent.model_validate(
                    {
                        "at": r.at,
                        "kind": r.kind,
                        "arm_id": r.arm_id,
                        "context": r.context,
                        "detail": json.loads(r.detail),
                    }
                )
                for r in rows
            ]

    def add_snapshots(self, name: str, rows: Sequence[Snapshot]) -> None:
        if not rows:
            return
        with Session(self.engine) as session, session.begin():
            session.add_all(SnapshotRow(name=name, **r.model_dump()) for r in rows)

    def snapshots(self, name: str) -> list[Snapshot]:
        with Session(self.engine) as session:
            rows = session.scalars(
                select(SnapshotRow).where(SnapshotRow.name == name).order_by(SnapshotRow.id)
            ).all()
            fields = list(Snapshot.model_fields)
            return [Snapshot(**{f: getattr(r, f) for f in fields}) for r in rows]
