"""`armature plan --json` and `validate` never print a file from outside the spec's folder
(issue #25, item 8): the review's spec named ``../../home/.armature/trace.key`` and
``/proc/self/environ`` as context layers and ``plan --json`` printed both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEY = "TRACE-KEY-0c1d"
ENV = "PROVIDER-KEY-9e8f"


def armature(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ARMATURE_HOME": str(home),
        "OPENAI_API_KEY": ENV,  # what /proc/self/environ of the command holds
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home as Armature makes it (owner-only, so commands have nothing to tighten)."""
    home = tmp_path / "home" / ".armature"
    home.mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o700)
    (home / "trace.key").write_text(KEY)
    os.chmod(home / "trace.key", 0o600)
    return home


def layer_spec(folder: Path, src: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "spec.yaml"
    spec.write_text(
        "name: leak\ncontext_layers:\n  - name: doc\n    src: " + src + "\n"
        "context_policy: {must: [doc]}\nstages:\n  - id: s\n    role: {name: R, description: hi}\n"
    )
    return spec


def refused(result: subprocess.CompletedProcess[str], spec: Path, why: str) -> None:
    assert result.returncode == 2, result
    assert KEY not in result.stdout + result.stderr
    assert ENV not in result.stdout + result.stderr
    if result.stderr:  # plan, plan --json: file:line:column: field: message
        assert f"{spec}:4:5: context_layers[0].src: " in result.stderr, result.stderr
        assert why in result.stderr, result.stderr
    else:  # validate --json: the same, as fields on stdout
        ((error,),) = [entry["errors"] for entry in json.loads(result.stdout)]
        assert (error["file"], error["line"], error["column"]) == (str(spec), 4, 5), error
        assert error["path"] == "context_layers[0].src" and why in error["message"], error


@pytest.mark.parametrize("command", [["plan", "--json"], ["plan"], ["validate", "--json"]])
@pytest.mark.parametrize(
    ("src", "why"),
    [
        ("../../home/.armature/trace.key", "is outside the spec's folder"),
        ("/proc/self/environ", "is in /proc, a kernel file system"),
        ("link.md", "(that is "),  # a symlink in the spec's folder to the key
        ("pipe.md", "is a FIFO, not a regular file"),
    ],
)
def test_plan_and_validate_refuse_files_outside_the_spec_folder(
    home: Path, tmp_path: Path, command: list[str], src: str, why: str
) -> None:
    folder = tmp_path / "a" / "b"
    spec = layer_spec(folder, src)
    (folder / "link.md").symlink_to(home / "trace.key")
    os.mkfifo(folder / "pipe.md")
    refused(armature(*command, str(spec), home=home), spec, why)


def test_plan_json_prints_a_layer_inside_the_spec_folder(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "a"
    spec = layer_spec(folder, "layers/doc.md")
    (folder / "layers").mkdir()
    (folder / "layers" / "doc.md").write_text("the house style")
    result = armature("plan", "--json", str(spec), home=home)
    assert result.returncode == 0, result.stderr
    assert "the house style" in result.stdout
