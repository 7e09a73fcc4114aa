"""What ``armature traces verify`` answers: the checks, their states, each run's verdict and
the store's (re-exported by :mod:`~armature_temporal.store.tamper`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.ledger_anchor import LedgerAnchorState

__all__ = [
    "CHECKS",
    "PROVEN_LEDGER",
    "Anchor",
    "Audit",
    "CheckName",
    "CheckState",
    "Finding",
    "LedgerAnchorCheck",
    "LedgerAnchorReading",
    "LedgerAnchorStatus",
    "RunAudit",
    "RunCheck",
    "Verdict",
]

#: The per-run checks, and ``ledger_anchor`` (the store's ledger against Temporal's copy).
CheckName = Literal["chain", "mac", "summary_mac", "ledger", "temporal_anchor", "ledger_anchor"]
#: ``unanchored``: Temporal's copy could not be read, so the check proved nothing.
CheckState = Literal["ok", "failed", "legacy", "skipped", "unanchored"]
CHECKS: tuple[CheckName, ...] = ("chain", "mac", "summary_mac", "ledger", "temporal_anchor")
#: ``intact``: every check held, Temporal's copy included. ``unanchored``: nothing failed, but
#: the run's chain could not be compared with Temporal's copy (its workflow's, or the ledger's).
#: ``unchecked``: nothing failed, but a check could not run (no trace key). ``legacy``: recorded
#: before MACs, chain-checked only. ``broken``: a check failed.
Verdict = Literal["intact", "unanchored", "unchecked", "legacy", "broken"]


class Anchor(BaseModel):
    """What a run's workflow recorded in its Temporal memo after its latest flush."""

    model_config = ConfigDict(frozen=True)

    length: int  # records stored so far
    head: str  # the hash of the last of them
    store: str = ""  # the store id they went to
    final: bool = False  # the run's last flush (nothing follows)


class LedgerAnchorReading(BaseModel):
    """What Temporal holds for this database's ledger: the anchor workflow's state folded from
    its history, or (``state`` None) why there is none."""

    workflow_id: str
    state: LedgerAnchorState | None = None
    absent: str | None = None


#: ``ok``: the database's ledger ends at the head Temporal holds. ``behind``: it has entries
#: past it, Temporal received that head less than a grace period ago (a head on its way).
#: ``stale``: the same, longer ago. ``empty``: no ledger and no anchor. ``unanchored``: no
#: anchor could be read. ``failed``: the ledger is not the one Temporal anchored.
LedgerAnchorStatus = Literal["ok", "behind", "stale", "empty", "unanchored", "failed"]
PROVEN_LEDGER: tuple[LedgerAnchorStatus, ...] = ("ok", "behind", "empty")


class LedgerAnchorCheck(BaseModel):
    """The store's ledger against its anchor in Temporal."""

    status: LedgerAnchorStatus
    detail: str
    workflow_id: str | None = None
    entries: int = 0  # in the database's ledger
    anchored_seq: int | None = None  # the newest entry Temporal holds
    anchored_at: str | None = None  # when Temporal received it
    behind: int = 0  # the database's entries past it


class Finding(BaseModel):
    """One check that failed (``run_id`` None: the ledger as a whole)."""

    model_config = ConfigDict(frozen=True)

    run_id: str | None
    check: CheckName
    seq: int | None = None
    problem: str
    detail: str


class RunAudit(BaseModel):
    """One run: each check's state, why any was skipped or unanchored, what failed."""

    run_id: str
    verdict: Verdict
    checks: dict[str, CheckState]
    skipped: dict[str, str] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    #: What in Temporal proved the run's chain: its workflow's memo, or the anchored ledger's
    #: record of its end (its workflow is gone). None: nothing did.
    anchored_by: Literal["workflow", "ledger"] | None = None


class Audit(BaseModel):
    """``armature traces verify``'s answer."""

    checked: int
    ok: bool  # nothing failed
    runs: list[RunAudit]
    store: list[Finding] = Field(default_factory=list)
    key_id: str | None = None
    temporal_skipped: str | None = None  # why Temporal was not read
    ledger_anchor: LedgerAnchorCheck

    @property
    def findings(self) -> list[Finding]:
        return [*self.store, *(f for run in self.runs for f in run.findings)]

    @property
    def unproven(self) -> list[RunAudit]:
        """Runs nothing failed for that are not proven either (unanchored or unchecked)."""
        return [r for r in self.runs if r.verdict in ("unanchored", "unchecked")]

    @property
    def proven(self) -> bool:
        """Nothing failed, every keyed run was compared with Temporal's copy, and so was the
        ledger."""
        return self.ok and not self.unproven and self.ledger_anchor.status in PROVEN_LEDGER


class RunCheck:
    """The checks of one run, collecting states, skips and findings."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.states: dict[str, CheckState] = {}
        self.skipped: dict[str, str] = {}
        self.findings: list[Finding] = []
        self.anchored_by: Literal["workflow", "ledger"] | None = None

    def fail(self, check: CheckName, problem: str, detail: str, seq: int | None = None) -> None:
        self.states[check] = "failed"
        self.findings.append(
            Finding(run_id=self.run_id, check=check, seq=seq, problem=problem, detail=detail)
        )

    def skip(self, check: CheckName, why: str) -> None:
        self.states[check] = "skipped"
        self.skipped[check] = why

    def unanchored(self, why: str) -> None:
        self.states["temporal_anchor"] = "unanchored"
        self.skipped["temporal_anchor"] = why

    def done(self) -> RunAudit:
        for check in CHECKS:
            self.states.setdefault(check, "ok")
        states = set(self.states.values())
        verdict: Verdict
        if "failed" in states:
            verdict = "broken"
        elif "legacy" in states:
            verdict = "legacy"
        elif "skipped" in states:
            verdict = "unchecked"
        elif "unanchored" in states:
            verdict = "unanchored"
        else:
            verdict = "intact"
        return RunAudit(
            run_id=self.run_id,
            verdict=verdict,
            checks={c: self.states[c] for c in CHECKS},
            skipped=self.skipped,
            findings=self.findings,
            anchored_by=self.anchored_by if verdict in ("intact", "broken") else None,
        )
