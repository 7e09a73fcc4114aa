"""A worker whose Python and PATH live under /tmp (a virtualenv in a fresh temporary directory,
as `.ci/run` and many CI systems make one) still runs tool programs: the sandbox's private
/tmp hid the interpreter it runs itself with, so every probe failed and no tool could run
("No such file or directory: .../.venv/bin/python"). Those directories come back read-only;
nothing else of the worker's /tmp does, and what is hidden stays hidden."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from armature_temporal.tools import ToolContext, call_tool
from armature_temporal.tools._hiding import layout
from armature_temporal.tools.sandbox import sandbox


@pytest.fixture
def venv_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin directory under /tmp, first on PATH, whose `venvpython` is the worker's Python
    (a symlink, as a virtualenv's is), and a file beside it the program must not see."""
    assert str(tmp_path).startswith("/tmp/"), tmp_path
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "venvpython").symlink_to(os.path.realpath(sys.executable))
    (tmp_path / "worker-scratch.txt").write_text("the worker's own /tmp file")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


def test_the_layout_binds_back_a_path_directory_under_a_private_one(
    venv_in_tmp: Path, tmp_path: Path
) -> None:
    made = layout((tmp_path / "ws",))
    assert str(venv_in_tmp) in made.runtime
    assert not any(str(tmp_path) == r for r in made.runtime)  # the directory, not all /tmp


async def test_a_program_from_a_virtualenv_under_tmp_runs_and_sees_no_more_of_tmp(
    venv_in_tmp: Path, tmp_path: Path, armature_home: Path
) -> None:
    if not sandbox().isolated:
        pytest.skip(f"no sandbox here: {sandbox().note}")
    workspace = armature_home / "workspace" / "w"
    workspace.mkdir(parents=True)
    scratch = tmp_path / "worker-scratch.txt"
    code = (
        "import os; print('ran'); "
        f"print('scratch seen' if os.path.exists({str(scratch)!r}) else 'scratch hidden'); "
        f"open({str(venv_in_tmp / 'planted')!r}, 'w')"
    )
    result = await call_tool(
        "shell",
        {"argv": ["venvpython", "-I", "-S", "-c", code]},
        ToolContext(workspace=workspace, timeout_s=20),
    )
    assert result.ok, result
    out = result.output
    assert out["stdout"].splitlines()[:2] == ["ran", "scratch hidden"], out
    assert "Read-only file system" in out["stderr"], out  # the bound-back directory is read-only
    assert not (venv_in_tmp / "planted").exists()
