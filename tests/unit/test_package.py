"""The package's public face: a short __all__, and no heavy or unsafe imports at import time."""

from __future__ import annotations

import subprocess
import sys

import armature_temporal


def test_public_api_is_pinned() -> None:
    assert sorted(armature_temporal.__all__) == sorted(
        [
            "ArmatureError",
            "LoadedSpec",
            "Plan",
            "Spec",
            "SpecError",
            "SpecIssue",
            "__version__",
            "compile_spec",
            "load_plan",
            "load_spec",
            "load_spec_text",
        ]
    )
    for name in armature_temporal.__all__:
        assert hasattr(armature_temporal, name), name


def test_importing_the_core_pulls_in_neither_temporal_workflow_nor_litellm() -> None:
    code = (
        "import sys, armature_temporal, armature_temporal.compiler, armature_temporal.loader\n"
        "bad = [m for m in ('temporalio.workflow', 'litellm', 'torch') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
