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
            "configure_runtime",
            "load_plan",
            "load_spec",
            "load_spec_text",
            "runtime_arms",
            "runtime_select",
            "runtime_update",
        ]
    )
    for name in armature_temporal.__all__:
        assert hasattr(armature_temporal, name), name


def test_importing_the_core_pulls_in_neither_temporal_workflow_nor_litellm() -> None:
    code = (
        "import sys, armature_temporal, armature_temporal.spec.compiler\n"
        "import armature_temporal.spec.loader, armature_temporal.runtime\n"
        "bad = [m for m in ('temporalio.workflow', 'litellm', 'torch') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


async def test_the_standalone_bandit_api_works_from_the_package_root() -> None:
    from armature_temporal import configure_runtime, runtime_arms, runtime_select, runtime_update

    await configure_runtime(
        "root_api",
        config={
            "arms": [{"arm_id": "a", "params": {"t": 1}}, {"arm_id": "b"}],
            "storage": {"backend": "memory"},
        },
    )
    selection = await runtime_select("root_api", user_id="u1", context={"task": "triage"})
    assert selection.arm_id in ("a", "b") and selection.decision_id
    await runtime_update("root_api", decision_id=selection.decision_id, reward=1.0)
    arms = await runtime_arms("root_api")
    assert sum(a.pulls for a in arms) == 1
