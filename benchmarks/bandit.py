"""Bandit benchmark: regret, convergence, drift, contexts and throughput, in one table.

The learner is Armature's own math (:mod:`armature_temporal.bandit._math`: ``thompson``,
``observe``, ``seeded_posterior``) with the **default** configuration of
:class:`~armature_temporal.bandit.BanditConfig` — the same dynamics for the stationary, drift and
segment rows. It is run vectorised across seeds (one numpy row per seed), beside UCB1 and
ε-greedy (ε = 0.1) run in this script on the same problems.

Problems (Bernoulli arms, ``--seeds`` seeds each, horizon ``--horizon``):

* ``0.3/0.5/0.7``, ``ten arms 0.1…0.9``, ``close 0.45/0.50/0.55`` — cumulative regret at
  T = 1,000 and 10,000; the Lai–Robbins constant ``c = Σ Δᵢ / KL(μᵢ, μ*)`` and the measured
  growth rate ``(R(10k) − R(1k)) / ln 10``; convergence: median pulls until the best arm first
  holds ≥ 90% of a sliding window of 20, and the pull after which it never drops below 90%.
* drift — ``0.3/0.5/0.7`` whose best and worst arms swap at T/2 (``→ 0.7/0.5/0.3``): median
  pulls after the swap until the new best holds ≥ 90% of the window again, and regret after the
  swap; beside plain Thompson sampling and a fixed discount of 0.999 (both without change
  detection), to show why the default detects changes instead of forgetting uniformly. An
  adjacent swap (best ↔ second, a small change) is reported too.
* segments — 4 user segments × 3 arms (means 0.7/0.5/0.3 rotated so that segments 0–2 each have
  a different best arm; segment 3 repeats segment 0's), context drawn uniformly per decision:
  regret of one pooled posterior against per-context posteriors seeded from the global one; and
  a control where every segment shares the best arm (pooling is right there).
* throughput (measured by ``_bandit_stores.py``) — select alone and select+update pairs per
  second through ``BanditRuntime``, in memory (threads), SQLite, PostgreSQL and Redis
  (processes, each with its own backend), 1 and 8 concurrent clients, with the count of lost
  updates (pulls and rewards recorded against those made) and a duplicate-reward check.
  8 × 500 pairs against SQLite, PostgreSQL and Redis must record exactly 4,000 pulls, 0 lost.
  Clients warm up on a separate bandit first and time themselves; single-client and in-memory
  figures are the best of 3 rounds (the machine may be shared), the 8-process ones a single
  round. The last rows divide Redis's pairs/s by SQLite's and PostgreSQL's from the same run.
  PostgreSQL gets a fresh database and Redis a fresh key prefix (both removed afterwards); a
  server that does not answer is said on stderr and its rows are left out. Each Redis server
  (``--redis-url``, repeatable) is labelled with its persistence settings (``CONFIG GET
  appendonly appendfsync save``): a server without an append-only file acknowledges writes
  that a crash loses, so set it beside PostgreSQL (an fsync per commit) only with an ``aof
  always`` server measured in the same run (SQLite runs WAL with ``synchronous=NORMAL``: a
  process crash loses no commit, a power loss may lose the last ones).

Run ``python benchmarks/bandit.py [--seeds 200] [--horizon 10000] [--no-throughput]
[--only-throughput] [--quick] [--pg-url URL] [--redis-url URL ...] [--json]``. Progress goes to
stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _bandit_stores import Throughput, log, postgres_database, redis_prefix, throughput

from armature_temporal.bandit import (
    BanditConfig,
)
from armature_temporal.bandit._math import (
    ArmState,
    Dynamics,
    lai_robbins_constant,
    observe,
    seeded_posterior,
    thompson,
)

DEFAULT = BanditConfig(arms=[{"arm_id": "x"}])  # type: ignore[list-item]
DYN = DEFAULT.dynamics()
RULE = DEFAULT.selection_rule()
SEED_STRENGTH = RULE.seed_strength
PLAIN = Dynamics(detect=False)
DISCOUNTED = Dynamics(detect=False, discount=0.999)

PROBLEMS: dict[str, list[float]] = {
    "0.3/0.5/0.7": [0.3, 0.5, 0.7],
    "ten arms 0.1…0.9": [round(0.1 * i, 1) for i in range(1, 10)],
    "close 0.45/0.50/0.55": [0.45, 0.50, 0.55],
}
SEGMENTS = np.array([[0.7, 0.5, 0.3], [0.3, 0.7, 0.5], [0.5, 0.3, 0.7], [0.7, 0.5, 0.3]])
SHARED = np.array([[0.3, 0.5, 0.7]] * 4)
WINDOW, SHARE = 20, 0.9


# --- simulation -------------------------------------------------------------------------------


@dataclass
class Trace:
    """Per-seed, per-step expected regret and whether the best arm was pulled."""

    regret: np.ndarray
    best: np.ndarray


def simulate(
    policy: str,
    means: np.ndarray,
    horizon: int,
    seeds: int,
    rng: np.random.Generator,
    dyn: Dynamics = DYN,
    swap_at: int | None = None,
    swap: list[int] | None = None,
) -> Trace:
    """Run ``policy`` (``ts``, ``ucb1``, ``egreedy``) on Bernoulli ``means`` for every seed."""
    k = means.shape[-1]
    mu = np.broadcast_to(means, (seeds, k)).copy()
    rows = np.arange(seeds)
    state = ArmState.zeros((seeds, k))
    ones = np.ones(k)
    counts, sums = np.zeros((seeds, k)), np.zeros((seeds, k))
    regret = np.zeros((seeds, horizon), dtype=np.float32)
    best = np.zeros((seeds, horizon), dtype=bool)
    for t in range(horizon):
        if swap_at is not None and t == swap_at:
            mu = mu[:, swap]
        if policy == "ts":
            arm = thompson(1.0 + state.s, 1.0 + state.f, rng, RULE.optimistic)
        elif t < k:
            arm = np.full(seeds, t, dtype=np.intp)
        elif policy == "ucb1":
            arm = (sums / counts + np.sqrt(2.0 * math.log(t) / counts)).argmax(axis=1)
        else:
            explore = rng.random(seeds) < 0.1
            greedy = (sums / counts).argmax(axis=1)
            arm = np.where(explore, rng.integers(0, k, seeds), greedy)
        p = mu[rows, arm]
        reward = (rng.random(seeds) < p).astype(float)
        regret[:, t] = mu.max(axis=1) - p
        best[:, t] = arm == mu.argmax(axis=1)
        if policy == "ts":
            observe(state, arm, reward, ones, ones, dyn)
        else:
            counts[rows, arm] += 1
            sums[rows, arm] += reward
    return Trace(regret, best)


def simulate_segments(
    horizon: int,
    seeds: int,
    rng: np.random.Generator,
    per_context: bool,
    strength: float,
    segments: np.ndarray = SEGMENTS,
) -> Trace:
    """Thompson sampling on a segment problem, pooled or with seeded per-context posteriors."""
    n_ctx, k = segments.shape
    rows = np.arange(seeds)
    ones = np.ones(k)
    glob = ArmState.zeros((seeds, k))
    own = [np.zeros((seeds, n_ctx, k)) for _ in range(5)]
    regret = np.zeros((seeds, horizon), dtype=np.float32)
    best = np.zeros((seeds, horizon), dtype=bool)
    for t in range(horizon):
        ctx = rng.integers(0, n_ctx, seeds)
        mu = segments[ctx]
        if per_context:
            local = ArmState(*(a[rows, ctx] for a in own))
            alpha, beta = seeded_posterior(ones, ones, glob.s, glob.f, local.s, local.f, strength)
        else:
            alpha, beta = 1.0 + glob.s, 1.0 + glob.f
        arm = thompson(alpha, beta, rng, RULE.optimistic)
        p = mu[rows, arm]
        reward = (rng.random(seeds) < p).astype(float)
        regret[:, t] = mu.max(axis=1) - p
        best[:, t] = arm == mu.argmax(axis=1)
        observe(glob, arm, reward, ones, ones, DYN)
        if per_context:
            observe(local, arm, reward, ones, ones, DYN)
            for target, value in zip(
                own, (local.s, local.f, local.up, local.down, local.n), strict=True
            ):
                target[rows, ctx] = value
    return Trace(regret, best)


def convergence(best: np.ndarray, start: int = 0) -> tuple[float, float]:
    """Median over seeds of (first step at which the best arm holds ≥ 90% of the last 20 pulls,
    the step after which it never drops below 90% again), counted from ``start``. A seed that
    never converges counts as infinity."""
    hits = best[:, start:].astype(np.int32)
    c = np.cumsum(hits, axis=1)
    window = c[:, WINDOW - 1 :] - np.concatenate(
        [np.zeros((hits.shape[0], 1), np.int32), c[:, :-WINDOW]], axis=1
    )
    ok = window >= SHARE * WINDOW
    first = np.where(ok.any(axis=1), ok.argmax(axis=1) + WINDOW, np.inf)
    bad = ~ok
    last_bad = np.where(bad.any(axis=1), bad.shape[1] - bad[:, ::-1].argmax(axis=1), 0)
    stable = np.where(ok[:, -1], last_bad + WINDOW, np.inf)
    return float(np.median(first)), float(np.median(stable))


# --- the table --------------------------------------------------------------------------------


@dataclass
class Row:
    section: str
    problem: str
    metric: str
    armature: str
    ucb1: str = ""
    egreedy: str = ""
    target: str = ""
    ok: str = ""


def fmt(x: float, digits: int = 1) -> str:
    return "never" if math.isinf(x) else f"{x:,.{digits}f}"


def fmt_mean(values: np.ndarray) -> str:
    """Mean ± standard error over seeds."""
    se = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return f"{float(values.mean()):,.1f} ± {se:.1f}"


def check(ok: bool) -> str:
    return "yes" if ok else "NO"


def bandit_rows(seeds: int, horizon: int, rng: np.random.Generator) -> list[Row]:
    rows: list[Row] = []
    t1 = min(1000, horizon) - 1
    stationary: dict[str, float] = {}
    for label, means in PROBLEMS.items():
        arr = np.array(means)
        results: dict[str, Trace] = {}
        for policy in ("ts", "ucb1", "egreedy"):
            start = time.perf_counter()
            results[policy] = simulate(policy, arr, horizon, seeds, rng)
            log(f"  {label:22} {policy:8} {time.perf_counter() - start:5.1f}s")
        per_seed_1 = {p: tr.regret[:, : t1 + 1].sum(axis=1) for p, tr in results.items()}
        per_seed_n = {p: tr.regret.sum(axis=1) for p, tr in results.items()}
        r1 = {p: float(v.mean()) for p, v in per_seed_1.items()}
        rn = {p: float(v.mean()) for p, v in per_seed_n.items()}
        stationary[label] = rn["ts"]
        c = lai_robbins_constant(means)
        growth = {p: (rn[p] - r1[p]) / math.log(horizon / (t1 + 1)) for p in results}
        target = {"0.3/0.5/0.7": 22.0, "ten arms 0.1…0.9": 55.0}.get(label)
        rows.append(
            Row(
                "stationary",
                label,
                "regret R(1k)",
                fmt_mean(per_seed_1["ts"]),
                fmt(r1["ucb1"]),
                fmt(r1["egreedy"]),
            )
        )
        ok = target is not None and rn["ts"] <= target and rn["ucb1"] >= 3 * rn["ts"]
        rows.append(
            Row(
                "stationary",
                label,
                f"regret R({horizon // 1000}k)",
                fmt_mean(per_seed_n["ts"]),
                fmt(rn["ucb1"]),
                fmt(rn["egreedy"]),
                f"≤ {target:g}, UCB1 ≥ 3× (is {rn['ucb1'] / rn['ts']:.1f}×)" if target else "",
                check(ok) if target else "",
            )
        )
        rows.append(
            Row(
                "stationary",
                label,
                "growth (R(10k)−R(1k))/ln10",
                fmt(growth["ts"], 2),
                fmt(growth["ucb1"], 2),
                fmt(growth["egreedy"], 2),
                f"≤ c = {c:.2f}" if target else f"c = {c:.2f}",
                check(growth["ts"] <= c) if target else "",
            )
        )
        first, stable = convergence(results["ts"].best)
        f_u, s_u = convergence(results["ucb1"].best)
        f_e, s_e = convergence(results["egreedy"].best)
        is_main = label == "0.3/0.5/0.7"
        rows.append(
            Row(
                "convergence",
                label,
                "median first ≥90% of 20 (pull)",
                fmt(first, 0),
                fmt(f_u, 0),
                fmt(f_e, 0),
                "≤ 60" if is_main else "",
                check(first <= 60) if is_main else "",
            )
        )
        rows.append(
            Row(
                "convergence",
                label,
                "median pull after which ≥90% holds",
                fmt(stable, 0),
                fmt(s_u, 0),
                fmt(s_e, 0),
            )
        )

    swap_at = horizon // 2
    main = np.array(PROBLEMS["0.3/0.5/0.7"])
    for label, swap in (
        ("best↔worst 0.3/0.5/0.7→0.7/0.5/0.3", [2, 1, 0]),
        ("best↔second 0.3/0.5/0.7→0.3/0.7/0.5", [0, 2, 1]),
    ):
        for name, dyn in (
            ("default (change detection)", DYN),
            ("no change detection", PLAIN),
            ("discount 0.999, no detection", DISCOUNTED),
        ):
            if swap != [2, 1, 0] and dyn is not DYN:
                continue
            start = time.perf_counter()
            tr = simulate("ts", main, horizon, seeds, rng, dyn, swap_at, swap)
            log(f"  drift {label[:11]:11} {name:27} {time.perf_counter() - start:5.1f}s")
            recover, _ = convergence(tr.best, swap_at)
            after_seeds = tr.regret[:, swap_at:].sum(axis=1)
            after = float(after_seeds.mean())
            headline = dyn is DYN and swap == [2, 1, 0]
            rows.append(
                Row(
                    "drift",
                    f"{label} [{name}]",
                    "median pulls to ≥90% after swap",
                    fmt(recover, 0),
                    target="≤ 200" if headline else "",
                    ok=check(recover <= 200) if headline else "",
                )
            )
            rows.append(
                Row(
                    "drift",
                    f"{label} [{name}]",
                    "regret after swap",
                    fmt_mean(after_seeds),
                    target="≤ 80" if headline else "",
                    ok=check(after <= 80) if headline else "",
                )
            )
            if dyn is not DYN:
                st = simulate("ts", main, horizon, seeds, rng, dyn)
                rows.append(
                    Row(
                        "drift",
                        f"0.3/0.5/0.7 [{name}]",
                        "stationary regret R(10k)",
                        fmt(float(st.regret.sum(axis=1).mean())),
                    )
                )
    rows.append(
        Row(
            "drift",
            "0.3/0.5/0.7 [default (change detection)]",
            "stationary regret R(10k) (same config)",
            fmt(stationary["0.3/0.5/0.7"]),
            target="≤ 22",
            ok=check(stationary["0.3/0.5/0.7"] <= 22),
        )
    )

    for problem, segments in (
        ("4 segments × 3 arms, different best", SEGMENTS),
        ("4 segments × 3 arms, shared best (control)", SHARED),
    ):
        for per_context in (False, True):
            start = time.perf_counter()
            tr = simulate_segments(horizon, seeds, rng, per_context, SEED_STRENGTH, segments)
            kind = "per-context (seeded)" if per_context else "pooled"
            log(f"  segments {problem[-9:]:9} {kind:20} {time.perf_counter() - start:5.1f}s")
            per_seed = tr.regret.sum(axis=1)
            regret = float(per_seed.mean())
            headline = per_context and segments is SEGMENTS
            rows.append(
                Row(
                    "segments",
                    f"{problem} [{kind}]",
                    f"regret R({horizon // 1000}k)",
                    fmt_mean(per_seed),
                    target="≤ 60" if headline else "",
                    ok=check(regret <= 60) if headline else "",
                )
            )
    return rows


def throughput_rows(pg_url: str, redis_urls: list[str], quick: bool) -> list[Row]:
    rows: list[Row] = []
    backends: list[tuple[str, str, dict[str, Any]]] = [("memory", "memory", {"backend": "memory"})]
    tmp = tempfile.TemporaryDirectory()
    sqlite_url = f"sqlite:///{Path(tmp.name) / 'bandit.db'}"
    backends.append(("sqlite", "sqlite", {"backend": "sqlite", "url": sqlite_url}))
    pg = postgres_database(pg_url)
    if pg is not None:
        backends.append(("postgres", "postgres", {"backend": "postgres", "url": pg[0]}))
    cleanups: list[Callable[[], None]] = []
    for redis_url in redis_urls:
        rd = redis_prefix(redis_url)
        if rd is not None:
            cleanups.append(rd[1])
            storage = {"backend": "redis", "url": redis_url, "prefix": rd[0]}
            backends.append(("redis", f"redis ({rd[2]})", storage))
    pairs: dict[tuple[str, int], float] = {}
    try:
        for backend, shown, storage in backends:
            url = None if backend == "memory" else storage["url"]
            for clients in (1, 8):
                n_select = (20_000 if backend == "memory" else 500) // (4 if quick else 1)
                n_pairs = (10_000 if backend == "memory" else 500) // (4 if quick else 1)
                start = time.perf_counter()
                rounds = 3 if url is None or clients == 1 else 1  # best of 3 where cheap
                runs = [
                    throughput(backend, storage, clients, n_select, n_pairs) for _ in range(rounds)
                ]
                res = Throughput(
                    backend,
                    clients,
                    max(r.select_per_s for r in runs),
                    max(r.pairs_per_s for r in runs),
                    sum(r.pulls for r in runs),
                    sum(r.expected_pulls for r in runs),
                    sum(r.lost_updates for r in runs),
                    all(r.duplicate_refused for r in runs),
                )
                log(f"  throughput {backend:8} ×{clients} {time.perf_counter() - start:5.1f}s")
                best = " (best of 3)" if rounds == 3 else ""
                label = f"{shown} × {clients} " + (
                    ("thread" if clients == 1 else "threads")
                    if url is None
                    else ("process" if clients == 1 else "processes")
                )
                sel_target = {"memory": "≥ 50,000/s"}.get(backend, "") if clients == 1 else ""
                pair_target = (
                    {"memory": "≥ 20,000/s", "sqlite": "≥ 2,500/s"}.get(backend, "")
                    if clients == 1
                    else ""
                )
                sel_ok = {"memory": res.select_per_s >= 50_000}.get(backend)
                pair_ok = {
                    "memory": res.pairs_per_s >= 20_000,
                    "sqlite": res.pairs_per_s >= 2_500,
                }.get(backend)
                rows.append(
                    Row(
                        "throughput",
                        label,
                        "select/s" + best,
                        fmt(res.select_per_s, 0),
                        target=sel_target,
                        ok=check(bool(sel_ok)) if sel_target else "",
                    )
                )
                rows.append(
                    Row(
                        "throughput",
                        label,
                        "select+update pairs/s" + best,
                        fmt(res.pairs_per_s, 0),
                        target=pair_target,
                        ok=check(bool(pair_ok)) if pair_target else "",
                    )
                )
                exact = res.pulls == res.expected_pulls and res.lost_updates == 0
                rows.append(
                    Row(
                        "throughput",
                        label,
                        "pulls recorded / made, lost updates" + (" (3 rounds)" if best else ""),
                        f"{res.pulls:,} / {res.expected_pulls:,}, {res.lost_updates} lost",
                        target="exactly 4,000, 0 lost" if clients == 8 and url else "0 lost",
                        ok=check(exact),
                    )
                )
                rows.append(
                    Row(
                        "throughput",
                        label,
                        "duplicate reward refused",
                        "yes" if res.duplicate_refused else "no",
                        target="refused",
                        ok=check(res.duplicate_refused),
                    )
                )
                pairs[shown, clients] = res.pairs_per_s
    finally:
        if pg is not None:
            pg[1]()
        for cleanup in cleanups:
            cleanup()
        tmp.cleanup()
    for _, shown, _ in backends:
        for clients in (1, 8):
            for base in ("sqlite", "postgres"):
                if shown.startswith("redis") and (base, clients) in pairs:
                    rows.append(
                        Row(
                            "throughput",
                            f"{shown} vs {base} × {clients}",
                            "pairs/s ratio (same run)",
                            f"{pairs[shown, clients] / pairs[base, clients]:.2f}×",
                        )
                    )
    return rows


def print_table(rows: list[Row]) -> None:
    headers = [
        "section",
        "problem",
        "metric",
        "armature TS",
        "UCB1",
        "ε-greedy 0.1",
        "target",
        "ok",
    ]
    table = [headers] + [
        [r.section, r.problem, r.metric, r.armature, r.ucb1, r.egreedy, r.target, r.ok]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    line = "  ".join("-" * w for w in widths)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print(line)
    previous = rows[0].section if rows else ""
    for r, cells in zip(rows, table[1:], strict=True):
        if r.section != previous:
            print(line)
            previous = r.section
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--horizon", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--only-throughput", action="store_true")
    parser.add_argument("--quick", action="store_true", help="fewer throughput operations")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument(
        "--redis-url",
        action="append",
        help="a Redis server to measure (repeatable; default redis://127.0.0.1:6379/0); each "
        "gets its own rows, labelled with its persistence settings",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    log(f"bandit benchmark: {args.seeds} seeds, horizon {args.horizon:,}; default dynamics {DYN}")
    rows = [] if args.only_throughput else bandit_rows(args.seeds, args.horizon, rng)
    if not args.no_throughput:
        rows += throughput_rows(
            args.pg_url, args.redis_url or ["redis://127.0.0.1:6379/0"], args.quick
        )
    log(f"done in {time.perf_counter() - started:.0f}s")
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=2, ensure_ascii=False))
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
