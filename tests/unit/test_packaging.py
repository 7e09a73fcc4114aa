"""A built wheel (what the Docker image installs) carries every package and data file."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_contains_every_subpackage_and_the_scanner_weights(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("armature_temporal-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(
        str(p.parent.relative_to(ROOT))
        for p in ROOT.glob("*/**/__init__.py")
        if p.parts[len(ROOT.parts)] in ("armature_temporal", "activities", "workflows")
    )
    assert "armature_temporal/store" in packages and "armature_temporal/scanner" in packages
    for package in packages:
        assert f"{package}/__init__.py" in names, f"{package} is missing from the wheel"
    assert "armature_temporal/scanner/injection_weights.json" in names
    assert {"cli.py", "worker.py", "armature_temporal/py.typed"} <= names
