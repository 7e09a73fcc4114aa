"""What the heuristics memory keeps: a :class:`Heuristic` (a lesson learnt from earlier runs, or
written by a person) and the :class:`HeuristicEvent` log of its status changes.

A heuristic starts as a ``candidate``; the immune scan rejects it or it waits ``quarantined``
for memory CI (a paired replay test), which promotes or rejects it; a promoted one is retired
when its measured utility falls, when its stage leaves the spec, or when a later replay test
(re-verification) no longer shows it helps. Only promoted ones are ever put in a prompt (``trust``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.errors import ArmatureError

__all__ = [
    "HEURISTIC_KINDS",
    "HEURISTIC_STATUSES",
    "TERMINAL_STATUSES",
    "Heuristic",
    "HeuristicError",
    "HeuristicEvent",
    "HeuristicKind",
    "HeuristicStatus",
    "allowed_transitions",
    "heuristic_id",
    "normalise_text",
]

HeuristicKind = Literal["strategic", "procedural", "tool_tip"]
HeuristicStatus = Literal["candidate", "quarantined", "promoted", "rejected", "retired"]
HEURISTIC_KINDS: tuple[HeuristicKind, ...] = ("strategic", "procedural", "tool_tip")
HEURISTIC_STATUSES: tuple[HeuristicStatus, ...] = (
    "candidate",
    "quarantined",
    "promoted",
    "rejected",
    "retired",
)
#: Statuses nothing but a person moves a heuristic out of (rejected: never).
TERMINAL_STATUSES: frozenset[str] = frozenset({"rejected", "retired"})

# The automatic life cycle: scan, memory CI, utility.
_MOVES: dict[str, frozenset[str]] = {
    "candidate": frozenset({"quarantined", "rejected"}),
    "quarantined": frozenset({"promoted", "rejected"}),
    "promoted": frozenset({"retired"}),
    "rejected": frozenset(),
    "retired": frozenset(),
}
# What a person may do besides: promote a candidate, quarantined or retired one; reject or
# retire any that is not rejected or retired.
_PERSON_MOVES: dict[str, frozenset[str]] = {
    "candidate": frozenset({"promoted", "rejected", "retired"}),
    "quarantined": frozenset({"promoted", "rejected", "retired"}),
    "promoted": frozenset({"rejected", "retired"}),
    "rejected": frozenset(),
    "retired": frozenset({"promoted"}),
}


class HeuristicError(ArmatureError):
    """A heuristic cannot be found, or cannot move to the status asked for."""


def normalise_text(text: str) -> str:
    """``text`` lower-cased with its whitespace collapsed (what a heuristic's id hashes)."""
    return " ".join(text.split()).lower()


def heuristic_id(spec_name: str, stage_id: str | None, text: str) -> str:
    """``"h-"`` + the first 12 hex digits of sha256(spec_name/stage_id/normalised text); a
    spec-wide heuristic (``stage_id`` None) hashes ``*`` for the stage."""
    key = f"{spec_name}/{stage_id or '*'}/{normalise_text(text)}"
    return "h-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def allowed_transitions(status: str, by: str) -> frozenset[str]:
    """The statuses a heuristic in ``status`` may move to when ``by`` moves it (a person:
    ``by`` starts with ``person:``)."""
    moves = _MOVES.get(status, frozenset())
    if by.startswith("person:"):
        moves = moves | _PERSON_MOVES.get(status, frozenset())
    return moves


class Heuristic(BaseModel):
    """One lesson, for one stage of a spec (``stage_id`` None: every LLM stage of it)."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="'h-' + sha256(spec_name/stage_id/normalised text)[:12].")
    spec_name: str
    stage_id: str | None = Field(description="The stage it is for; None: every LLM stage.")
    kind: HeuristicKind
    text: str
    status: HeuristicStatus
    source: Literal["distilled", "person"]
    provenance: list[str] = Field(description="The run ids it came from.")
    embedding: list[float] | None = None
    embedding_model: str | None = None
    alpha: float = Field(1.0, description="Beta posterior of its utility: rewards + 1.")
    beta: float = Field(1.0, description="Beta posterior of its utility: misses + 1.")
    uses: int = 0
    last_used_at: str | None = None
    created_at: str
    updated_at: str

    @property
    def trust(self) -> float:
        """1.0 once promoted (by memory CI or by a person), else 0.0: never injected."""
        return 1.0 if self.status == "promoted" else 0.0

    @property
    def utility(self) -> float:
        """The posterior mean of its utility, ``alpha / (alpha + beta)``."""
        return self.alpha / (self.alpha + self.beta)


class HeuristicEvent(BaseModel):
    """One status change of a heuristic (its arrival too: ``from_status`` None), or a
    re-verification that kept it as it was (``from_status == to_status``)."""

    model_config = ConfigDict(frozen=True)

    heuristic_id: str
    at: str
    from_status: str | None
    to_status: str
    by: str = Field(description="'scan', 'memory-ci', 'utility', 'person:<name>', 'distiller'.")
    reason: str
    figures: dict[str, Any] = Field(default_factory=dict)
