"""The modules tests/conftest.py runs first exist: a renamed one would silently lose its place
and run last again (the suite's wall time under `pytest -n`)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FIRST

ROOT = Path(__file__).resolve().parents[2]


def test_every_long_first_module_exists() -> None:
    missing = [name for name in LONG_FIRST if not (ROOT / name).is_file()]
    assert missing == [], f"rename these in tests/conftest.py LONG_FIRST: {missing}"
