"""The ledger's anchor in Temporal: what the store-wide ledger's head was, kept where the
database's writer cannot reach (pure: no I/O, safe inside a workflow).

Each run's chain head lives in its workflow's memo; that anchor is gone once Temporal forgets
the run (the namespace's retention, or a deleted workflow). The ledger lists every run's start
and end, hash-chained, so its head at entry ``n`` commits to entries ``0..n``, run ends (with
their chain heads and record counts) included. The workers send each new head to one
long-lived ``LedgerAnchor`` workflow per database (its id derives from where the database is,
never from anything stored in it): verify compares the database's ledger with the heads
Temporal received, so the newest runs deleted (with their ledger entries) or the ledger begun
anew under another store id are caught after their workflows are gone.

:func:`advance` folds one head into the anchor's state. The workflow applies it to each signal;
``armature traces verify`` applies it to the signals in the workflow's history, so it reads the
anchor without a worker.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CONTINUE_AFTER",
    "HEAD_SIGNAL",
    "LEDGER_ANCHOR_QUEUE",
    "LEDGER_ANCHOR_WORKFLOW",
    "MAX_CHECKPOINTS",
    "MAX_CONFLICTS",
    "RECENT_CHECKPOINTS",
    "Checkpoint",
    "Conflict",
    "LedgerAnchorState",
    "LedgerHead",
    "advance",
    "ledger_anchor_id",
]

LEDGER_ANCHOR_WORKFLOW = "LedgerAnchor"
#: One queue for every store's anchor workflow: any main worker runs any of them (they call no
#: activity), so an anchor never waits for the workers of the queue that started it.
LEDGER_ANCHOR_QUEUE = "armature-ledger-anchors"
HEAD_SIGNAL = "head"
#: Heads one run of the anchor workflow folds in before it continues as new with its state.
CONTINUE_AFTER = 250
#: Checkpoints kept: the newest RECENT_CHECKPOINTS, and older ones thinned to MAX_CHECKPOINTS.
RECENT_CHECKPOINTS = 16
MAX_CHECKPOINTS = 64
#: Conflicting heads kept (all are counted).
MAX_CONFLICTS = 8


def ledger_anchor_id(database: str) -> str:
    """The anchor workflow's id for the database at ``database`` (its identity, without
    credentials): derived from where the ledger lives, so a ledger begun anew in the same
    database meets the anchor of the old one."""
    return "armature-ledger-" + hashlib.sha256(database.encode("utf-8")).hexdigest()[:24]


class LedgerHead(BaseModel):
    """A ledger's newest entry, as a worker appended it: sent to the anchor workflow."""

    model_config = ConfigDict(frozen=True)

    store_id: str  # the store id the ledger's genesis entry names
    genesis: str  # the hash of entry 0
    seq: int
    hash: str
    recorded_at: str  # the entry's time (the database's word for it)
    runs: int | None = None  # runs started up to this entry


class Checkpoint(BaseModel):
    """A head the anchor took, and when Temporal received it."""

    model_config = ConfigDict(frozen=True)

    seq: int
    hash: str
    recorded_at: str
    received_at: str
    runs: int | None = None


class Conflict(BaseModel):
    """A head the anchor refused: another store or genesis, or another hash for an entry."""

    model_config = ConfigDict(frozen=True)

    why: Literal["other store", "other genesis", "other hash"]
    head: LedgerHead
    received_at: str


class LedgerAnchorState(BaseModel):
    """What Temporal holds for one database's ledger (the anchor workflow's input, carried
    across continue-as-new)."""

    database: str
    key_id: str  # the trace key that MACs the ledger (its public id)
    store_id: str
    genesis: str
    head: Checkpoint | None = None
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    conflicts: list[Conflict] = Field(default_factory=list)
    conflicts_seen: int = 0
    heads_seen: int = 0
    #: Heads one run folds in before continuing as new (tests make it small).
    continue_after: int = CONTINUE_AFTER


def advance(state: LedgerAnchorState, head: LedgerHead, received_at: str) -> LedgerAnchorState:
    """``state`` with ``head`` folded in (received by Temporal at ``received_at``).

    A head of another store or genesis, or another hash for an entry already taken, is kept as
    a conflict and changes nothing else; an older head than the newest arriving late changes
    nothing (the newer head commits to it); a newer one becomes the head and a checkpoint.
    """
    seen = state.heads_seen + 1
    if head.store_id != state.store_id:
        return _conflict(state, "other store", head, received_at, seen)
    if head.genesis != state.genesis:
        return _conflict(state, "other genesis", head, received_at, seen)
    known = next((c for c in state.checkpoints if c.seq == head.seq), None)
    if known is not None and known.hash != head.hash:
        return _conflict(state, "other hash", head, received_at, seen)
    if known is not None or (state.head is not None and head.seq < state.head.seq):
        return state.model_copy(update={"heads_seen": seen})
    mark = Checkpoint(
        seq=head.seq,
        hash=head.hash,
        recorded_at=head.recorded_at,
        received_at=received_at,
        runs=head.runs,
    )
    return state.model_copy(
        update={"head": mark, "checkpoints": thin([*state.checkpoints, mark]), "heads_seen": seen}
    )


def thin(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """At most MAX_CHECKPOINTS: the first and the newest RECENT_CHECKPOINTS kept, every other
    one between them dropped until the rest fit."""
    marks = list(checkpoints)
    while len(marks) > MAX_CHECKPOINTS:
        middle = marks[1:-RECENT_CHECKPOINTS]
        marks = [marks[0], *middle[::2], *marks[-RECENT_CHECKPOINTS:]]
    return marks


def _conflict(
    state: LedgerAnchorState,
    why: Literal["other store", "other genesis", "other hash"],
    head: LedgerHead,
    received_at: str,
    seen: int,
) -> LedgerAnchorState:
    kept = [*state.conflicts, Conflict(why=why, head=head, received_at=received_at)]
    return state.model_copy(
        update={
            "conflicts": kept[-MAX_CONFLICTS:],
            "conflicts_seen": state.conflicts_seen + 1,
            "heads_seen": seen,
        }
    )
