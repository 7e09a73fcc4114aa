"""`armature validate` and `plan` on armature-agents 0.7.0 specs: warnings are not errors, and
the plan says what the older fields became."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli import app

runner = CliRunner()

WARNED = """\
name: older
trace: {enabled: true}
contracts: {max_llm_calls: 50, timeout_hours: 2, completion: the reply is sent}
checkpoint: true
stages:
  - id: analyze
    role: {description: "Classify {{ ticket }}", tools: [web_search]}
  - id: reply
    role: {description: "Reply using {{ analyze.content }}"}
"""


def test_warnings_print_and_exit_0_and_json_lists_them(tmp_path: Path) -> None:
    spec = tmp_path / "older.yaml"
    spec.write_text(WARNED)
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    assert "3 warning(s)" in result.stdout
    assert "warning: " in result.stderr and "'ticket' is read as a run input" in result.stderr
    assert "unknown tool 'web_search'" in result.stderr
    assert "trace: accepted from armature-agents 0.7.0 but not used" in result.stderr
    as_json = runner.invoke(app, ["validate", str(spec), "--json"])
    (entry,) = json.loads(as_json.stdout)
    assert entry["valid"] is True and len(entry["warnings"]) == 3
    assert {w["path"] for w in entry["warnings"]} == {
        "stages[0].role.description",
        "stages[0].role.tools[0]",
        "trace",
    }


def test_plan_shows_implied_dependencies_limits_and_durability(tmp_path: Path) -> None:
    spec = tmp_path / "older.yaml"
    spec.write_text(WARNED)
    result = runner.invoke(app, ["plan", str(spec)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "reads analyze (implied dependency)" in text
    assert "limits: max_llm_calls 50, timeout_hours 2" in text
    assert "done when: the reply is sent" in text
    assert "durable: every run resumes where it stopped" in text
    assert "checkpoint: true is implied" in text
