"""What an eval produces: each run's verdicts, each case's figures, the whole eval, and a
comparison of two specs on the same cases."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.evals.assertions import Verdict
from armature_temporal.evals.stats import flaky, pass_at_k

__all__ = ["CaseResult", "CaseRun", "Comparison", "EvalResult", "Status"]

Status = Literal["pass", "fail", "error"]


class CaseRun(BaseModel):
    """One case run once (one repeat): the run, and every assertion's verdict on it."""

    model_config = ConfigDict(frozen=True)

    case: int
    repeat: int
    run_id: str | None = None
    state: str
    status: Status
    #: The first failing (or erroring) assertion's reason, or why the run did not complete.
    reason: str = ""
    verdicts: list[Verdict] = Field(default_factory=list)


class CaseResult(BaseModel):
    """One case over its repeats."""

    model_config = ConfigDict(frozen=True)

    index: int
    description: str
    where: str = ""
    runs: list[CaseRun]

    @property
    def graded(self) -> list[bool]:
        """Pass (True) or fail (False) of each run a grader decided (errors left out)."""
        return [r.status == "pass" for r in self.runs if r.status != "error"]

    @property
    def status(self) -> Status:
        """``error`` when any run's grading erred, else ``pass`` when every run passed."""
        if any(r.status == "error" for r in self.runs):
            return "error"
        return "pass" if all(self.graded) else "fail"

    @property
    def pass_rate(self) -> float | None:
        graded = self.graded
        return sum(graded) / len(graded) if graded else None

    @property
    def flaky(self) -> bool:
        return flaky(self.graded)

    def pass_at(self, k: int) -> float | None:
        """pass@k over the graded runs; None when fewer than ``k`` were graded."""
        graded = self.graded
        return pass_at_k(len(graded), sum(graded), k) if len(graded) >= k else None

    @property
    def reason(self) -> str:
        """The first erroring run's reason (a case in error), else the first failing one's."""
        for wanted in ("error", "fail"):
            for run in self.runs:
                if run.status == wanted:
                    return run.reason
        return ""

    def summary(self, repeat: int) -> dict[str, object]:
        return {
            "index": self.index,
            "description": self.description,
            "where": self.where,
            "status": self.status,
            "pass_rate": self.pass_rate,
            "pass_at_1": self.pass_at(1),
            f"pass_at_{repeat}": self.pass_at(repeat),
            "flaky": self.flaky,
            "reason": self.reason,
            "runs": [r.model_dump(mode="json") for r in self.runs],
        }


class EvalResult(BaseModel):
    """One spec's eval on one cases file."""

    model_config = ConfigDict(frozen=True)

    id: str
    spec_name: str
    spec_version: str
    spec_hash: str
    cases_file: str
    repeat: int
    created_at: str
    cases: list[CaseResult]

    def counts(self) -> dict[str, int]:
        statuses = [c.status for c in self.cases]
        return {s: statuses.count(s) for s in ("pass", "fail", "error")}

    @property
    def pass_rate(self) -> float | None:
        """Share of graded runs that passed, over every case."""
        graded = [g for c in self.cases for g in c.graded]
        return sum(graded) / len(graded) if graded else None

    @property
    def flaky(self) -> list[str]:
        return [c.description for c in self.cases if c.flaky]

    def summary(self) -> dict[str, object]:
        """The whole result as JSON-ready data (what ``--json`` prints and the store keeps)."""
        return {
            "id": self.id,
            "spec_name": self.spec_name,
            "spec_version": self.spec_version,
            "spec_hash": self.spec_hash,
            "cases_file": self.cases_file,
            "repeat": self.repeat,
            "created_at": self.created_at,
            "counts": self.counts(),
            "pass_rate": self.pass_rate,
            "flaky": self.flaky,
            "cases": [c.summary(self.repeat) for c in self.cases],
        }


class CaseChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int
    description: str
    base: float | None
    other: float | None
    change: Literal["win", "loss", "same", "not compared"]


class Comparison(BaseModel):
    """``--compare``: the other spec against the base on the same cases and noise."""

    model_config = ConfigDict(frozen=True)

    base: str
    other: str
    cases: list[CaseChange]
    #: Mean pass-rate difference (other − base) over the compared cases and its 95% interval.
    mean: float
    low: float
    high: float
    pairs: int

    def counts(self) -> dict[str, int]:
        changes = [c.change for c in self.cases]
        return {k: changes.count(k) for k in ("win", "loss", "same", "not compared")}


def compare(base: EvalResult, other: EvalResult) -> Comparison:
    """Per-case wins and losses of ``other`` over ``base`` (by pass rate) and the paired
    interval of the pass-rate difference over the cases both graded."""
    from armature_temporal.evals.stats import paired_difference

    rows = []
    pairs_base: list[float] = []
    pairs_other: list[float] = []
    for b, o in zip(base.cases, other.cases, strict=True):
        rb, ro = b.pass_rate, o.pass_rate
        if rb is None or ro is None:
            change: Literal["win", "loss", "same", "not compared"] = "not compared"
        else:
            change = "win" if ro > rb else "loss" if ro < rb else "same"
            pairs_base.append(rb)
            pairs_other.append(ro)
        rows.append(
            CaseChange(index=b.index, description=b.description, base=rb, other=ro, change=change)
        )
    mean, low, high = paired_difference(pairs_base, pairs_other)
    return Comparison(
        base=f"{base.spec_name} v{base.spec_version} ({base.spec_hash[:12]})",
        other=f"{other.spec_name} v{other.spec_version} ({other.spec_hash[:12]})",
        cases=rows,
        mean=mean,
        low=low,
        high=high,
        pairs=len(pairs_base),
    )
