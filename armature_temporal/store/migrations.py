"""Numbered schema migrations, applied in order on start-up (SQLite and PostgreSQL).

Each migration is a frozen snapshot of what it changed — never edit one that has shipped; add
the next number. ``schema_migrations`` records which have run, so an old database opens cleanly
and is brought up to date.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    inspect,
    text,
)

from armature_temporal.store.migrations_evals import _v21_evals
from armature_temporal.store.migrations_knowledge import (
    _v18_knowledge,
    _v19_knowledge_stemming,
    _v20_facts,
)
from armature_temporal.store.migrations_rounds import _v22_round_effort

__all__ = ["MIGRATIONS", "applied_versions", "migrate"]


def _v1_initial(conn: Connection) -> None:
    """The first schema: runs, trace_records, gate_decisions."""
    meta = MetaData()
    Table(
        "runs",
        meta,
        Column("run_id", String(200), primary_key=True),
        Column("spec_name", String(100), nullable=False, index=True),
        Column("spec_hash", String(64), nullable=False, index=True),
        Column("spec_version", String(50)),
        Column("policy_version", String(64), nullable=False),
        Column("parent_run_id", String(200)),
        Column("status", String(20), nullable=False),
        Column("reason", Text),
        Column("inputs", JSON),
        Column("outputs", JSON),
        Column("started_at", String(40), nullable=False),
        Column("finished_at", String(40)),
        Column("latency_ms", Float),
        Column("prompt_tokens", Integer, nullable=False, default=0),
        Column("completion_tokens", Integer, nullable=False, default=0),
        Column("cost_usd", Float, nullable=False, default=0.0),
        Index("ix_runs_spec_started", "spec_name", "started_at"),
    )
    Table(
        "trace_records",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("run_id", String(200), nullable=False),
        Column("seq", Integer, nullable=False),
        Column("kind", String(20), nullable=False),
        Column("spec_name", String(100), nullable=False),
        Column("spec_hash", String(64), nullable=False),
        Column("policy_version", String(64), nullable=False),
        Column("recorded_at", String(40), nullable=False),
        Column("stage_id", String(100)),
        Column("iteration", Integer, nullable=False, default=0),
        Column("attempt", Integer, nullable=False, default=0),
        Column("role", String(200)),
        Column("role_type", String(20)),
        Column("tier", String(100)),
        Column("model", String(200)),
        Column("arm_id", String(100)),
        Column("decision_id", String(100)),
        Column("inputs_hash", String(64)),
        Column("inputs_provenance", JSON),
        Column("status", String(20)),
        Column("output", JSON),
        Column("output_valid", Boolean),
        Column("error_type", String(40)),
        Column("error", Text),
        Column("latency_ms", Float, nullable=False, default=0.0),
        Column("prompt_tokens", Integer, nullable=False, default=0),
        Column("completion_tokens", Integer, nullable=False, default=0),
        Column("cost_usd", Float, nullable=False, default=0.0),
        Column("escalated", Boolean, nullable=False, default=False),
        Column("judge_score", Float),
        Column("data", JSON),
        Column("prev_hash", String(64), nullable=False),
        Column("hash", String(64), nullable=False),
        UniqueConstraint("run_id", "seq", name="uq_trace_run_seq"),
        Index("ix_trace_spec_kind", "spec_name", "kind"),
        Index("ix_trace_spec_hash", "spec_hash"),
    )
    Table(
        "gate_decisions",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("run_id", String(200), nullable=False, index=True),
        Column("stage_id", String(100), nullable=False),
        Column("decision", String(10), nullable=False),
        Column("decided_by", String(200)),
        Column("comment", Text),
        Column("decided_at", String(40), nullable=False),
        UniqueConstraint("run_id", "stage_id", name="uq_gate_run_stage"),
    )
    meta.create_all(conn)


def _v2_run_quality(conn: Connection) -> None:
    """Runs remember their HQS and the head of their hash chain."""
    conn.execute(text("ALTER TABLE runs ADD COLUMN hqs FLOAT"))
    conn.execute(text("ALTER TABLE runs ADD COLUMN chain_head VARCHAR(64)"))


def _v3_latency_window_index(conn: Connection) -> None:
    """Runs of one spec version by start time: each finishing run reads the latest 50 of its
    version's latencies (its HQS baseline), which without this index sorts all of them."""
    conn.execute(text("CREATE INDEX ix_runs_hash_started ON runs (spec_hash, started_at)"))


def _v4_improvement_proposals(conn: Connection) -> None:
    """The improvement loop's proposals: a verified spec change set, kept until it is applied
    or dismissed (``armature proposals``)."""
    meta = MetaData()
    Table(
        "improvement_proposals",
        meta,
        Column("id", String(200), primary_key=True),
        Column("spec_name", String(100), nullable=False, index=True),
        Column("improve_run_id", String(200), nullable=False),
        Column("created_at", String(40), nullable=False),
        Column("base_spec_hash", String(64)),
        Column("candidate_spec_hash", String(64)),
        Column("changes", JSON),
        Column("baseline_hqs", JSON),
        Column("candidate_hqs", JSON),
        Column("delta", Float),
        Column("ci_low", Float),
        Column("ci_high", Float),
        Column("verdict", String(20)),
        Column("detail", Text),
        Column("diff", Text),
        Column("spec_text", Text),
        Column("base_spec_text", Text),
        Column("status", String(20), nullable=False, server_default="proposed"),
        Column("status_changed_at", String(40)),
        Index("ix_proposals_spec_created", "spec_name", "created_at"),
    )
    meta.create_all(conn)


def _v5_adapters(conn: Connection) -> None:
    """The fine-tune loop's adapters: a LoRA adapter trained for one stage of one spec, with
    what training measured; ``provider: local`` tiers with ``adapter: latest`` load the newest
    verified, active one (``armature adapters``)."""
    meta = MetaData()
    Table(
        "adapters",
        meta,
        Column("id", String(200), primary_key=True),
        Column("spec_name", String(100), nullable=False),
        Column("stage_id", String(100), nullable=False),
        Column("base_model", Text, nullable=False),
        Column("path", Text, nullable=False),
        Column("created_at", String(40), nullable=False),
        Column("finetune_run_id", String(200), nullable=False),
        Column("examples", Integer),
        Column("report", JSON),
        Column("verdict", String(20)),
        Column("detail", Text),
        Column("status", String(20), nullable=False, server_default="active"),
        Column("status_changed_at", String(40)),
        Index("ix_adapters_spec_stage_created", "spec_name", "stage_id", "created_at"),
    )
    meta.create_all(conn)


#: (version, name, function), in order.
def _v6_verification_runs(conn: Connection) -> None:
    """Runs remember whether they were an improvement round's verification run."""
    conn.execute(text("ALTER TABLE runs ADD COLUMN verification BOOLEAN NOT NULL DEFAULT FALSE"))


def _v7_memory_entries(conn: Connection) -> None:
    """Cross-run memory (a spec's ``memory.capture``): named stage outputs kept per memory name
    in a rolling window, each with the run, stage and time it came from. One row per run,
    stage and key, so a retried capture writes nothing twice."""
    meta = MetaData()
    Table(
        "memory_entries",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("memory_name", String(100), nullable=False),
        Column("stage_id", String(100), nullable=False),
        Column("capture_key", String(200), nullable=False),
        Column("value", JSON),
        Column("run_id", String(200), nullable=False),
        Column("recorded_at", String(40), nullable=False),
        UniqueConstraint("run_id", "stage_id", "capture_key", name="uq_memory_run_stage_key"),
        Index("ix_memory_name_key", "memory_name", "stage_id", "capture_key", "recorded_at"),
    )
    meta.create_all(conn)


def _v8_record_anchors(conn: Connection) -> None:
    """What makes the record tamper-evident beyond its hash chain: a MAC on every record and
    on each run's summary (keyed by ARMATURE_HOME's trace key, never stored here), the run's
    record count beside its chain head, and ``trace_ledger``, an append-only, hash-chained,
    MAC'd list of every run's start and end, so a run deleted whole is noticed. Rows from
    before this migration have no MACs: ``armature traces verify`` reports them as legacy."""
    conn.execute(text("ALTER TABLE trace_records ADD COLUMN mac VARCHAR(100)"))
    conn.execute(text("ALTER TABLE runs ADD COLUMN chain_length INTEGER"))
    conn.execute(text("ALTER TABLE runs ADD COLUMN summary_mac VARCHAR(100)"))
    meta = MetaData()
    Table(
        "trace_ledger",
        meta,
        Column("seq", Integer, primary_key=True, autoincrement=False),
        Column("event", String(20), nullable=False),
        Column("run_id", String(200)),
        Column("recorded_at", String(40), nullable=False),
        Column("data", JSON),
        Column("key_id", String(16), nullable=False),
        Column("prev_hash", String(64), nullable=False),
        Column("hash", String(64), nullable=False),
        Column("mac", String(64), nullable=False),
        Index("ix_ledger_run", "run_id"),
    )
    meta.create_all(conn)


def _v9_heuristics(conn: Connection) -> None:
    """The experience memory: ``heuristics`` (lessons, with their status, provenance,
    embedding and Beta posterior of utility), ``heuristic_events`` (each status change, who
    made it, why, with figures) and ``heuristic_rewards`` (one row per heuristic and reward
    key, so a retried activity rewards once)."""
    meta = MetaData()
    Table(
        "heuristics",
        meta,
        Column("id", String(40), primary_key=True),
        Column("spec_name", String(100), nullable=False),
        Column("stage_id", String(100)),
        Column("kind", String(20), nullable=False),
        Column("text", Text, nullable=False),
        Column("status", String(20), nullable=False),
        Column("source", String(20), nullable=False),
        Column("provenance", JSON, nullable=False),
        Column("embedding", JSON),
        Column("embedding_model", String(200)),
        Column("alpha", Float, nullable=False),
        Column("beta", Float, nullable=False),
        Column("uses", Integer, nullable=False),
        Column("last_used_at", String(40)),
        Column("created_at", String(40), nullable=False),
        Column("updated_at", String(40), nullable=False),
        Index("ix_heuristics_spec_stage_status", "spec_name", "stage_id", "status"),
    )
    Table(
        "heuristic_events",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("heuristic_id", String(40), nullable=False),
        Column("at", String(40), nullable=False),
        Column("from_status", String(20)),
        Column("to_status", String(20), nullable=False),
        Column("actor", String(200), nullable=False),
        Column("reason", Text, nullable=False),
        Column("figures", JSON),
        Index("ix_heuristic_events_heuristic", "heuristic_id", "id"),
    )
    Table(
        "heuristic_rewards",
        meta,
        Column("heuristic_id", String(40), primary_key=True),
        Column("reward_key", String(300), primary_key=True),
        Column("reward", Float, nullable=False),
        Column("at", String(40), nullable=False),
    )
    meta.create_all(conn)


def _v10_cache(conn: Connection) -> None:
    """The answer cache of LLM stages: ``cache_entries`` (each stored answer with its exact
    key, semantic partition and embedding, its source run and cost, and its status: pending,
    servable or withheld) and ``cache_hits`` (each served answer, for stats and audit)."""
    meta = MetaData()
    Table(
        "cache_entries",
        meta,
        Column("id", String(64), primary_key=True),
        Column("spec_name", String(100), nullable=False),
        Column("spec_hash", String(64), nullable=False),
        Column("stage_id", String(100), nullable=False),
        Column("tier", String(100), nullable=False),
        Column("exact_key", String(64), nullable=False),
        Column("partition", String(64), nullable=False),
        Column("task", Text, nullable=False),
        Column("embedding", JSON),
        Column("embedding_model", String(200)),
        Column("output", JSON),
        Column("text", Text, nullable=False),
        Column("model", String(200), nullable=False),
        Column("simulated_quality", Float),
        Column("cost_usd", Float, nullable=False),
        Column("latency_ms", Float, nullable=False),
        Column("prompt_tokens", Integer, nullable=False),
        Column("completion_tokens", Integer, nullable=False),
        Column("run_id", String(200), nullable=False),
        Column("attempt", Integer, nullable=False),
        Column("status", String(20), nullable=False),
        Column("reason", Text),
        Column("created_at", String(40), nullable=False),
        Column("expires_at", String(40), nullable=False),
        Column("settled_at", String(40)),
        Column("hits", Integer, nullable=False),
        Index("ix_cache_exact", "exact_key", "status", "expires_at"),
        Index("ix_cache_partition", "partition", "status"),
        Index("ix_cache_spec_stage", "spec_name", "stage_id", "created_at"),
        Index("ix_cache_run", "run_id"),
    )
    Table(
        "cache_hits",
        meta,
        Column("run_id", String(200), primary_key=True),
        Column("stage_id", String(100), primary_key=True),
        Column("attempt_key", String(200), primary_key=True),
        Column("entry_id", String(64), nullable=False),
        Column("spec_name", String(100), nullable=False),
        Column("kind", String(20), nullable=False),
        Column("similarity", Float, nullable=False),
        Column("task", Text, nullable=False),
        Column("saved_cost_usd", Float, nullable=False),
        Column("at", String(40), nullable=False),
        Index("ix_cache_hits_spec", "spec_name", "at"),
    )
    meta.create_all(conn)


def _v11_predictions(conn: Connection) -> None:
    """Falsifiable improvement: each proposal's predicted fixes and regressions (and the
    failures of the version it was made from), the proposals applied to spec files
    (``improve_applied``) and every round with its verification and drift score
    (``improve_rounds``)."""
    for column in ("predicted_fixes", "predicted_regressions", "base_failures"):
        conn.execute(text(f"ALTER TABLE improvement_proposals ADD COLUMN {column} JSON"))
    meta = MetaData()
    Table(
        "improve_applied",
        meta,
        Column("proposal_id", String(200), primary_key=True),
        Column("spec_name", String(100), nullable=False),
        Column("spec_hash", String(64), nullable=False),
        Column("base_spec_hash", String(64), nullable=False),
        Column("applied_at", String(40), nullable=False),
        Column("path", Text, nullable=False),
        Index("ix_improve_applied_spec", "spec_name", "applied_at"),
    )
    Table(
        "improve_rounds",
        meta,
        Column("id", String(200), primary_key=True),
        Column("spec_name", String(100), nullable=False),
        Column("spec_hash", String(64), nullable=False),
        Column("created_at", String(40), nullable=False),
        Column("status", String(20), nullable=False),
        Column("mean_hqs", Float),
        Column("runs", Integer, nullable=False),
        Column("verification", JSON),
        Column("drift", Float),
        Index("ix_improve_rounds_spec", "spec_name", "created_at"),
    )
    meta.create_all(conn)


def _v12_proposal_lanes(conn: Connection) -> None:
    """Proposals remember their review lane (auto or review) and why."""
    conn.execute(
        text(
            "ALTER TABLE improvement_proposals "
            "ADD COLUMN lane VARCHAR(10) NOT NULL DEFAULT 'review'"
        )
    )
    conn.execute(text("ALTER TABLE improvement_proposals ADD COLUMN lane_reasons JSON"))


def _v13_proposal_test(conn: Connection) -> None:
    """Which statistical test decided a proposal (superiority or non-inferiority) and its Holm
    figures; older proposals keep NULL."""
    conn.execute(text("ALTER TABLE improvement_proposals ADD COLUMN test JSON"))


#: The adapter figures migration 15 adds (all nullable: older adapters were not measured).
_ADAPTER_FIGURES = (
    ("base_loss", "FLOAT"),
    ("heldout_loss", "FLOAT"),
    ("paired_diff", "FLOAT"),
    ("paired_ci_low", "FLOAT"),
    ("paired_ci_high", "FLOAT"),
    ("paired_n", "INTEGER"),
)


def _v15_adapter_evidence(conn: Connection) -> None:
    """An adapter keeps what decided its verdict: the base model's and its own held-out loss,
    and its paired runs with and without it (mean HQS difference, 95% interval, pairs). The
    verdict column widens to 40 characters for ``insufficient_evidence`` (SQLite does not
    enforce lengths). Older adapters keep NULL figures and their verdict."""
    for column, kind in _ADAPTER_FIGURES:
        conn.execute(text(f"ALTER TABLE adapters ADD COLUMN {column} {kind}"))
    if conn.dialect.name == "postgresql":
        conn.execute(text("ALTER TABLE adapters ALTER COLUMN verdict TYPE VARCHAR(40)"))


def _v16_api_tokens(conn: Connection) -> None:
    """The run API's tokens: a name, the SHA-256 of the secret (the secret itself is shown
    once and never stored), scopes, created / last used / revoked times."""
    meta = MetaData()
    Table(
        "api_tokens",
        meta,
        Column("name", String(64), primary_key=True),
        Column("secret_hash", String(64), nullable=False),
        Column("scopes", JSON, nullable=False),
        Column("created_at", String(40), nullable=False),
        Column("revoked_at", String(40)),
        Column("last_used_at", String(40)),
        Index("ix_api_tokens_secret_hash", "secret_hash", unique=True),
    )
    meta.create_all(conn)


def _v17_row_macs(conn: Connection) -> None:
    """Gate decisions and improvement proposals carry a MAC (the trace key, derived per
    table); a gate decision keeps an unauthenticated sender's claimed name and why its proof
    did not check apart from who decided. Older rows keep NULL: shown as unverified."""
    conn.execute(text("ALTER TABLE gate_decisions ADD COLUMN claimed_by VARCHAR(200)"))
    conn.execute(text("ALTER TABLE gate_decisions ADD COLUMN unverified TEXT"))
    conn.execute(text("ALTER TABLE gate_decisions ADD COLUMN mac VARCHAR(100)"))
    conn.execute(text("ALTER TABLE improvement_proposals ADD COLUMN mac VARCHAR(100)"))


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial", _v1_initial),
    (2, "run_quality", _v2_run_quality),
    (3, "latency_window_index", _v3_latency_window_index),
    (4, "improvement_proposals", _v4_improvement_proposals),
    (5, "adapters", _v5_adapters),
    (6, "verification_runs", _v6_verification_runs),
    (7, "memory_entries", _v7_memory_entries),
    (8, "record_anchors", _v8_record_anchors),
    (9, "heuristics", _v9_heuristics),
    (10, "cache", _v10_cache),
    (11, "predictions", _v11_predictions),
    (12, "proposal_lanes", _v12_proposal_lanes),
    (13, "proposal_test", _v13_proposal_test),
    (15, "adapter_evidence", _v15_adapter_evidence),
    (16, "api_tokens", _v16_api_tokens),
    (17, "row_macs", _v17_row_macs),
    (18, "knowledge", _v18_knowledge),
    (19, "knowledge_stemming", _v19_knowledge_stemming),
    (20, "facts", _v20_facts),
    (21, "evals", _v21_evals),
    (22, "round_effort", _v22_round_effort),
]


def applied_versions(conn: Connection) -> set[int]:
    if not inspect(conn).has_table("schema_migrations"):
        return set()
    return {int(row[0]) for row in conn.execute(text("SELECT version FROM schema_migrations"))}


def _serialise(conn: Connection) -> None:
    """Make concurrent starters take turns: SQLite already does (``BEGIN IMMEDIATE``, see
    :mod:`armature_temporal.store.engine`); PostgreSQL takes a transaction-scoped lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(8127001)"))


def migrate(engine: Engine, upto: int | None = None) -> list[int]:
    """Apply every pending migration (up to ``upto``); returns the versions applied.

    Each migration runs in its own transaction with its bookkeeping row, so a crash leaves the
    database at a clean version. Concurrent starters take turns (even creating the bookkeeping
    table, which PostgreSQL cannot do concurrently), and an up-to-date database costs one
    short transaction.
    """
    wanted = [m for m in MIGRATIONS if upto is None or m[0] <= upto]
    with engine.begin() as conn:
        _serialise(conn)
        conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, name VARCHAR(100) NOT NULL, "
                "applied_at VARCHAR(40) NOT NULL)"
            )
        )
        applied = applied_versions(conn)
    done: list[int] = []
    for version, name, apply in wanted:
        if version in applied:
            continue
        with engine.begin() as conn:
            _serialise(conn)
            if version in applied_versions(conn):
                continue  # another process applied it meanwhile
            apply(conn)
            conn.execute(
                text(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (:v, :n, :t)"
                ),
                {"v": version, "n": name, "t": datetime.now(UTC).isoformat()},
            )
            done.append(version)
    return done
