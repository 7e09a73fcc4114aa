"""Issue #30's fifth older-format gap: a validator's error about one field points at that
field's own line (``fan_in`` without ``fan_out`` at ``fan_in``, not at the stage)."""

from __future__ import annotations

from pathlib import Path

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.spec.loader import load_spec_text


def test_an_error_points_at_the_offending_fields_own_line(tmp_path: Path) -> None:
    spec = """\
name: fan-in-alone
stages:
  - id: a
    role: {description: A.}
    fan_in: list
  - id: b
    role: {description: B.}
    output_schema: {type: object}
"""
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec, "test.yaml")
    issues = {i.path: i for i in caught.value.issues}
    assert issues["stages[0].fan_in"].line == 5  # fan_in's line, not the stage's (3)
    assert issues["stages[1].output_schema"].line == 8
