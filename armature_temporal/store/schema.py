"""The trace store's tables (SQLAlchemy 2 typed ORM). Changes go through numbered migrations in
:mod:`armature_temporal.store.migrations`; this module describes the newest schema."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AdapterRow",
    "ApiTokenRow",
    "Base",
    "CacheEntryRow",
    "CacheHitRow",
    "FactEventRow",
    "FactProvenanceRow",
    "FactRow",
    "GateDecisionRow",
    "HeuristicEventRow",
    "HeuristicRewardRow",
    "HeuristicRow",
    "KnowledgeChunkRow",
    "KnowledgeSourceRow",
    "LedgerRow",
    "MemoryEntryRow",
    "ProposalRow",
    "RunRow",
    "TraceRow",
]


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    """One run: a summary kept up to date from its run_start and run_end records."""

    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100), index=True)
    spec_hash: Mapped[str] = mapped_column(String(64), index=True)
    spec_version: Mapped[str | None] = mapped_column(String(50))
    policy_version: Mapped[str] = mapped_column(String(64))
    parent_run_id: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    inputs: Mapped[Any] = mapped_column(JSON, nullable=True)
    outputs: Mapped[Any] = mapped_column(JSON, nullable=True)
    started_at: Mapped[str] = mapped_column(String(40))
    finished_at: Mapped[str | None] = mapped_column(String(40))
    latency_ms: Mapped[float | None] = mapped_column(Float)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    hqs: Mapped[float | None] = mapped_column(Float)
    chain_head: Mapped[str | None] = mapped_column(String(64))
    # Records stored so far, and the MAC over the summary (None: written before keying).
    chain_length: Mapped[int | None] = mapped_column(Integer)
    summary_mac: Mapped[str | None] = mapped_column(String(100))
    # An improvement round's verification run: left out of dashboards, exports, diagnoses.
    verification: Mapped[bool] = mapped_column(default=False, server_default=text("false"))

    __table_args__ = (
        Index("ix_runs_spec_started", "spec_name", "started_at"),
        Index("ix_runs_hash_started", "spec_hash", "started_at"),
    )


class TraceRow(Base):
    """One link of a run's hash chain (see :mod:`armature_temporal.runtime.traces`)."""

    __tablename__ = "trace_records"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(200))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    spec_name: Mapped[str] = mapped_column(String(100))
    spec_hash: Mapped[str] = mapped_column(String(64))
    policy_version: Mapped[str] = mapped_column(String(64))
    recorded_at: Mapped[str] = mapped_column(String(40))
    stage_id: Mapped[str | None] = mapped_column(String(100))
    iteration: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    role: Mapped[str | None] = mapped_column(String(200))
    role_type: Mapped[str | None] = mapped_column(String(20))
    tier: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200))
    arm_id: Mapped[str | None] = mapped_column(String(100))
    decision_id: Mapped[str | None] = mapped_column(String(100))
    inputs_hash: Mapped[str | None] = mapped_column(String(64))
    inputs_provenance: Mapped[Any] = mapped_column(JSON, nullable=True)
    status: Mapped[str | None] = mapped_column(String(20))
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    output_valid: Mapped[bool | None] = mapped_column()
    error_type: Mapped[str | None] = mapped_column(String(40))
    error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    escalated: Mapped[bool] = mapped_column(default=False)
    judge_score: Mapped[float | None] = mapped_column(Float)
    data: Mapped[Any] = mapped_column(JSON, nullable=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    # ``<key id>:<HMAC of the record's hash>`` with the trace key (None: before keying).
    mac: Mapped[str | None] = mapped_column(String(100))

    __table_args__ = (
        UniqueConstraint("run_id", "seq", name="uq_trace_run_seq"),
        Index("ix_trace_spec_kind", "spec_name", "kind"),
        Index("ix_trace_spec_hash", "spec_hash"),
    )


class LedgerRow(Base):
    """One entry of the store-wide ledger (:mod:`armature_temporal.store.ledger`): a run
    started or ended, hash-chained to the entry before and MAC'd with the trace key."""

    __tablename__ = "trace_ledger"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    event: Mapped[str] = mapped_column(String(20))
    run_id: Mapped[str | None] = mapped_column(String(200))
    recorded_at: Mapped[str] = mapped_column(String(40))
    data: Mapped[Any] = mapped_column(JSON, nullable=True)
    key_id: Mapped[str] = mapped_column(String(16))
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    mac: Mapped[str] = mapped_column(String(64))

    __table_args__ = (Index("ix_ledger_run", "run_id"),)


class GateDecisionRow(Base):
    """Who decided a gate, when, how, and why."""

    __tablename__ = "gate_decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(200), index=True)
    stage_id: Mapped[str] = mapped_column(String(100))
    decision: Mapped[str] = mapped_column(String(10))
    decided_by: Mapped[str | None] = mapped_column(String(200))
    comment: Mapped[str | None] = mapped_column(Text)
    decided_at: Mapped[str] = mapped_column(String(40))
    # An unauthenticated decision (decided_by "signal"): the name its sender claimed, and why
    # the proof it carried did not check, if it carried one (migration 17).
    claimed_by: Mapped[str | None] = mapped_column(String(200))
    unverified: Mapped[str | None] = mapped_column(Text)
    # ``<key id>:<HMAC>`` over every column above (store/signed_rows.py; None: before 17).
    mac: Mapped[str | None] = mapped_column(String(100))

    __table_args__ = (UniqueConstraint("run_id", "stage_id", name="uq_gate_run_stage"),)


class ProposalRow(Base):
    """An improvement proposal (:class:`~armature_temporal.improve.models.Proposal`) and when
    its status last changed."""

    __tablename__ = "improvement_proposals"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100), index=True)
    improve_run_id: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[str] = mapped_column(String(40))
    base_spec_hash: Mapped[str | None] = mapped_column(String(64))
    candidate_spec_hash: Mapped[str | None] = mapped_column(String(64))
    changes: Mapped[Any] = mapped_column(JSON, nullable=True)
    baseline_hqs: Mapped[Any] = mapped_column(JSON, nullable=True)
    candidate_hqs: Mapped[Any] = mapped_column(JSON, nullable=True)
    delta: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    verdict: Mapped[str | None] = mapped_column(String(20))
    detail: Mapped[str | None] = mapped_column(Text)
    diff: Mapped[str | None] = mapped_column(Text)
    spec_text: Mapped[str | None] = mapped_column(Text)
    base_spec_text: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), default="proposed", server_default="proposed")
    status_changed_at: Mapped[str | None] = mapped_column(String(40))
    predicted_fixes: Mapped[Any] = mapped_column(JSON, nullable=True)
    predicted_regressions: Mapped[Any] = mapped_column(JSON, nullable=True)
    base_failures: Mapped[Any] = mapped_column(JSON, nullable=True)
    lane: Mapped[str] = mapped_column(String(10), default="review", server_default="review")
    lane_reasons: Mapped[Any] = mapped_column(JSON, nullable=True)
    test: Mapped[Any] = mapped_column(JSON, nullable=True)
    # ``<key id>:<HMAC>`` over the proposal and its status (store/signed_rows.py; None: before
    # migration 17).
    mac: Mapped[str | None] = mapped_column(String(100))

    __table_args__ = (Index("ix_proposals_spec_created", "spec_name", "created_at"),)


class AppliedChangeRow(Base):
    """A proposal written to a spec file
    (:class:`~armature_temporal.improve.models.AppliedChange`)."""

    __tablename__ = "improve_applied"

    proposal_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100))
    spec_hash: Mapped[str] = mapped_column(String(64))
    base_spec_hash: Mapped[str] = mapped_column(String(64))
    applied_at: Mapped[str] = mapped_column(String(40))
    path: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_improve_applied_spec", "spec_name", "applied_at"),)


class ImproveRoundRow(Base):
    """One improvement round (:class:`~armature_temporal.improve.models.ImproveRound`)."""

    __tablename__ = "improve_rounds"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100))
    spec_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20))
    mean_hqs: Mapped[float | None] = mapped_column(Float)
    runs: Mapped[int] = mapped_column(Integer)
    verification: Mapped[Any] = mapped_column(JSON, nullable=True)
    drift: Mapped[float | None] = mapped_column(Float)
    effort: Mapped[Any] = mapped_column(JSON, nullable=True)  # RoundEffort; migration 22

    __table_args__ = (Index("ix_improve_rounds_spec", "spec_name", "created_at"),)


class AdapterRow(Base):
    """A trained adapter (:class:`~armature_temporal.finetune.models.Adapter`; its ``stage`` is
    the ``stage_id`` column) and when its status last changed."""

    __tablename__ = "adapters"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100))
    stage_id: Mapped[str] = mapped_column(String(100))
    base_model: Mapped[str] = mapped_column(Text)
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(String(40))
    finetune_run_id: Mapped[str] = mapped_column(String(200))
    examples: Mapped[int | None] = mapped_column(Integer)
    report: Mapped[Any] = mapped_column(JSON, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(40))
    detail: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), default="active", server_default="active")
    status_changed_at: Mapped[str | None] = mapped_column(String(40))
    # Migration 15: what decided the verdict, against the base model and in paired runs.
    base_loss: Mapped[float | None] = mapped_column(Float)
    heldout_loss: Mapped[float | None] = mapped_column(Float)
    paired_diff: Mapped[float | None] = mapped_column(Float)
    paired_ci_low: Mapped[float | None] = mapped_column(Float)
    paired_ci_high: Mapped[float | None] = mapped_column(Float)
    paired_n: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        Index("ix_adapters_spec_stage_created", "spec_name", "stage_id", "created_at"),
    )


class MemoryEntryRow(Base):
    """One remembered stage output value (a spec's ``memory.capture``), with its provenance:
    the run, the stage and when. Kept per ``memory_name`` in a rolling window per stage and
    key (:class:`~armature_temporal.store.memory.MemoryStore`)."""

    __tablename__ = "memory_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    memory_name: Mapped[str] = mapped_column(String(100))
    stage_id: Mapped[str] = mapped_column(String(100))
    capture_key: Mapped[str] = mapped_column(String(200))
    value: Mapped[Any] = mapped_column(JSON, nullable=True)
    run_id: Mapped[str] = mapped_column(String(200))
    recorded_at: Mapped[str] = mapped_column(String(40))

    __table_args__ = (
        UniqueConstraint("run_id", "stage_id", "capture_key", name="uq_memory_run_stage_key"),
        Index("ix_memory_name_key", "memory_name", "stage_id", "capture_key", "recorded_at"),
    )


class HeuristicRow(Base):
    """One heuristic of the experience memory
    (:class:`~armature_temporal.experience.models.Heuristic`; kept by
    :class:`~armature_temporal.store.heuristics.HeuristicStore`)."""

    __tablename__ = "heuristics"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100))
    stage_id: Mapped[str | None] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))
    source: Mapped[str] = mapped_column(String(20))
    provenance: Mapped[Any] = mapped_column(JSON)
    embedding: Mapped[Any] = mapped_column(JSON, nullable=True)
    embedding_model: Mapped[str | None] = mapped_column(String(200))
    alpha: Mapped[float] = mapped_column(Float, default=1.0)
    beta: Mapped[float] = mapped_column(Float, default=1.0)
    uses: Mapped[int] = mapped_column(Integer, default=0)
    last_used_at: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[str] = mapped_column(String(40))
    updated_at: Mapped[str] = mapped_column(String(40))

    __table_args__ = (Index("ix_heuristics_spec_stage_status", "spec_name", "stage_id", "status"),)


class HeuristicEventRow(Base):
    """One status change of a heuristic, with who made it, why and the figures behind it."""

    __tablename__ = "heuristic_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    heuristic_id: Mapped[str] = mapped_column(String(40))
    at: Mapped[str] = mapped_column(String(40))
    from_status: Mapped[str | None] = mapped_column(String(20))
    to_status: Mapped[str] = mapped_column(String(20))
    actor: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(Text)
    figures: Mapped[Any] = mapped_column(JSON, nullable=True)

    __table_args__ = (Index("ix_heuristic_events_heuristic", "heuristic_id", "id"),)


class HeuristicRewardRow(Base):
    """One reward given to a heuristic, once per key (a retried activity rewards once)."""

    __tablename__ = "heuristic_rewards"

    heuristic_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    reward_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    reward: Mapped[float] = mapped_column(Float)
    at: Mapped[str] = mapped_column(String(40))


class CacheEntryRow(Base):
    """One cached model answer of an LLM stage (:class:`~armature_temporal.cache.models.
    CacheEntry`; kept by :class:`~armature_temporal.store.cache.CacheStore`)."""

    __tablename__ = "cache_entries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100))
    spec_hash: Mapped[str] = mapped_column(String(64))
    stage_id: Mapped[str] = mapped_column(String(100))
    tier: Mapped[str] = mapped_column(String(100))
    exact_key: Mapped[str] = mapped_column(String(64))
    partition: Mapped[str] = mapped_column(String(64))
    task: Mapped[str] = mapped_column(Text)
    embedding: Mapped[Any] = mapped_column(JSON, nullable=True)
    embedding_model: Mapped[str | None] = mapped_column(String(200))
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    text: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    simulated_quality: Mapped[float | None] = mapped_column(Float)
    cost_usd: Mapped[float] = mapped_column(Float)
    latency_ms: Mapped[float] = mapped_column(Float)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[str] = mapped_column(String(200))
    attempt: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(String(40))
    expires_at: Mapped[str] = mapped_column(String(40))
    settled_at: Mapped[str | None] = mapped_column(String(40))
    hits: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (
        Index("ix_cache_exact", "exact_key", "status", "expires_at"),
        Index("ix_cache_partition", "partition", "status"),
        Index("ix_cache_spec_stage", "spec_name", "stage_id", "created_at"),
        Index("ix_cache_run", "run_id"),
    )


class CacheHitRow(Base):
    """One served answer: which entry, for which run, stage and attempt, how similar."""

    __tablename__ = "cache_hits"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    stage_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    attempt_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    entry_id: Mapped[str] = mapped_column(String(64))
    spec_name: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))
    similarity: Mapped[float] = mapped_column(Float)
    task: Mapped[str] = mapped_column(Text)
    saved_cost_usd: Mapped[float] = mapped_column(Float)
    at: Mapped[str] = mapped_column(String(40))

    __table_args__ = (Index("ix_cache_hits_spec", "spec_name", "at"),)


class ApiTokenRow(Base):
    """One API token of the run API (:class:`~armature_temporal.store.tokens.TokenStore`): its
    name, the SHA-256 of the secret (never the secret), its scopes, and when it was created,
    last used and revoked."""

    __tablename__ = "api_tokens"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[str] = mapped_column(String(40))
    revoked_at: Mapped[str | None] = mapped_column(String(40))
    last_used_at: Mapped[str | None] = mapped_column(String(40))

    __table_args__ = (Index("ix_api_tokens_secret_hash", "secret_hash", unique=True),)


class KnowledgeSourceRow(Base):
    """One document indexed into a knowledge collection
    (:class:`~armature_temporal.store.knowledge.KnowledgeStore`): its name, the sha256 of its
    text, how many chunks it gave, the embedder that made their vectors, when it was added."""

    __tablename__ = "knowledge_sources"

    collection: Mapped[str] = mapped_column(String(100), primary_key=True)
    source: Mapped[str] = mapped_column(String(1000), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    chunks: Mapped[int] = mapped_column(Integer)
    embedder: Mapped[str] = mapped_column(String(100))
    added_at: Mapped[str] = mapped_column(String(40))


class KnowledgeChunkRow(Base):
    """One chunk of an indexed document: its place, the headings above it, its text, the
    text's sha256 and its vector (a JSON list; the search ranks them with numpy)."""

    __tablename__ = "knowledge_chunks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    collection: Mapped[str] = mapped_column(String(100))
    source: Mapped[str] = mapped_column(String(1000))
    ord: Mapped[int] = mapped_column(Integer)
    heading: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    vector: Mapped[Any] = mapped_column(JSON)

    __table_args__ = (Index("ix_knowledge_chunks_source", "collection", "source", "ord"),)


class FactRow(Base):
    """One fact (:class:`~armature_temporal.store.facts.FactStore`): subject entity,
    predicate, object (a value, or an entity), its text, kind, confidence, and where it stands:
    current, superseded, contradicted or rejected (with the scan's findings), linked to the
    version that replaced it (``superseded_by``) and to the one it replaced (``previous``)."""

    __tablename__ = "facts"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(200))
    subject: Mapped[str] = mapped_column(String(500))
    subject_name: Mapped[str] = mapped_column(Text)
    predicate: Mapped[str] = mapped_column(String(200))
    value: Mapped[Any] = mapped_column(JSON, nullable=True)
    object_entity: Mapped[str | None] = mapped_column(String(500))
    object_name: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(20))
    confidence: Mapped[float] = mapped_column(Float)
    cardinality: Mapped[str] = mapped_column(String(10))
    supersedes: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[str] = mapped_column(String(20))
    superseded_by: Mapped[str | None] = mapped_column(String(40))
    previous: Mapped[str | None] = mapped_column(String(40))
    recorded_at: Mapped[str] = mapped_column(String(40))
    findings: Mapped[Any] = mapped_column(JSON, nullable=True)

    __table_args__ = (
        Index("ix_facts_slot", "namespace", "subject", "predicate", "status"),
        Index("ix_facts_namespace_status", "namespace", "status"),
        Index("ix_facts_object", "namespace", "object_entity"),
    )


class FactProvenanceRow(Base):
    """One sighting of a fact: the namespace, run, stage and output field it was seen in,
    when, and the sha256 of that output. Only added to, never changed."""

    __tablename__ = "fact_provenance"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fact_id: Mapped[str] = mapped_column(String(40))
    namespace: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str] = mapped_column(String(200))
    stage: Mapped[str] = mapped_column(String(100))
    field: Mapped[str] = mapped_column(String(500))
    recorded_at: Mapped[str] = mapped_column(String(40))
    source_hash: Mapped[str] = mapped_column(String(64))

    __table_args__ = (
        UniqueConstraint(
            "fact_id", "namespace", "run_id", "stage", "field", name="uq_fact_provenance"
        ),
    )


class FactEventRow(Base):
    """One thing that happened to a fact: its reconciliation (new, duplicate, update,
    supersede, contradict, rejected) or its retirement (superseded, contradicted), with the
    other fact involved and the details (the scan's findings, the sighting)."""

    __tablename__ = "fact_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fact_id: Mapped[str] = mapped_column(String(40))
    at: Mapped[str] = mapped_column(String(40))
    event: Mapped[str] = mapped_column(String(20))
    other: Mapped[str | None] = mapped_column(String(40))
    detail: Mapped[Any] = mapped_column(JSON, nullable=True)

    __table_args__ = (Index("ix_fact_events_fact", "fact_id", "id"),)


class EvalRow(Base):
    """One ``armature eval`` of a spec version on a cases file
    (:class:`~armature_temporal.evals.models.EvalResult`): its counts and pass rate for listing,
    and every case's runs and verdicts in ``results``."""

    __tablename__ = "evals"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(100))
    spec_version: Mapped[str] = mapped_column(String(50))
    spec_hash: Mapped[str] = mapped_column(String(64))
    cases_file: Mapped[str] = mapped_column(Text)
    created_at: Mapped[str] = mapped_column(String(40))
    repeat: Mapped[int] = mapped_column(Integer)
    cases: Mapped[int] = mapped_column(Integer)
    passed: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    errors: Mapped[int] = mapped_column(Integer)
    pass_rate: Mapped[float | None] = mapped_column(Float)
    results: Mapped[Any] = mapped_column(JSON)

    __table_args__ = (Index("ix_evals_spec", "spec_name", "created_at"),)
