"""Trace records and their hash chain (pure: no I/O, safe inside a workflow).

Every run leaves an ordered chain of records — run start, each model attempt, each stage's
outcome, gate decisions, tool decisions, run end. Record ``n`` stores ``hash_n = sha256(hash_{n-1}
|| canonical JSON of record n without its hash)``, starting from ``sha256("armature:" + run_id)``.
Editing, deleting, inserting or reordering any record breaks the chain at that record, which
``armature traces verify`` reports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CHAIN_MEMO",
    "FAILURE_TAXONOMY",
    "LOW_QUALITY_THRESHOLD",
    "ChainBreak",
    "RecordKind",
    "TraceBatch",
    "TraceChain",
    "TraceRecord",
    "chain_hash",
    "genesis_hash",
    "verify_chain",
]

#: ``memory``: cross-run memory loaded or captured (or why not); ``evaluation``: a stage's
#: ``evaluate`` criteria judged after the run; ``critique``: the experience critic's score
#: (0–10) and evidence for a stage, after the run; ``context``: a tool loop's window compacted
#: (and the summary call that did it, whose tokens and cost the run's totals count);
#: ``retrieval``: a search of a knowledge collection (a stage's ``retrieve:`` or a ``retrieve``
#: tool call) and each passage's reference, hash and score.
RecordKind = Literal[
    "run_start",
    "attempt",
    "stage",
    "gate",
    "tool",
    "memory",
    "evaluation",
    "critique",
    "context",
    "retrieval",
    "run_end",
]

#: One code per failed or degraded stage, assigned from facts in the trace.
FAILURE_TAXONOMY: dict[str, str] = {
    "output_invalid": "the output did not parse or did not satisfy the stage's schema",
    "template_error": "a template or expression of the spec failed to render (an undefined "
    "name, or an error in its own code such as a division by zero): fix the spec",
    "tool_error": "a tool call failed (bad arguments, non-zero exit, exception)",
    "timeout": "an activity or a gate ran out of time",
    "low_quality": "a judge scored the output below the threshold (0.5)",
    "low_confidence": "the output's confidence was below the stage's min_confidence",
    "gate_rejected": "a person rejected the stage at its gate",
    "policy_blocked": "the safety policy blocked a tool call, or a person refused it",
    "provider_error": "the model provider failed (HTTP error, auth, rate limit)",
    "dependency_failed": "not run because a stage it depends on failed",
    "cancelled": "cancelled because a sibling failed or the run was cancelled",
    "knowledge_error": "a stage's retrieve: found nothing to search (its collection has "
    "nothing indexed) or could not search: index the documents (armature knowledge add)",
}
LOW_QUALITY_THRESHOLD = 0.5
#: The run's memo key its workflow updates after each flush: ``{"length", "head", "store",
#: "final"}`` of the records stored so far — the chain anchored in Temporal, outside the
#: database it protects (``armature traces verify`` reads it).
CHAIN_MEMO = "armature_chain"


class TraceRecord(BaseModel):
    """One link of a run's chain. Fields other than ``hash`` are covered by the hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    seq: int
    kind: RecordKind
    spec_name: str
    spec_hash: str
    policy_version: str
    recorded_at: str
    stage_id: str | None = None
    iteration: int = 0
    attempt: int = 0
    role: str | None = None
    role_type: str | None = None
    tier: str | None = None
    model: str | None = None
    arm_id: str | None = None
    decision_id: str | None = None
    inputs_hash: str | None = None
    inputs_provenance: dict[str, str] = Field(default_factory=dict)
    status: str | None = None
    output: Any = None
    output_valid: bool | None = None
    error_type: str | None = None
    error: str | None = None
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    escalated: bool = False
    judge_score: float | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    prev_hash: str
    hash: str = ""

    def content(self) -> dict[str, Any]:
        """What the hash covers: every field but ``hash``, as JSON-safe data."""
        return self.model_dump(mode="json", exclude={"hash"})

    def sealed(self) -> TraceRecord:
        """This record with its hash computed."""
        return self.model_copy(update={"hash": chain_hash(self.prev_hash, self.content())})


def genesis_hash(run_id: str) -> str:
    return hashlib.sha256(f"armature:{run_id}".encode()).hexdigest()


def chain_hash(prev_hash: str, content: dict[str, Any]) -> str:
    body = json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256((prev_hash + body).encode("utf-8")).hexdigest()


class ChainBreak(BaseModel):
    """The first place a run's chain does not hold."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    seq: int | None
    problem: Literal["edited", "deleted", "inserted", "reordered"]
    detail: str


def verify_chain(run_id: str, records: Iterable[TraceRecord]) -> ChainBreak | None:
    """Check one run's records, given in ``seq`` order. Returns the first break, or None.

    - a gap in ``seq`` is a deleted record;
    - a record whose hash no longer matches its content was edited — or reordered, when the
      hash matches the same content under another ``seq``;
    - a record whose ``prev_hash`` is not its predecessor's hash was inserted.
    """
    records = list(records)
    prev = genesis_hash(run_id)
    for expected_seq, record in enumerate(records):
        label = (
            f"record {record.seq} ({record.kind}{' ' + record.stage_id if record.stage_id else ''})"
        )
        if record.seq != expected_seq:
            return ChainBreak(
                run_id=run_id,
                seq=expected_seq,
                problem="deleted",
                detail=f"record {expected_seq} is missing: the chain jumps from "
                f"{expected_seq - 1} to {record.seq}",
            )
        if chain_hash(record.prev_hash, record.content()) != record.hash:
            for other in range(len(records) + 1):
                moved = {**record.content(), "seq": other}
                if other != record.seq and chain_hash(record.prev_hash, moved) == record.hash:
                    return ChainBreak(
                        run_id=run_id,
                        seq=record.seq,
                        problem="reordered",
                        detail=f"{label} was record {other}: records were renumbered or swapped",
                    )
            return ChainBreak(
                run_id=run_id,
                seq=record.seq,
                problem="edited",
                detail=f"{label} does not match its hash: its content was changed",
            )
        if record.prev_hash != prev:
            return ChainBreak(
                run_id=run_id,
                seq=record.seq,
                problem="inserted",
                detail=f"{label} does not follow record {expected_seq - 1}: it was "
                "inserted, or the record before it was replaced",
            )
        prev = record.hash
    return None


class TraceBatch(BaseModel):
    """Records sent from a workflow to the ``record_traces`` activity. With ``ack`` the
    activity answers ``{"stored": n, "store": store id}`` instead of ``n``: the workflow puts
    the store id in its memo beside the chain head."""

    records: list[TraceRecord] = Field(default_factory=list)
    ack: bool = False


class TraceChain:
    """Builds one run's chain inside its workflow: assigns ``seq``, links and seals each record,
    and buffers them until the workflow flushes a batch to the store.

    Deterministic (no clock of its own: the caller passes ``recorded_at``), so it is safe in
    workflow code and rebuilt identically on replay.
    """

    def __init__(self, run_id: str, spec_name: str, spec_hash: str, policy_version: str) -> None:
        self.run_id = run_id
        self._common: dict[str, Any] = {
            "run_id": run_id,
            "spec_name": spec_name,
            "spec_hash": spec_hash,
            "policy_version": policy_version,
        }
        self.head = genesis_hash(run_id)
        self.seq = 0
        self.pending: list[TraceRecord] = []

    def add(self, kind: RecordKind, recorded_at: str, **fields: Any) -> TraceRecord:
        record = TraceRecord(
            kind=kind,
            seq=self.seq,
            recorded_at=recorded_at,
            prev_hash=self.head,
            **self._common,
            **fields,
        ).sealed()
        self.head = record.hash
        self.seq += 1
        self.pending.append(record)
        return record

    def take(self) -> list[TraceRecord]:
        """The buffered records, emptying the buffer."""
        batch, self.pending = self.pending, []
        return batch
