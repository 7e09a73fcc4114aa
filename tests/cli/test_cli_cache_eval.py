"""`armature cache eval PAIRS.csv`: the semantic cache's own rule scored on a small labelled
file (precision, recall, false-hit rate, the curve; --json), and its errors (file not found,
missing columns named, a bad label named). Run through a one-command typer app so that it
does not depend on where `armature cache` mounts it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from armature_temporal.commands.cache_eval import cache_eval
from armature_temporal.experience.embeddings import local_available

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cache"
PAIRS = FIXTURES / "pairs.csv"
runner = CliRunner()
app = typer.Typer()


@app.callback()
def _group() -> None:
    """armature cache (for the test)."""


app.command("eval")(cache_eval)


def run(*args: str) -> tuple[int, str, str]:
    got = runner.invoke(app, ["eval", *args])
    return got.exit_code, got.stdout, got.stderr


def test_scores_the_fixture_with_the_guard_and_lists_the_false_hit() -> None:
    # lexical: the rows that differ only in case and punctuation embed identically (cosine
    # 1.0); "address line 1/2" and "not compile/compile" are vetoed by the guard; the
    # identical Python/Java pair labelled 0 is the one false hit.
    code, stdout, stderr = run(
        str(PAIRS), "--embedding-model", "lexical", "--threshold", "0.95", "--json"
    )
    assert code == 0, stderr
    got = json.loads(stdout)
    assert (got["pairs"], got["positives"], got["negatives"]) == (8, 4, 4)
    assert (got["hits"], got["true_hits"], got["false_hits"]) == (5, 4, 1)
    assert got["precision"] == pytest.approx(0.8) and got["recall"] == 1.0
    assert got["false_hit_rate"] == 0.25 and got["false_hits_per_lookup"] == 0.125
    lo, hi = got["precision_ci"]
    assert lo < 0.8 < hi
    assert [f["text_a"] for f in got["false_hit_examples"]] == ["Is Python faster than Java?"]
    assert [p["threshold"] for p in got["curve"]][:2] == [0.8, 0.81] and len(got["curve"]) == 20


def test_reports_the_pair_classifier_beside_the_rule() -> None:
    # The shipped pair model on the same pairs: the four same-question rows (identical up to
    # case) are hits by its same-words rule; address line 1/2 (numbers) and compile/not
    # (negation) are vetoed; rice/car is below its cosine floor; the identical Python/Java
    # pair labelled 0 is again the one false hit.
    code, stdout, stderr = run(str(PAIRS), "--embedding-model", "lexical", "--json")
    assert code == 0, stderr
    got = json.loads(stdout)["classifier"]
    assert (got["hits"], got["true_hits"], got["false_hits"]) == (5, 4, 1)
    assert 0.5 < got["threshold"] < 1.0 and got["false_hit_rate"] == 0.25
    code, stdout, _ = run(str(PAIRS), "--embedding-model", "lexical")
    assert code == 0 and "classifier (pair_model.json, probability ≥" in stdout
    assert "precision 80.0% (4/5 hits), recall 100.0%" in stdout


def test_plain_output_prints_the_rates_and_the_curve() -> None:
    code, stdout, _ = run(str(PAIRS), "--embedding-model", "lexical", "--threshold", "0.95")
    assert code == 0
    assert "precision       80.0%" in stdout
    assert "recall          100.0%" in stdout
    assert "false-hit rate  25.0%" in stdout and "1/4 different pairs" in stdout
    assert "threshold  precision  recall" in stdout
    assert "Is Python faster than Java?" in stdout


@pytest.mark.skipif(not local_available(), reason="the embed extra is not installed")
def test_default_rule_with_the_local_model() -> None:
    code, stdout, stderr = run(str(PAIRS), "--json")
    assert code == 0, stderr
    got = json.loads(stdout)
    assert got["embedder"] == "all-MiniLM-L6-v2"
    assert got["threshold"] == got["default_threshold"]
    assert got["false_hits"] == 1 and got["true_hits"] == 4


def test_errors_name_the_file_the_columns_and_the_label(tmp_path: Path) -> None:
    code, stdout, stderr = run(str(tmp_path / "nope.csv"), "--json")
    assert code == 2 and "not found" in stderr
    assert json.loads(stdout)["code"] == 2
    code, _, stderr = run(str(FIXTURES / "wrong-columns.csv"))
    assert code == 2 and "missing column(s) label" in stderr and "text_a,text_b,score" in stderr
    code, _, stderr = run(str(FIXTURES / "bad-label.csv"))
    assert code == 2 and "line 3: label 'maybe'" in stderr and "use 1" in stderr
    code, _, stderr = run(str(PAIRS), "--threshold", "2")
    assert code == 2
