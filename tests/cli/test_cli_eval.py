"""`armature eval` end to end: real Temporal dev server, an in-process worker, the simulate
provider, the real SQLite store under the test's ARMATURE_HOME."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.fakes import SPECS, run_armature
from worker import build_worker

QUICKSTART = SPECS / "quickstart.yaml"
CASES = SPECS / "evals" / "quickstart.cases.yaml"


def stack(temporal_env: WorkflowEnvironment, task_queue: str) -> list[str]:
    address = str(temporal_env.client.service_client.config.target_host)
    return ["--address", address, "--task-queue", task_queue]


@pytest.mark.asyncio(loop_scope="session")
async def test_eval_shows_pass_at_k_lists_the_flaky_case_writes_junit_and_keeps_results(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    junit = tmp_path / "eval.xml"
    async with build_worker(client, task_queue):
        done = await run_armature(
            "eval", str(QUICKSTART), str(CASES), "--repeat", "4", "--json", "--junit", str(junit),
            *stack(temporal_env, task_queue), timeout=300,
        )  # fmt: skip
    assert done.returncode == 100, done.stderr  # the borderline case fails some repeats
    (result,) = json.loads(done.stdout)["evals"]
    cases = {c["description"]: c for c in result["cases"]}
    borderline = cases["judged well written (borderline)"]
    # It flips because the simulator draws each draft's latent quality with noise seeded by
    # the inputs and the replicate; the judge reads that quality.
    assert borderline["flaky"] and 0 < borderline["pass_rate"] < 1
    assert borderline["pass_at_1"] == borderline["pass_rate"] and borderline["pass_at_4"] == 1.0
    assert {r["repeat"] for r in borderline["runs"]} == {0, 1, 2, 3}
    assert result["flaky"] == ["judged well written (borderline)"]
    assert cases["tide pools"]["status"] == "pass" and cases["tide pools"]["pass_rate"] == 1.0
    verdict = cases["tide pools"]["runs"][0]["verdicts"][0]
    assert verdict["type"] == "is-json" and verdict["stage"] == "outline"
    assert cases["tide pools"]["runs"][0]["verdicts"][-1]["stage"] == "draft"  # the answer
    assert "4/12 runs graded" in done.stderr or "12/12 runs graded" in done.stderr

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "12" and suite.get("errors") == "0"
    failures = sum(r["status"] == "fail" for r in borderline["runs"])
    assert suite.get("failures") == str(failures) and failures > 0
    assert len(suite.findall("testcase[failure]")) == failures

    board = await run_armature("dashboard")
    assert board.returncode == 0, board.stderr
    assert "evals (latest per spec version)" in board.stdout and "quickstart" in board.stdout
    shown = await run_armature("dashboard", "quickstart", "--json")
    assert json.loads(shown.stdout)["evals"][0]["id"] == result["id"]


@pytest.mark.asyncio(loop_scope="session")
async def test_compare_shares_noise_and_reports_the_paired_interval(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    cases = tmp_path / "judged.cases.yaml"
    cases.write_text(
        "repeat: 3\ntests:\n"
        + "".join(
            f"  - vars: {{topic: {t}}}\n"
            "    assert: [{type: llm-rubric, value: clear, threshold: 0.75}]\n"
            for t in ("tides", "owls", "rust", "glaciers")
        )
    )
    better = tmp_path / "quickstart-v2.yaml"
    better.write_text(
        QUICKSTART.read_text()
        .replace("version: 1", "version: 2")
        .replace("small: {provider: simulate, valid_rate: 0.9, quality: 0.7}",
                 "small: {provider: simulate, valid_rate: 0.9, quality: 0.9}")
    )  # fmt: skip
    async with build_worker(client, task_queue):
        same = await run_armature(
            "eval", str(QUICKSTART), str(cases), "--compare", str(QUICKSTART), "--json",
            *stack(temporal_env, task_queue), timeout=300,
        )  # fmt: skip
        changed = await run_armature(
            "eval", str(QUICKSTART), str(cases), "--compare", str(better),
            *stack(temporal_env, task_queue), timeout=300,
        )  # fmt: skip
    assert same.returncode in (0, 100), same.stderr
    data = json.loads(same.stdout)
    # The same spec twice on shared noise: every case × repeat agrees, so no case changes.
    base, other = data["evals"]
    assert [c["pass_rate"] for c in base["cases"]] == [c["pass_rate"] for c in other["cases"]]
    comparison = data["comparison"]
    assert comparison["counts"]["same"] == 4 and (comparison["low"], comparison["high"]) == (0, 0)

    assert changed.returncode in (0, 100), changed.stderr
    assert "quickstart v2" in changed.stdout and "vs quickstart v1" in changed.stdout
    assert "paired 95% interval" in changed.stdout and "wins " in changed.stdout


@pytest.mark.asyncio(loop_scope="session")
async def test_a_grader_that_errors_is_an_error_not_a_failure(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "graders.py").write_text(
        "def broken(output, context):\n    raise KeyError('no such field')\n"
    )
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "tests:\n"
        "  - description: broken grader\n"
        "    assert: [{type: python, value: 'file://graders.py:broken'}]\n"
        "  - description: plain failure\n"
        "    assert: [{type: contains, value: 'never in the output'}]\n"
    )
    junit = tmp_path / "out.xml"
    async with build_worker(client, task_queue):
        done = await run_armature(
            "eval", str(QUICKSTART), str(cases), "--junit", str(junit),
            *stack(temporal_env, task_queue), timeout=300,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "KeyError" in done.stdout and "0 passed, 1 failed, 1 error(s)" in done.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("failures"), suite.get("errors")) == ("1", "1")


@pytest.mark.asyncio(loop_scope="session")
async def test_bad_input_is_reported_before_anything_runs(tmp_path: Path) -> None:
    unknown_var = tmp_path / "vars.yaml"
    unknown_var.write_text(
        "tests:\n  - vars: {subject: x}\n    assert: [{type: contains, value: a}]\n"
    )
    done = await run_armature("eval", str(QUICKSTART), str(unknown_var))
    assert done.returncode == 1
    assert (
        "subject: unknown input" in done.stderr and "Inputs of this spec: ['topic']" in done.stderr
    )

    bad_type = tmp_path / "type.yaml"
    bad_type.write_text("tests:\n  - assert: [{type: simliar, value: a}]\n")
    done = await run_armature("eval", str(QUICKSTART), str(bad_type))
    assert done.returncode == 1 and "did you mean 'similar'" in done.stderr
    assert "supported types: ['contains'" in done.stderr

    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("tests: [\n")
    done = await run_armature("eval", str(QUICKSTART), str(not_yaml))
    assert done.returncode == 1 and f"{not_yaml}" in done.stderr and "not valid YAML" in done.stderr

    no_tests = tmp_path / "empty.yaml"
    no_tests.write_text("description: x\n")
    done = await run_armature("eval", str(QUICKSTART), str(no_tests))
    assert done.returncode == 1 and "has no `tests:` list" in done.stderr

    done = await run_armature("eval", str(QUICKSTART), str(CASES), "--repeat", "0")
    assert done.returncode == 2
