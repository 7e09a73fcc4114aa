"""One learning round's data (``armature learn``, the Learn schedule): what it distilled and
admitted, which promoted heuristics it retired because their stage is gone, which waiting or
promoted ones today's immune scan flagged when it screened them again, which heuristics it
replay-tested (quarantined ones, and promoted ones due for re-verification), and what memory CI
decided.

Pure pydantic models shared by the LearnWorkflow (they travel through Temporal), its
activities and the CLI.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.experience.verify import Decision
from armature_temporal.spec.compiler import Plan

__all__ = [
    "AdmittedLesson",
    "LearnInput",
    "LearnPrepared",
    "LearnRecordInput",
    "LearnResult",
    "LearnStatus",
    "Rescreened",
    "StaleRetirement",
]

LearnStatus = Literal["learned", "nothing_to_test", "too_few_traces", "no_experience", "disabled"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LearnInput(_Model):
    """Start one learning round."""

    spec_text: str
    spec_path: str  # for messages; the workflow never reads it
    verify_runs: int | None = None  # None: the spec's experience.verify_runs
    # heuristics replay-tested per round: quarantined ones, then promoted ones to re-verify
    max_tests: int = Field(3, ge=1, le=20)
    history: int = Field(100, ge=1, le=5000)  # newest runs read for trajectories


class AdmittedLesson(_Model):
    """A distilled lesson and what admission did with it."""

    heuristic_id: str
    stage_id: str | None
    text: str
    kind: str
    outcome: Literal["quarantined", "rejected", "merged"]
    merged_into: str | None = None
    findings: list[str] = Field(default_factory=list)
    pitfall_id: str | None = None


class Rescreened(_Model):
    """A heuristic today's immune scan flagged when the round screened the memory again before
    replaying anything: a quarantined one rejected, a promoted one retired (by ``scan``)."""

    heuristic_id: str
    text: str
    status: Literal["rejected", "retired"]
    findings: list[str] = Field(default_factory=list)


class StaleRetirement(_Model):
    """A promoted heuristic the round retired (by ``learn``) because the spec has no LLM
    stage of its ``stage_id`` any more."""

    heuristic_id: str
    stage_id: str
    reason: str


class LearnPrepared(_Model):
    """What ``learn_prepare`` found: a reason to stop, or the replay tests to run."""

    stop: LearnResult | None = None
    plan: Plan | None = None
    admitted: list[AdmittedLesson] = Field(default_factory=list)
    baseline: list[str] = Field(default_factory=list)  # promoted heuristic ids
    tests: list[str] = Field(default_factory=list)  # quarantined heuristic ids to test
    # promoted ids due for re-verification (baseline without each vs the baseline)
    reverify: list[str] = Field(default_factory=list)
    last_verified: dict[str, str] = Field(default_factory=dict)  # reverify id -> when
    retired: list[StaleRetirement] = Field(default_factory=list)
    rescreened: list[Rescreened] = Field(default_factory=list)
    inputs: list[dict[str, Any]] = Field(default_factory=list)
    trajectories: dict[str, int] = Field(default_factory=dict)  # per stage, scored ones


class LearnRecordInput(_Model):
    learn_run_id: str
    prepared: LearnPrepared
    baseline_runs: list[str]
    candidate_runs: list[list[str]]  # per test, in the order of prepared.tests
    # per re-verification, the runs without it (order of prepared.reverify); empty: not run
    reverify_runs: list[list[str]] = Field(default_factory=list)


class LearnResult(_Model):
    """The round's outcome: ``decisions`` carry each tested heuristic's figures."""

    status: LearnStatus
    detail: str
    spec_name: str = ""
    admitted: list[AdmittedLesson] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    retired: list[StaleRetirement] = Field(default_factory=list)
    rescreened: list[Rescreened] = Field(default_factory=list)
    trajectories: dict[str, int] = Field(default_factory=dict)


LearnPrepared.model_rebuild()
