"""The spec's cases in the improvement loop (improve/cases.py, decide.gate_cases): a case
broken beyond its noise stops a verified change; fixed and broken are listed; and the spec's
self_improvement.cases / search_runs fields are checked when the spec loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.improve.cases import case_check, noise, pass_rates
from armature_temporal.improve.decide import Judged, gate_cases
from armature_temporal.improve.models import VerificationTest
from armature_temporal.spec.loader import load_spec

NAMES = ["steady", "flaky", "fixed"]


def test_noise_is_zero_for_a_case_that_always_passes_and_widest_at_one_half() -> None:
    assert noise(1.0, 3) == 0.0 and noise(0.0, 3) == 0.0
    assert noise(0.5, 4) == pytest.approx(0.5)
    assert noise(0.5, 16) < noise(0.5, 4)


def test_pass_rates_leave_grader_errors_out() -> None:
    assert pass_rates([[True, None, False], [None, None]]) == [0.5, None]


def test_a_steady_pass_lost_once_is_broken_a_flaky_case_moving_within_its_noise_is_not() -> None:
    base = [[True, True, True], [True, False, True], [False, False, False]]
    cand = [[True, False, True], [False, False, True], [True, True, True]]
    check = case_check("c.yaml", NAMES, base, cand)
    # steady: 1 → 2/3 with noise 0: broken. flaky: 2/3 → 1/3 is inside 2·sqrt(2/9/3) ≈ 0.54.
    assert check.broken == ["steady"]
    assert check.fixed == ["fixed"]
    assert check.base_rates[0] == 1.0 and check.candidate_rates[2] == 1.0


def test_a_flaky_case_lost_entirely_is_broken() -> None:
    check = case_check("c.yaml", ["f"], [[True, True, False]], [[False, False, False]])
    assert check.broken == ["f"]


def _judged(verdict: str) -> Judged:
    test = VerificationTest(
        kind="superiority",
        m=1,
        holm_rank=1,
        alpha_adj=0.05,
        p_one_sided=0.01,
        adj_ci_low=0.1,
        adj_ci_high=0.3,
    )
    return Judged(
        verdict=verdict,  # type: ignore[arg-type]
        detail="superiority test: above 0",
        test=test,
        baseline_hqs=[0.5, 0.5],
        candidate_hqs=[0.7, 0.7],
        delta=0.2,
        ci_low=0.1,
        ci_high=0.3,
    )


def test_gate_turns_a_verified_change_that_breaks_a_case_into_not_better() -> None:
    broke = case_check("c.yaml", ["steady"], [[True, True, True]], [[True, False, True]])
    clean = case_check("c.yaml", ["steady"], [[False, False, False]], [[True, True, True]])
    gated = gate_cases(
        [_judged("verified"), _judged("verified"), _judged("verified")], [broke, clean, None]
    )
    assert gated[0].verdict == "not_better"
    assert "breaks 1 of the spec's cases" in gated[0].detail and "['steady']" in gated[0].detail
    assert gated[0].test.cases == broke
    assert gated[1].verdict == "verified" and gated[1].test.cases is not None
    assert gated[1].test.cases.fixed == ["steady"] and "cases fixed ['steady']" in gated[1].detail
    assert gated[2] == _judged("verified")  # no cases: the decision as it was


def test_a_decision_without_cases_dumps_as_before_so_stored_macs_still_check() -> None:
    dumped = _judged("verified").test.model_dump(mode="json")
    assert "cases" not in dumped
    with_cases = gate_cases(
        [_judged("verified")], [case_check("c.yaml", ["a"], [[True]], [[True]])]
    )[0].test
    assert with_cases.model_dump(mode="json")["cases"]["fixed"] == []
    assert VerificationTest.model_validate(with_cases.model_dump(mode="json")) == with_cases


SPEC = """\
name: t
model_tiers:
  small: {provider: simulate}
stages:
  - id: a
    role: {name: A, model_tier: small, description: hi}
self_improvement:
  editable_surfaces: [a.description]
"""


def _load(tmp_path: Path, extra: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SPEC + extra)
    load_spec(path)


def test_cases_field_names_a_missing_file_with_the_path_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        _load(tmp_path, "  cases: evals/nope.cases.yaml\n")
    text = str(err.value)
    assert "self_improvement.cases" in text and "evals/nope.cases.yaml" in text
    assert "does not exist" in text and "relative to the spec's folder" in text


def test_cases_field_reports_a_bad_cases_file_with_its_own_error(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("tests:\n  - vars: {}\n    assert: [{type: bogus}]\n")
    with pytest.raises(SpecError) as err:
        _load(tmp_path, "  cases: c.yaml\n")
    assert "not a valid cases file" in str(err.value) and "'bogus'" in str(err.value)


def test_cases_field_outside_the_spec_folder_is_refused(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (tmp_path / "c.yaml").write_text("tests:\n  - vars: {}\n    assert: [{type: is-json}]\n")
    path = inner / "s.yaml"
    path.write_text(SPEC + "  cases: ../c.yaml\n")
    with pytest.raises(SpecError, match="outside the spec's folder"):
        load_spec(path)


def test_search_runs_without_cases_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        _load(tmp_path, "  search_runs: 30\n")
    assert "self_improvement.search_runs" in str(err.value)
    assert "set self_improvement.cases" in str(err.value)


def test_a_valid_cases_file_loads_and_leaves_other_specs_hashes_alone(tmp_path: Path) -> None:
    from armature_temporal.spec.compiler import compile_spec

    (tmp_path / "c.yaml").write_text("tests:\n  - vars: {}\n    assert: [{type: is-json}]\n")
    path = tmp_path / "s.yaml"
    path.write_text(SPEC)
    plain = compile_spec(load_spec(path))
    path.write_text(SPEC + "  cases: c.yaml\n")
    cased = compile_spec(load_spec(path))
    assert cased.self_improvement is not None and cased.self_improvement.cases == "c.yaml"
    assert plain.spec_hash != cased.spec_hash


def test_search_runs_without_a_refiner_tier_warns_that_only_optimize_searches(
    tmp_path: Path,
) -> None:
    (tmp_path / "c.yaml").write_text("tests:\n  - vars: {}\n    assert: [{type: is-json}]\n")
    path = tmp_path / "s.yaml"
    path.write_text(SPEC + "  cases: c.yaml\n  search_runs: 20\n")
    warned = [w for w in load_spec(path).warnings if "search_runs" in str(w)]
    assert len(warned) == 1 and "only `armature optimize` rounds search" in str(warned[0])
    path.write_text(
        SPEC.replace(
            "  small: {provider: simulate}\n",
            "  small: {provider: simulate}\n  big: {provider: simulate}\n",
        )
        + "  cases: c.yaml\n  search_runs: 20\n  refiner_tier: big\n"
    )
    assert not [w for w in load_spec(path).warnings if "search_runs" in str(w)]
