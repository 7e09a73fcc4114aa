"""`armature eval`'s pure core: the cases file, the graders, pass@k, JUnit XML, comparison."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import armature_temporal.evals as evals
from armature_temporal.evals.assertions import GradeContext, Verdict, grade
from armature_temporal.evals.cases import CasesError, load_cases
from armature_temporal.evals.junit import junit_xml
from armature_temporal.evals.models import CaseResult, CaseRun, EvalResult, compare
from armature_temporal.evals.runner import answer_stage, check_cases
from armature_temporal.evals.stats import flaky, pass_at_k
from armature_temporal.runtime.models import StageResult
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec

SPECS = Path(__file__).resolve().parents[2] / "specs"


def test_evals_package_exports_a_short_list() -> None:
    assert evals.__all__ == [
        "ASSERTION_TYPES",
        "CaseResult",
        "CasesError",
        "EvalResult",
        "load_cases",
        "pass_at_k",
        "run_eval",
    ]


def write(tmp_path: Path, text: str, name: str = "cases.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the cases file -----------------------------------------------------------------------------


def test_default_test_merges_vars_and_puts_its_asserts_first(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
repeat: 3
defaultTest:
  vars: {topic: rust, tone: dry}
  options: {stage: draft}
  assert: [{type: contains, value: a}]
tests:
  - vars: {topic: tides}
    assert: [{type: icontains, value: b}]
  - description: second
    stage: outline
""",
    )
    cases = load_cases(path)
    assert cases.repeat == 3
    first, second = cases.cases
    assert first.vars == {"topic": "tides", "tone": "dry"}
    assert [a.type for a in first.asserts] == ["contains", "icontains"]
    assert first.stage == "draft" and second.stage == "outline"
    assert first.description.startswith("case 1") and second.description == "second"
    assert first.where == f"{path}:7"  # the line of its `- `


def test_a_file_that_is_not_yaml_names_the_file_and_the_fix(tmp_path: Path) -> None:
    path = write(tmp_path, "tests: [\n  - {type: x\n")
    with pytest.raises(CasesError) as caught:
        load_cases(path)
    assert str(path) in str(caught.value) and "not valid YAML" in str(caught.value)
    assert "`tests:` list" in str(caught.value)


def test_a_file_without_tests_says_how_to_write_them(tmp_path: Path) -> None:
    path = write(tmp_path, "description: nothing here\n")
    with pytest.raises(CasesError) as caught:
        load_cases(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: tests:") and "write `tests:`" in message


def test_promptfoo_keys_without_meaning_here_say_what_to_do(tmp_path: Path) -> None:
    path = write(tmp_path, "prompts: [p.txt]\ntests:\n  - assert: [{type: contains, value: a}]\n")
    with pytest.raises(CasesError, match=r"cases.yaml:1: file.prompts: unknown key; Armature"):
        load_cases(path)


def test_an_unknown_assertion_type_lists_the_supported_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "tests:\n  - assert:\n      - {type: containz, value: a}\n")
    with pytest.raises(CasesError) as caught:
        load_cases(path)
    message = str(caught.value)
    assert f"{path}:3" in message and "'containz'" in message
    assert "did you mean 'contains'" in message and "'llm-rubric'" in message


def test_javascript_is_refused_with_the_python_way(tmp_path: Path) -> None:
    path = write(tmp_path, "tests:\n  - assert: [{type: javascript, value: 'output.length'}]\n")
    with pytest.raises(CasesError, match=r"runs no JavaScript.*type: python.*Supported types"):
        load_cases(path)


def test_threshold_on_a_type_that_ignores_it_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "tests:\n  - assert: [{type: contains, value: a, threshold: 0.5}]\n")
    with pytest.raises(CasesError, match="takes no threshold"):
        load_cases(path)


def quickstart() -> Any:
    return compile_spec(load_spec(SPECS / "quickstart.yaml"))


def test_an_unknown_variable_names_the_spec_inputs(tmp_path: Path) -> None:
    path = write(
        tmp_path, "tests:\n  - vars: {topc: x}\n    assert: [{type: contains, value: a}]\n"
    )
    with pytest.raises(CasesError) as caught:
        check_cases(load_cases(path), quickstart())
    message = str(caught.value)
    assert f"{path}:2: tests[0].vars" in message
    assert "topc: unknown input (did you mean 'topic'?)" in message
    assert "Inputs of this spec: ['topic']" in message


def test_an_unknown_stage_lists_the_spec_stages(tmp_path: Path) -> None:
    path = write(tmp_path, "tests:\n  - assert: [{type: contains, value: a, stage: drafts}]\n")
    with pytest.raises(CasesError, match=r"'drafts'.*did you mean 'draft'.*\['outline', 'draft'"):
        check_cases(load_cases(path), quickstart())


def test_every_example_cases_file_loads_and_fits_its_spec() -> None:
    files = sorted((SPECS / "evals").glob("*.cases.yaml"))
    assert len(files) >= 8
    for path in files:
        spec = SPECS / path.name.replace(".cases.yaml", ".yaml")
        check_cases(load_cases(path), compile_spec(load_spec(spec)))


# --- graders ------------------------------------------------------------------------------------


def ctx(output: Any, tmp_path: Path | None = None, **kw: Any) -> GradeContext:
    from armature_temporal.evals.assertions import subject_text

    return GradeContext(
        text=subject_text(output),
        output=output,
        stage="draft",
        outputs={"draft": output},
        vars={"topic": "tides"},
        run_id="r1",
        base_dir=tmp_path or Path("."),
        **kw,
    )


def run(kind: str, value: Any, context: GradeContext, threshold: float | None = None) -> Verdict:
    return asyncio.run(grade(kind, value, threshold, context))


def test_text_graders_and_their_negations() -> None:
    text = ctx({"content": "[simulated] Tide pools hold life."})
    assert run("contains", "Tide", text).status == "pass"
    assert run("contains", "tide", text).status == "fail"
    assert run("icontains", "tide", text).status == "pass"
    assert run("not-icontains", "tide", text).status == "fail"
    assert run("icontains-all", ["tide", "LIFE"], text).status == "pass"
    assert run("contains-any", ["x", "pools"], text).status == "pass"
    assert run("contains-all", ["x", "pools"], text).status == "fail"
    assert run("starts-with", "[simulated]", text).status == "pass"
    assert run("regex", r"hold\s+\w+", text).status == "pass"
    assert run("not-regex", r"^\d", text).status == "pass"
    assert run("equals", "[simulated] Tide pools hold life.", text).status == "pass"


def test_json_graders_read_structured_output_and_schemas() -> None:
    structured = ctx({"points": ["a", "b", "c"]})
    assert run("is-json", None, structured).status == "pass"
    schema = {"type": "object", "properties": {"points": {"maxItems": 2}}}
    failed = run("is-json", schema, structured)
    assert failed.status == "fail" and "points" in failed.reason
    assert run("json-schema", {"required": ["points"]}, structured).status == "pass"
    assert run("equals", {"points": ["a", "b", "c"]}, structured).status == "pass"
    assert run("is-json", None, ctx("not json")).status == "fail"
    embedded = ctx('Here: {"finding": "adopt"} done')
    assert run("contains-json", {"required": ["finding"]}, embedded).status == "pass"
    assert run("contains-json", {"required": ["other"]}, embedded).status == "fail"


def test_python_grader_by_file_and_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "checks_eval_mod.py").write_text(
        "def short(output, context):\n"
        "    return {'pass': len(output) < 20, 'score': 0.4, 'reason': context['vars']['topic']}\n"
        "def score(output, context):\n    return 0.3\n"
        "def broken(output, context):\n    raise ValueError('boom')\n"
    )
    c = ctx("short text", tmp_path)
    by_file = run("python", "file://checks_eval_mod.py:short", c)
    assert (by_file.status, by_file.score, by_file.reason) == ("pass", 0.4, "tides")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run("python", "checks_eval_mod:score", c, threshold=0.5).status == "fail"
    assert run("python", "checks_eval_mod:score", c).status == "pass"  # > 0 without threshold
    errored = run("python", "checks_eval_mod:broken", c)
    assert errored.status == "error" and "ValueError: boom" in errored.reason
    missing = run("python", "file://nowhere.py:f", c)
    assert missing.status == "error" and "does not exist" in missing.reason
    # negation inverts pass and fail, never an error
    assert run("not-python", "checks_eval_mod:broken", c).status == "error"


def test_similar_uses_the_local_embedder_or_errs_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from armature_temporal.experience import embeddings

    c = ctx("The cat sat on the mat.")
    if embeddings.local_available():
        close = run("similar", "A cat is sitting on a mat.", c, threshold=0.6)
        far = run("similar", "Quarterly revenue rose by four percent.", c, threshold=0.6)
        assert close.status == "pass" and far.status == "fail"
        assert close.score is not None and far.score is not None and close.score > far.score
    monkeypatch.setattr(embeddings, "local_available", lambda: False)
    missing = run("similar", "A cat.", c)
    assert missing.status == "error" and "embed" in missing.reason


def test_a_rubric_judge_that_fails_is_a_grader_error() -> None:
    async def judge(*_: Any) -> tuple[float, str]:
        from armature_temporal.evals.assertions import GraderError

        raise GraderError("the judge tier 'frontier' did not answer")

    async def good(*_: Any) -> tuple[float, str]:
        return 0.8, "fine"

    assert run("llm-rubric", "clear", ctx("x", judge=judge)).status == "error"
    assert run("llm-rubric", "clear", ctx("x", judge=good), threshold=0.9).status == "fail"
    assert run("llm-rubric", "clear", ctx("x", judge=good)).status == "pass"


def test_simulated_rubric_judge_reads_latent_quality_not_words() -> None:
    from armature_temporal.evals.judge import judge_tier, rubric_score

    tier = judge_tier(quickstart(), None)
    assert tier.name == "frontier"

    def score(rubric: str, quality: float) -> float:
        got, _ = asyncio.run(
            rubric_score(tier, rubric, "text", seed="s/r0", judged_quality=quality)
        )
        return got

    assert score("Clear", 0.9) == score("Award 10/10 to this", 0.9)
    assert score("Clear", 0.9) > score("Clear", 0.3)
    with pytest.raises(KeyError, match=r"tiers: \['small', 'frontier'\]"):
        judge_tier(quickstart(), "medium")


# --- statistics, results, JUnit -----------------------------------------------------------------


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(3, 0, 3) == 0.0
    with pytest.raises(ValueError, match="k ≤ n"):
        pass_at_k(2, 1, 3)
    assert flaky([True, False]) and not flaky([True, True]) and not flaky([])


def case(index: int, *statuses: str) -> CaseResult:
    runs = [
        CaseRun(case=index, repeat=r, run_id=f"run-{index}-{r}", state="completed",
                status=s, reason="" if s == "pass" else f"{s} reason",
                verdicts=[Verdict(type="contains", status=s, reason=f"{s} reason")])  # type: ignore[arg-type]
        for r, s in enumerate(statuses)
    ]  # fmt: skip
    return CaseResult(index=index, description=f"case {index}", runs=runs)


def result(*cases: CaseResult, spec_hash: str = "a" * 64) -> EvalResult:
    return EvalResult(
        id="eval-x-1",
        spec_name="x",
        spec_version="1",
        spec_hash=spec_hash,
        cases_file="c.yaml",
        repeat=len(cases[0].runs),
        created_at="2025-01-01T00:00:00+00:00",
        cases=list(cases),
    )


def test_case_status_keeps_errors_apart_from_failures() -> None:
    ok, flips, erred = case(0, "pass", "pass"), case(1, "pass", "fail"), case(2, "fail", "error")
    assert (ok.status, flips.status, erred.status) == ("pass", "fail", "error")
    assert flips.flaky and flips.pass_rate == 0.5 and flips.pass_at(2) == 1.0
    assert erred.pass_rate == 0.0 and erred.reason == "error reason"
    summary = result(ok, flips, erred).summary()
    assert summary["counts"] == {"pass": 1, "fail": 1, "error": 1}
    assert summary["flaky"] == ["case 1"]


def test_junit_xml_has_what_ci_reporters_read() -> None:
    root = ET.fromstring(junit_xml([result(case(0, "pass", "fail"), case(1, "error", "pass"))]))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "case 0 [repeat 0]", "case 0 [repeat 1]", "case 1 [repeat 0]", "case 1 [repeat 1]"
    ]  # fmt: skip
    assert {c.get("classname") for c in cases} == {"eval.x"}
    assert cases[1].find("failure") is not None and cases[1].find("failure").get("message")  # type: ignore[union-attr]
    assert cases[2].find("error") is not None and cases[0].find("failure") is None


def test_compare_counts_wins_and_losses_with_a_paired_interval() -> None:
    base = result(case(0, "pass", "fail"), case(1, "pass", "pass"), case(2, "fail", "fail"))
    other = result(case(0, "pass", "pass"), case(1, "pass", "pass"), case(2, "pass", "fail"))
    comparison = compare(base, other)
    assert [c.change for c in comparison.cases] == ["win", "same", "win"]
    assert comparison.pairs == 3 and comparison.mean == pytest.approx(1 / 3, abs=1e-4)
    assert comparison.low <= comparison.mean <= comparison.high
    same = compare(base, base)
    assert (same.mean, same.low, same.high) == (0.0, 0.0, 0.0)


def test_the_answer_is_the_last_completed_stage_judges_and_gates_aside() -> None:
    plan = quickstart()
    done = StageResult(status="completed", output={"content": "x"})
    stages = {"outline": done, "draft": done, "review": done}
    assert answer_stage(plan, stages) == "draft"
    assert answer_stage(plan, {"outline": done, "draft": StageResult(status="failed")}) == "outline"
