"""Shared fixtures: a temporary ARMATURE_HOME for every test, never the user's home."""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The Temporal dev server (Go, built without cgo) needs $USER to start.
os.environ.setdefault("USER", getpass.getuser())


@pytest.fixture(autouse=True)
def armature_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "armature-home"
    monkeypatch.setenv("ARMATURE_HOME", str(home))
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("ARMATURE_WORKSPACE", raising=False)
    yield home
