"""A spec's own cases in the improvement loop (``self_improvement.cases``): which cases a
candidate fixed and which it broke, beyond each case's noise.

Every version of a round (the current spec and each candidate) runs case *c* repeat *r* with
the case's vars and ``replicate=r``, so under ``simulate`` the versions draw the same noise for
the same case × repeat (common random numbers, as the HQS verification pairs do).

**Beyond its noise** is a threshold derived from the case's repeats, not a per-case test: a
case is *broken* when the candidate's pass rate is below the current spec's by more than
:func:`noise` of the current spec's rate, ``2·sqrt(p(1−p)/R)`` (the normal 95% half-width of a
pass rate ``p`` over ``R`` repeats), and *fixed* when it is above by more than the same. Why
not a paired test per case (a sign test on the repeats where the two disagree): with the few
repeats a round can afford (3 by default) no one-sided test reaches 5% (three of three
disagreeing repeats give p = 0.125), so it would never block anything, and a regression gate
that cannot fire protects nobody. The threshold fires on a case that the current spec passes
every repeat and the candidate fails once (its noise is 0: a deterministic pass broken), and
lets a flaky case move within its own spread. It is the gate, not the evidence: a change is
verified only by the HQS test (paired 95% interval, Holm); the cases can only stop it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.spec.compiler import Plan

__all__ = [
    "DEFAULT_REPEAT",
    "CaseCheck",
    "CaseSet",
    "FailingCase",
    "GradeCasesInput",
    "GradedCases",
    "case_check",
    "load_case_set",
    "noise",
    "pass_rates",
]

#: Repeats per case in a round when the cases file sets no ``repeat:``.
DEFAULT_REPEAT = 3


class CaseSet(BaseModel):
    """What a round runs of the spec's cases file: each case's run inputs, ``repeat`` times."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str  # the cases file, resolved
    repeat: int = Field(ge=1)
    descriptions: list[str]
    inputs: list[dict[str, Any]]  # aligned with descriptions

    @property
    def runs(self) -> int:
        """Case runs one version costs."""
        return len(self.inputs) * self.repeat


class CaseCheck(BaseModel):
    """One candidate against the current spec on the cases: each case's pass rate on both
    sides (None: no repeat was graded, an error each time), and the cases it fixed and broke
    beyond their noise (descriptions). Stored with the decision
    (:class:`~armature_temporal.improve.models.VerificationTest` ``cases``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cases_file: str
    repeat: int
    base_rates: list[float | None]
    candidate_rates: list[float | None]
    fixed: list[str] = Field(default_factory=list)
    broken: list[str] = Field(default_factory=list)
    rule: str = "threshold: |Δ pass rate| > 2·sqrt(p(1−p)/R) of the current spec's rate p"


def pass_rates(verdicts: Sequence[Sequence[bool | None]]) -> list[float | None]:
    """Each case's pass rate over its graded repeats (None: a grader error, left out)."""
    rates: list[float | None] = []
    for repeats in verdicts:
        graded = [v for v in repeats if v is not None]
        rates.append(sum(graded) / len(graded) if graded else None)
    return rates


def noise(rate: float, repeats: int) -> float:
    """A case's noise: the normal 95% half-width of pass rate ``rate`` over ``repeats``
    (0 for a case that always or never passed)."""
    return 2.0 * math.sqrt(rate * (1.0 - rate) / max(repeats, 1))


def case_check(
    cases_file: str,
    descriptions: Sequence[str],
    base: Sequence[Sequence[bool | None]],
    candidate: Sequence[Sequence[bool | None]],
) -> CaseCheck:
    """Compare a candidate's case verdicts with the current spec's (per case, per repeat:
    True pass, False fail, None grader error), same cases and repeats."""
    b_rates, c_rates = pass_rates(base), pass_rates(candidate)
    fixed: list[str] = []
    broken: list[str] = []
    for name, b, c, reps in zip(descriptions, b_rates, c_rates, base, strict=True):
        if b is None or c is None:
            continue
        band = noise(b, len(reps))
        if c < b - band - 1e-9:
            broken.append(name)
        elif c > b + band + 1e-9:
            fixed.append(name)
    return CaseCheck(
        cases_file=cases_file,
        repeat=max((len(r) for r in base), default=0),
        base_rates=b_rates,
        candidate_rates=c_rates,
        fixed=fixed,
        broken=broken,
    )


def load_case_set(plan: Plan, spec_path: str) -> CaseSet | None:
    """The spec's cases as a round runs them (None: the spec names none).

    Raises:
        CasesError: the file cannot be read, or a case does not fit the spec (its message
            names the case, the field, the value and the spec's choices).
    """
    from armature_temporal.evals.cases import load_cases
    from armature_temporal.evals.runner import check_cases

    si = plan.self_improvement
    if si is None or si.cases is None:
        return None
    path = (Path(spec_path).parent / si.cases).resolve()
    cases = load_cases(path)
    inputs = check_cases(cases, plan)
    return CaseSet(
        path=str(path),
        repeat=cases.repeat or DEFAULT_REPEAT,
        descriptions=[c.description for c in cases.cases],
        inputs=inputs,
    )


class GradeCasesInput(BaseModel):
    """``improve_grade_cases``: one version's case runs, by case and repeat."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan: Plan
    cases: CaseSet
    run_ids: list[list[str]]


class FailingCase(BaseModel):
    """A case a version failed, as the reflective refiner is shown it: its inputs, the
    answer the version gave, and the failing assertion's reason (a judge's rationale for an
    llm-rubric)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    case: int
    description: str
    vars: dict[str, Any]
    stage: str | None = None  # the stage whose output was graded
    output: str = ""
    assertion: str = ""
    reason: str = ""
    run_id: str = ""


class GradedCases(BaseModel):
    """One version's case verdicts (by case, by repeat: True pass, False fail, None grader
    error) and its failing cases (each at most once, its first failing repeat)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verdicts: list[list[bool | None]]
    failing: list[FailingCase] = Field(default_factory=list)
