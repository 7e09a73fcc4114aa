"""The Redis bandit store: one Redis server shared by every process that opens the same URL.

Keys, all under ``<prefix>{<name>}:`` (the braces are a Redis Cluster hash tag, so every key
of one bandit lives in one slot and one script may touch them all):

- ``config`` — hash: the stored configuration, its fingerprint, when it was saved;
- ``arms`` — hash: arm id → the :class:`~._models.ArmRecord` as JSON;
- ``c:<context>`` — hash per context (``c:`` is the global one): ``<arm>:<field>`` for the
  evidence and CUSUM state (``s f up down n``), the lifetime counters (``rewarded reward_sum
  resets``) and the selections (``pulls``);
- ``d:<decision id>`` — hash per decision: arm, context, user, the arm's prior when chosen,
  and the reward once it is given;
- ``events`` and ``snapshots`` — lists of JSON, oldest first.

The two hot operations run as Lua scripts, which Redis executes atomically (no other command
runs between a script's first and last line), so no process ever read-modify-writes in Python:

- ``select`` reads the arms and their global and context evidence with the read-only *view*
  script (one consistent view, one round trip), samples in Python with the runtime's
  generator, then the *record* script stores the decision and counts the pull — unless the
  decision id exists already, in which case it returns the first answer and counts nothing (a
  retried selection). Like the SQL stores, a selection holds no lock between the two.
- ``reward`` is one script: it refuses an unknown or already rewarded decision, marks the
  decision rewarded, and applies :func:`~._math.observe_one` — evidence, CUSUM statistics,
  the reset on a detected change (of the arm, or of every arm of the context) — to the global
  and the context hash, logging a ``change_detected`` event per alarm. The arithmetic is the
  same IEEE double arithmetic, in the same order, as the SQL ``UPDATE`` and the pure function;
  numbers are stored as ``%.17g`` text, which reads back exactly. (The script finds the context
  hash from the decision; it is under the same hash tag, so this holds on a cluster too.)

Durability is the server's: see the README (``appendonly yes`` with ``appendfsync everysec``
loses at most about a second of rewards on a crash of the machine; ``always`` loses none that
were acknowledged; RDB snapshots alone lose everything since the last snapshot).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import redis
from redis.client import Pipeline

from armature_temporal.bandit._backend import duplicate_error, no_arms_error, unknown_error
from armature_temporal.bandit._errors import BanditError, UnknownBanditError
from armature_temporal.bandit._math import Dynamics, SelectionRule, seeded_posterior, thompson
from armature_temporal.bandit._models import (
    ArmRecord,
    ArmStats,
    BanditEvent,
    RewardReceipt,
    Selection,
    Snapshot,
)

__all__ = ["RedisBackend", "safe_url"]

# KEYS: decision, context hash, global hash, arms.  ARGV: arm, context, a0, b0, at, has_user,
# user.  Returns nil when recorded; else the first answer (arm, context, user, arm JSON).
_RECORD = """
local old = redis.call('HMGET', KEYS[1], 'arm', 'ctx', 'user')
if old[1] then
  return {old[1], old[2], old[3], redis.call('HGET', KEYS[4], old[1])}
end
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'arm', ARGV[1], 'ctx', ARGV[2], 'a0', ARGV[3], 'b0', ARGV[4],
             'at', ARGV[5], 'user', ARGV[7])
else
  redis.call('HSET', KEYS[1], 'arm', ARGV[1], 'ctx', ARGV[2], 'a0', ARGV[3], 'b0', ARGV[4],
             'at', ARGV[5])
end
redis.call('HINCRBY', KEYS[2], ARGV[1] .. ':pulls', 1)
if KEYS[3] ~= KEYS[2] then
  redis.call('HINCRBY', KEYS[3], ARGV[1] .. ':pulls', 1)
end
return nil
"""

# KEYS: arms, global hash, context hash.  Returns {id1, json1, id2, json2, ...} followed by
# each of those arms' global s and f, then its context s and f (false where never rewarded).
_VIEW = """
local arms = redis.call('HGETALL', KEYS[1])
local k = #arms
local out = arms  -- the evidence is appended after the arms' k entries
for i = 1, k, 2 do
  local g = redis.call('HMGET', KEYS[2], arms[i] .. ':s', arms[i] .. ':f')
  out[#out + 1] = g[1]
  out[#out + 1] = g[2]
end
if KEYS[3] ~= KEYS[2] then
  for i = 1, k, 2 do
    local c = redis.call('HMGET', KEYS[3], arms[i] .. ':s', arms[i] .. ':f')
    out[#out + 1] = c[1]
    out[#out + 1] = c[2]
  end
end
return out
"""

# KEYS: decision, arms, events.  ARGV: reward, at, context-hash prefix, discount, window ('' =
# none), detect ('1'/'0'), warmup, drift, threshold, reset ('context'/'arm'), event detail
# JSON.  Returns {'unknown'}, {'duplicate', reward, at} or {'ok', arm, context, alarms...}.
_REWARD = """
local d = redis.call('HMGET', KEYS[1], 'arm', 'ctx', 'a0', 'b0', 'reward', 'rewarded_at')
if not d[1] then return {'unknown'} end
if d[5] then return {'duplicate', d[5], d[6]} end
redis.call('HSET', KEYS[1], 'reward', ARGV[1], 'rewarded_at', ARGV[2])
local r = tonumber(ARGV[1])
local arm, ctx, a0, b0 = d[1], d[2], tonumber(d[3]), tonumber(d[4])
local g, w = tonumber(ARGV[4]), tonumber(ARGV[5])
local detect, warm = ARGV[6] == '1', tonumber(ARGV[7])
local drift, h = tonumber(ARGV[8]), tonumber(ARGV[9])
local function num(x) if x then return tonumber(x) end return 0.0 end
local function fmt(x) return string.format('%.17g', x) end
local contexts = {''}
if ctx ~= '' then contexts[2] = ctx end
local out = {'ok', arm, ctx}
for _, c in ipairs(contexts) do
  local key = ARGV[3] .. c
  local v = redis.call('HMGET', key, arm .. ':s', arm .. ':f', arm .. ':up', arm .. ':down',
                       arm .. ':n', arm .. ':rewarded', arm .. ':reward_sum', arm .. ':resets')
  local s, f, up, down, n = num(v[1]), num(v[2]), num(v[3]), num(v[4]), num(v[5])
  local alarm = false
  if detect and n >= warm then
    local mean = (a0 + s) / (a0 + b0 + s + f)
    local down_raw = down + mean - r - drift
    local up_raw = up + r - mean - drift
    if down_raw > h or up_raw > h then
      alarm = true
    else
      down = math.max(0.0, down_raw)
      up = math.max(0.0, up_raw)
    end
  end
  if alarm then
    s, f, up, down, n = 0.0, 0.0, 0.0, 0.0, 0.0
  else
    s = g * s + r
    f = g * f + (1.0 - r)
    if w then
      local total = s + f
      if total > w then
        local scale = w / total
        s, f = s * scale, f * scale
      end
    end
    n = n + 1
  end
  redis.call('HSET', key, arm .. ':s', fmt(s), arm .. ':f', fmt(f), arm .. ':up', fmt(up),
             arm .. ':down', fmt(down), arm .. ':n', fmt(n),
             arm .. ':rewarded', fmt(num(v[6]) + 1), arm .. ':reward_sum', fmt(num(v[7]) + r),
             arm .. ':resets', fmt(num(v[8]) + (alarm and 1 or 0)))
  if alarm then
    table.insert(out, c)
    if ARGV[10] == 'context' then
      for _, other in ipairs(redis.call('HKEYS', KEYS[2])) do
        if other ~= arm and redis.call('HEXISTS', key, other .. ':n') == 1 then
          redis.call('HSET', key, other .. ':s', '0', other .. ':f', '0', other .. ':up', '0',
                     other .. ':down', '0', other .. ':n', '0')
        end
      end
    end
    redis.call('RPUSH', KEYS[3], '{"at":' .. cjson.encode(ARGV[2]) ..
      ',"kind":"change_detected","arm_id":' .. cjson.encode(arm) ..
      ',"context":' .. cjson.encode(c) .. ',"detail":' .. ARGV[11] .. '}')
  end
end
return out
"""

# KEYS: config.  ARGV: config JSON, fingerprint, at.  Returns the previous fingerprint.
_SAVE_CONFIG = """
local old = redis.call('HGET', KEYS[1], 'fingerprint')
redis.call('HSET', KEYS[1], 'config', ARGV[1], 'fingerprint', ARGV[2], 'updated_at', ARGV[3])
return old
"""

_STATS_FIELDS = ("s", "f", "rewarded", "reward_sum", "resets", "pulls")


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class RedisBackend:
    """Bandits on a Redis server, under the keys ``prefix`` (one client pool, thread-safe).

    The client decodes replies (``decode_responses=True``), so every reply is ``str``; the
    ``cast`` calls say so to the type checker, whose stubs cover bytes replies too.
    """

    kind: Literal["redis"] = "redis"

    def __init__(self, url: str, prefix: str = "armature:bandit:") -> None:
        self.url, self.prefix = url, prefix
        try:
            self.client: redis.Redis = redis.Redis.from_url(
                url, decode_responses=True, socket_connect_timeout=5
            )
        except ValueError as exc:
            raise BanditError(
                f"bandit store: Redis URL {safe_url(url)!r} is invalid ({exc}); use "
                "redis://host:6379/0 (rediss:// for TLS, unix:///path/redis.sock)"
            ) from None
        with self._guard():
            self.client.ping()
        self._view = self.client.register_script(_VIEW)
        self._record = self.client.register_script(_RECORD)
        self._reward = self.client.register_script(_REWARD)
        self._save_config = self.client.register_script(_SAVE_CONFIG)
        self._arms_cache: dict[str, ArmRecord] = {}

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Turn the client's errors into :class:`BanditError` naming the server and the fix."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise BanditError(
                f"bandit store: cannot reach the Redis server at {safe_url(self.url)} ({exc}); "
                "start it (redis-server, or docker run -p 6379:6379 redis) or point "
                "storage.url / $ARMATURE_REDIS_URL at a running one"
            ) from None
        except redis.RedisError as exc:
            raise BanditError(
                f"bandit store: the Redis server at {safe_url(self.url)} refused the command "
                f"({exc}); check the server's log (a failed RDB save blocks writes: MISCONF)"
            ) from None

    def close(self) -> None:
        self.client.close()

    def _key(self, name: str, tail: str) -> str:
        return f"{self.prefix}{{{name}}}:{tail}"

    def _record_of(self, raw: str) -> ArmRecord:
        record = self._arms_cache.get(raw)
        if record is None:
            if len(self._arms_cache) > 4096:  # old versions of arms that changed
                self._arms_cache.clear()
            record = self._arms_cache[raw] = ArmRecord.model_validate_json(raw)
        return record

    # --- configuration -----------------------------------------------------------------

    def load_config(self, name: str) -> dict[str, Any] | None:
        with self._guard():
            raw = self.client.hget(self._key(name, "config"), "config")
        return None if raw is None else dict(json.loads(raw))

    def save_config(self, name: str, config: dict[str, Any], fingerprint: str, at: str) -> bool:
        with self._guard():
            old = self._save_config(
                keys=[self._key(name, "config")],
                args=[json.dumps(config, sort_keys=True), fingerprint, at],
            )
        return bool(old != fingerprint)

    def arm_records(self, name: str) -> list[ArmRecord]:
        with self._guard():
            raw = cast(dict[str, str], self.client.hgetall(self._key(name, "arms")))
        return sorted(
            (self._record_of(v) for v in raw.values()), key=lambda r: (r.position, r.arm_id)
        )

    def add_arm(self, name: str, record: ArmRecord) -> bool:
        key = self._key(name, "arms")

        added: list[bool] = []

        def add(pipe: Pipeline) -> None:  # run again if another client changed the arms
            added.clear()
            raw = cast(dict[str, str], pipe.hgetall(key))
            if record.arm_id in raw:
                return
            top = max((self._record_of(v).position for v in raw.values()), default=-1)
            stored = record.model_copy(update={"position": max(record.position, top + 1)})
            pipe.multi()
            pipe.hset(key, record.arm_id, stored.model_dump_json())
            added.append(True)

        with self._guard():
            self.client.transaction(add, key)
        return bool(added)

    def set_arm(self, name: str, arm_id: str, **fields: Any) -> None:
        key = self._key(name, "arms")

        def change(pipe: Pipeline) -> None:
            raw = cast(str | None, pipe.hget(key, arm_id))
            if raw is None:
                return
            record = self._record_of(raw).model_copy(update=fields)
            pipe.multi()
            pipe.hset(key, arm_id, record.model_dump_json())

        with self._guard():
            self.client.transaction(change, key)

    # --- the hot path ------------------------------------------------------------------

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
        arms_key, glob_key = self._key(name, "arms"), self._key(name, "c:")
        ctx_key = self._key(name, "c:" + context)
        with self._guard():
            view: list[str | None] = self._view(keys=[arms_key, glob_key, ctx_key])
        n = len(view) // (3 if context else 2)  # 2 entries per arm, 2 more per hash read
        evidence = np.array([0.0 if v is None else float(v) for v in view[n:]]).reshape(-1, 2)
        active = [
            (record, j)
            for j, record in enumerate(self._record_of(cast(str, raw)) for raw in view[1:n:2])
            if record.status == "active"
        ]
        active.sort(key=lambda item: (item[0].position, item[0].arm_id))
        if not active:
            raise no_arms_error(name)
        records = [record for record, _ in active]
        i = 0
        if len(records) > 1:
            rows = [j for _, j in active]
            a0 = np.array([r.prior_alpha for r in records])
            b0 = np.array([r.prior_beta for r in records])
            gs, gf = evidence[rows, 0], evidence[rows, 1]
            if context == "":
                alpha, beta = a0 + gs, b0 + gf
            else:
                own = evidence[[j + n // 2 for j in rows]]
                alpha, beta = seeded_posterior(
                    a0, b0, gs, gf, own[:, 0], own[:, 1], rule.seed_strength
                )
            i = int(thompson(alpha, beta, rng, rule.optimistic))
        chosen = records[i]
        chosen_id = uuid.uuid4().hex if decision_id is None else decision_id
        with self._guard():
            first = self._record(
                keys=[self._key(name, "d:" + chosen_id), ctx_key, glob_key, arms_key],
                args=[
                    chosen.arm_id,
                    context,
                    repr(chosen.prior_alpha),
                    repr(chosen.prior_beta),
                    now(),
                    "0" if user_id is None else "1",
                    user_id or "",
                ],
            )
        if first is None:
            arm_id, params, chosen_ctx, chosen_user = chosen.arm_id, chosen.params, context, user_id
        else:  # a retried selection: the first answer, no new pull
            arm_id, chosen_ctx, chosen_user, raw_arm = first
            params = self._record_of(raw_arm).params
        return Selection.model_construct(
            name=name,
            decision_id=chosen_id,
            arm_id=arm_id,
            params=dict(params),
            context=chosen_ctx,
            user_id=chosen_user,
        )

    def reward(
        self, name: str, decision_id: str, reward: float, at: str, dyn: Dynamics
    ) -> RewardReceipt:
        detail = json.dumps({"decision_id": decision_id, "reward": reward})
        with self._guard():
            result = self._reward(
                keys=[
                    self._key(name, "d:" + decision_id),
                    self._key(name, "arms"),
                    self._key(name, "events"),
                ],
                args=[
                    repr(reward),
                    at,
                    self._key(name, "c:"),
                    repr(dyn.discount),
                    "" if dyn.window is None else repr(dyn.window),
                    "1" if dyn.detect else "0",
                    dyn.warmup,
                    repr(dyn.drift),
                    repr(dyn.threshold),
                    dyn.reset,
                    detail,
                ],
            )
        if result[0] == "unknown":
            raise unknown_error(name, decision_id)
        if result[0] == "duplicate":
            raise duplicate_error(name, decision_id, float(result[1]), result[2])
        arm_id, context, alarms = result[1], result[2], result[3:]
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
        head = self._key(name, "c:")
        pattern = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in head) + "*"
        with self._guard():
            keys = [cast(str, k) for k in self.client.scan_iter(match=pattern, count=500)]
        return sorted(k[len(head) :] for k in keys if len(k) > len(head))

    def stats(self, name: str, context: str) -> dict[str, ArmStats]:
        with self._guard():
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self._key(name, "arms"))
            pipe.exists(self._key(name, "config"))
            pipe.hgetall(self._key(name, "c:" + context))
            arms, configured, row = pipe.execute()
        if not arms and not configured:
            raise UnknownBanditError(
                f"bandit {name!r} is not configured in the Redis store at "
                f"{safe_url(self.url)} under prefix {self.prefix!r}; call "
                f"configure_runtime({name!r}, config=...) first"
            )
        out: dict[str, ArmStats] = {}
        for arm_id in arms:
            values = {f: float(row.get(f"{arm_id}:{f}", 0.0)) for f in _STATS_FIELDS}
            out[arm_id] = ArmStats(
                arm_id=arm_id,
                s=values["s"],
                f=values["f"],
                pulls=int(values["pulls"]),
                rewarded=int(values["rewarded"]),
                reward_sum=values["reward_sum"],
                resets=int(values["resets"]),
            )
        return out

    def log(self, name: str, events: Sequence[BanditEvent]) -> None:
        if events:
            with self._guard():
                self.client.rpush(self._key(name, "events"), *(e.model_dump_json() for e in events))

    def events(self, name: str) -> list[BanditEvent]:
        with self._guard():
            rows = cast(list[str], self.client.lrange(self._key(name, "events"), 0, -1))
        return [BanditEvent.model_validate_json(r) for r in rows]

    def add_snapshots(self, name: str, rows: Sequence[Snapshot]) -> None:
        if rows:
            with self._guard():
                self.client.rpush(
                    self._key(name, "snapshots"), *(r.model_dump_json() for r in rows)
                )

    def snapshots(self, name: str) -> list[Snapshot]:
        with self._guard():
            rows = cast(list[str], self.client.lrange(self._key(name, "snapshots"), 0, -1))
        return [Snapshot.model_validate_json(r) for r in rows]
