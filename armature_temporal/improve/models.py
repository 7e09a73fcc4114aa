"""The improvement loop's data: what it changes in a spec, what it measured, what it proposes.

Pure pydantic models, shared by the core (diagnosis, proposals, verification), the activities,
the ImproveWorkflow (they travel through Temporal) and the trace store (proposals are kept).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from armature_temporal.improve.cases import CaseCheck, CaseSet
from armature_temporal.spec.compiler import Plan

__all__ = [
    "AppliedChange",
    "Candidate",
    "Diagnosis",
    "EditableField",
    "EffortInput",
    "ImproveInput",
    "ImproveResult",
    "ImproveRound",
    "Prepared",
    "Proposal",
    "RecordInput",
    "RoundEffort",
    "SearchMember",
    "SearchReport",
    "SettleInput",
    "Settled",
    "SpecChange",
    "StageStats",
    "StopReason",
    "Verification",
    "VerificationTest",
]

EditableField = Literal["description", "model_tier", "temperature", "max_tokens", "sources"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpecChange(_Model):
    """One edit to one stage's role: ``stages[id == stage].role.<field>`` from old to new; or,
    with ``stage`` ``knowledge`` and ``field`` ``sources``, the spec's ``knowledge.sources``
    (the enrichment loop: a document list from old to new)."""

    stage: str
    field: EditableField
    old: Any = None  # the value in the spec text now (None: not set there)
    new: Any
    why: str  # the evidence from the traces, in one sentence
    #: ``rules``: read off the diagnosis by improve/propose.py; ``refiner``: proposed by the
    #: LLM refiner (improve/refine.py), ``why`` is its rationale.
    origin: Literal["rules", "refiner"] = "rules"

    @property
    def surface(self) -> str:
        return f"{self.stage}.{self.field}"


class StageStats(_Model):
    """What one LLM stage's traces say, over the runs of one spec version."""

    stage: str
    runs: int  # runs in which the stage finished (completed or failed)
    attempts: int  # model attempts, all tiers
    invalid_rate: float  # share of attempts whose output did not parse / meet the schema
    escalation_rate: float  # share of runs in which the stage moved up a tier
    failure_rate: float  # share of runs in which the stage failed
    first_try_rate: float  # share of runs it completed on its first attempt, no escalation
    judge_score: float | None = None  # mean score judges gave this stage, where judged
    tiers: dict[str, int] = Field(default_factory=dict)  # attempts per tier
    finished_tiers: dict[str, int] = Field(default_factory=dict)  # tier that completed it
    error_types: dict[str, int] = Field(default_factory=dict)  # failure taxonomy counts
    truncated: int = 0  # attempts cut off by the token limit
    low_confidence_rate: float = 0.0  # share of valid attempts refused for low confidence
    mean_cost_usd: float = 0.0
    mean_latency_ms: float = 0.0


class Diagnosis(_Model):
    """A spec version's record, from the trace store."""

    spec_name: str
    spec_hash: str
    runs: int  # finished runs of this version (verification runs excluded)
    mean_hqs: float | None
    stages: list[StageStats]
    sample_inputs: list[dict[str, Any]]  # recent runs' inputs, newest first, deduplicated


class VerificationTest(_Model):
    """Which test decided a proposal, with its Holm figures (one family per round).

    ``superiority``: verified when the Holm-adjusted interval of the mean paired HQS gain lies
    above 0. ``non_inferiority`` (cost-saving changes only): verified when its low end is above
    ``-margin`` and the mean paired cost per run falls.
    """

    kind: Literal["superiority", "non_inferiority"]
    margin: float = 0.0  # HQS a non-inferiority test may lose; 0 for superiority
    m: int  # candidates tested in the round (the Holm family)
    holm_rank: int  # 1-based, by one-sided p-value
    alpha_adj: float  # 0.05 / (m - rank + 1)
    p_one_sided: float
    adj_ci_low: float  # the (1 - alpha_adj) interval of the mean paired HQS difference
    adj_ci_high: float
    baseline_cost: float | None = None  # mean cost per verification run, in cost_unit
    candidate_cost: float | None = None
    cost_unit: str = ""  # "usd", or "tier units" (see activities/improve.py)
    #: The spec's cases (self_improvement.cases): pass rates, and the cases fixed and broken
    #: beyond their noise (improve/cases.py); None: the spec names no cases file.
    cases: CaseCheck | None = None

    @model_serializer(mode="wrap")
    def _without_unset_cases(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A decision without cases dumps as before they existed: stored proposals' MACs cover
        # the dump (store/signed_rows.py), so older rows still check.
        data: dict[str, Any] = handler(self)
        if data.get("cases") is None:
            data.pop("cases", None)
        return data


class Proposal(_Model):
    """A spec change set, verified by running both versions on the same inputs."""

    id: str
    spec_name: str
    improve_run_id: str
    created_at: str
    base_spec_hash: str
    candidate_spec_hash: str
    changes: list[SpecChange]
    baseline_hqs: list[float]  # one per verification input, same order as candidate_hqs
    candidate_hqs: list[float]
    delta: float  # mean(candidate - baseline)
    ci_low: float  # 95% interval of the mean paired difference
    ci_high: float
    verdict: Literal["verified", "not_better", "failed"]
    detail: str  # one sentence: why this verdict
    diff: str  # unified diff of the spec text
    spec_text: str  # the improved spec text, to write back with `armature proposals apply`
    base_spec_text: str  # the text it was made from (apply refuses if the file differs)
    status: Literal["proposed", "applied", "dismissed"] = "proposed"
    # Falsifiable: failure codes (``kind:stage``, see improve/predict.py) it should fix and
    # may cause, and those of the version it was made from; the round after it is applied
    # checks them.
    predicted_fixes: list[str] = Field(default_factory=list)
    predicted_regressions: list[str] = Field(default_factory=list)
    base_failures: list[str] = Field(default_factory=list)
    #: ``auto``: only known-safe fields change (it may apply itself under
    #: ``self_improvement.auto_apply``); ``review``: a person applies it (improve/lanes.py).
    lane: Literal["auto", "review"] = "review"
    lane_reasons: list[str] = Field(default_factory=list)  # one per changed field
    test: VerificationTest | None = None  # None: stored before Holm / non-inferiority


class Verification(_Model):
    """The last applied proposal's predictions, checked against its version's diagnosis."""

    proposal_id: str | None = None  # None: nothing applied (drift only)
    spec_hash: str
    runs: int
    current_failures: list[str]
    verified_fixes: list[str] = Field(default_factory=list)
    missed_predictions: list[str] = Field(default_factory=list)
    unexpected_regressions: list[str] = Field(default_factory=list)
    regressed: list[str] = Field(default_factory=list)  # failing again, once verified fixed
    drift: float = 0.0  # len(regressed) / max(len(current_failures), 1)


class AppliedChange(_Model):
    """A proposal written to a spec file (``armature proposals apply``)."""

    proposal_id: str
    spec_name: str
    spec_hash: str  # the version it made (the proposal's candidate_spec_hash)
    base_spec_hash: str
    applied_at: str
    path: str


class Settled(_Model):
    """What the end of a round did with its verified proposals (``improve_settle``)."""

    applied: str | None = None  # the auto-lane proposal written to the spec file
    pending: str | None = None  # the review-lane proposal written to <spec>.pending.yaml
    pending_path: str | None = None
    notes: list[str] = Field(default_factory=list)  # why something was not written


#: Why a round stopped: ``converged`` (mean HQS at target_hqs, no drift), ``no_candidate``
#: (nothing to propose on the editable surfaces), ``too_few_traces`` (runs or distinct inputs
#: short of what a diagnosis or a verification needs), ``budget`` (it verified what its limits
#: allowed and left proposals out: ``max_candidates``, the refiner's K), ``tried_all`` (every
#: proposal found was verified).
StopReason = Literal["converged", "no_candidate", "too_few_traces", "budget", "tried_all"]

#: What a round says of a held-out set: improve rounds have none.
NO_HELD_OUT = (
    "none: verification reruns inputs sampled from the recent runs the diagnosis (and the "
    "refiner's transcripts) came from; no input is held out of proposing"
)


class RoundEffort(_Model):
    """What one improve/optimize round spent, and why it stopped (honest effort).

    Counted from what the round did: ``runs`` and ``tokens`` from the trace store (every run
    whose id lies under the round's workflow id, and those runs' model calls: attempts,
    evaluations, critiques, context summaries), plus the refiner's own call.
    """

    proposals_tried: int = 0  # candidates run on paired verification runs (a combination counts)
    proposals_left_out: int = 0  # found, but over the round's limits (max_candidates, K)
    runs: int = 0  # verification runs the round started
    tokens: int = 0  # prompt + completion tokens of those runs' model calls and the refiner's
    refiner_tokens: int = 0  # of which the refiner's call
    stop: StopReason = "tried_all"
    stop_detail: str = ""
    held_out: str = NO_HELD_OUT
    held_out_hqs: float | None = None  # None: no held-out set
    refiner_tier: str | None = None  # None: the refiner did not run this round
    judge_tiers: list[str] = Field(default_factory=list)  # tiers of the spec's judge stages
    #: The refiner's tier is a judge stage's tier: the model that proposed grades its proposals.
    same_tier: bool = False
    judge_note: str = ""  # what verification did about it (it cannot swap the spec's judges)


#: Why a frontier search ended (improve/frontier.py).
SearchStopReason = Literal["budget", "no_candidate", "converged"]


class SearchMember(_Model):
    """One version in the search: its changes to the current spec and its case pass rates
    (None: not graded, counted as 0)."""

    id: str
    changes: list[SpecChange] = Field(default_factory=list)
    scores: list[float | None]
    parents: list[str] = Field(default_factory=list)
    origin: Literal["current", "proposed", "reflected", "merged"] = "proposed"

    @property
    def mean(self) -> float:
        return sum(s or 0.0 for s in self.scores) / len(self.scores) if self.scores else 0.0


class SearchReport(_Model):
    """What a round's frontier search did (kept in the round's result)."""

    budget_runs: int
    spent_runs: int
    tried: int  # candidates the search made and ran (reflected and merged)
    stop_reason: SearchStopReason
    cases: list[str]
    members: list[SearchMember]  # every version scored, the current spec first
    frontier: list[str]  # the ids of the frontier's members at the end
    notes: list[str] = Field(default_factory=list)


class ImproveResult(_Model):
    status: Literal["proposed", "nothing_better", "at_target", "too_few_traces", "no_candidates"]
    detail: str
    diagnosis: Diagnosis | None = None
    proposals: list[Proposal] = Field(default_factory=list)
    verification: Verification | None = None
    settled: Settled | None = None  # None: a round from before review lanes
    notes: list[str] = Field(default_factory=list)  # e.g. refiner proposals dropped, and why
    effort: RoundEffort | None = None  # None: a round from before effort reports
    search: SearchReport | None = None  # the frontier search (self_improvement.search_runs)


class ImproveRound(_Model):
    """One round as ``armature improve history`` shows it."""

    id: str  # the round's workflow id (its proposals' improve_run_id)
    spec_name: str
    spec_hash: str
    created_at: str
    status: str
    mean_hqs: float | None = None
    runs: int = 0
    verification: Verification | None = None
    drift: float | None = None
    effort: RoundEffort | None = None  # None: a round stored before effort reports


class SettleInput(_Model):
    """``improve_settle``: the round's proposals, and the spec file they were made from."""

    spec_path: str
    spec_text: str
    proposals: list[Proposal]


class ImproveInput(_Model):
    """Start one improvement round (``armature improve`` or the spec's schedule)."""

    spec_text: str
    spec_path: str  # for messages and subagent paths; the workflow itself never reads it
    verify_runs: int | None = None  # None: the spec's self_improvement.verify_runs
    max_candidates: int = 3
    #: ``spec``: the LLM refiner proposes too when self_improvement.refiner_tier is set;
    #: ``only``: the refiner alone (``armature optimize``), on the highest tier if none is set.
    refiner: Literal["spec", "only"] = "spec"
    refiner_proposals: int | None = None  # None: self_improvement.refiner_proposals


class Candidate(_Model):
    """One change, the spec text and plan it makes, and the diff."""

    change: SpecChange
    spec_text: str
    plan: Plan
    diff: str
    # The refiner's own predictions (failure codes); None: read them off the change's field.
    predicted_fixes: list[str] | None = None
    predicted_regressions: list[str] | None = None
    #: Changes it carries before ``change`` (a frontier search's child or merge: its parent's
    #: changes); the proposal lists them all.
    ancestry: list[SpecChange] = Field(default_factory=list)


class Prepared(_Model):
    """What ``improve_prepare`` found: either a reason to stop, or what to verify."""

    stop: ImproveResult | None = None
    plan: Plan | None = None
    diagnosis: Diagnosis | None = None
    candidates: list[Candidate] = Field(default_factory=list)
    inputs: list[dict[str, Any]] = Field(default_factory=list)  # one verification run each
    verification: Verification | None = None
    notes: list[str] = Field(default_factory=list)
    effort: RoundEffort | None = None  # so far: the refiner's call, proposals, the judge check
    cases: CaseSet | None = None  # the spec's cases, when it names a file (improve/cases.py)


class EffortInput(_Model):
    """``improve_effort``: count what a round's verification spent, from the store."""

    round_id: str
    effort: RoundEffort
    proposals_tried: int


class RecordInput(_Model):
    """``improve_record``: the verification runs' scores, to turn into proposals."""

    improve_run_id: str
    created_at: str
    spec_text: str
    prepared: Prepared
    spec_path: str = ""  # for classifying changes (subagent paths resolve beside it)
    baseline_runs: list[str]
    candidate_runs: list[list[str]]  # per candidate, aligned with baseline_runs
    #: With ``prepared.cases``: each case run's verdict (True pass, False fail, None grader
    #: error), by version (the current spec first, then each candidate), case and repeat.
    case_verdicts: list[list[list[bool | None]]] = Field(default_factory=list)
