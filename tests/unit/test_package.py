"""The package's public face: a short __all__, and no heavy or unsafe imports at import time."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import armature_temporal

#: Every layer package's public names, sorted; a change here is a change to the public API.
SUBPACKAGE_ALL: dict[str, list[str]] = {
    "spec": [
        "LoadedSpec",
        "Plan",
        "PlanStage",
        "Spec",
        "compile_spec",
        "load_plan",
        "load_spec",
        "load_spec_text",
    ],
    "runtime": [
        "GateDecision",
        "HQSBreakdown",
        "RunInput",
        "RunResult",
        "RunStatus",
        "TraceChain",
        "TraceRecord",
        "run_hqs",
    ],
    "service": [
        "apply_triggers",
        "connect",
        "decide_gate",
        "ensure_local_stack",
        "list_runs",
        "show_run",
        "start_run",
    ],
    "bandit": [
        "ArmReport",
        "BanditConfig",
        "BanditConfigError",
        "BanditError",
        "BanditEvent",
        "BanditRuntime",
        "DuplicateRewardError",
        "InvalidRewardError",
        "MaintenanceReport",
        "RewardError",
        "RewardReceipt",
        "RuntimeRegistry",
        "Selection",
        "Snapshot",
        "StorageConfig",
        "UnknownBanditError",
        "UnknownDecisionError",
        "close_runtimes",
        "configure_runtime",
        "get_runtime",
        "history",
        "maintenance",
        "runtime_arms",
        "runtime_events",
        "runtime_select",
        "runtime_update",
    ],
    "store": [
        "AdapterError",
        "MIGRATIONS",
        "ProposalError",
        "StoreError",
        "TraceStore",
        "database_url",
        "migrate",
    ],
    "tools": [
        "Reversibility",
        "ToolContext",
        "ToolError",
        "ToolErrorType",
        "ToolRegistry",
        "ToolResult",
        "ToolSpec",
        "call_tool",
        "get_tool_spec",
        "load_tool_modules",
        "policy_args",
        "register_tool",
        "resolved_fields",
        "split_command",
        "tool_arg_fields",
        "tool_pseudo_fields",
        "tool_reversibility",
    ],
    "scanner": [
        "CATEGORIES",
        "Category",
        "Finding",
        "ModelFileError",
        "Profile",
        "ScanResult",
        "redact",
        "scan",
        "scan_jsonl",
        "scan_many",
    ],
    "improve": [
        "Diagnosis",
        "EditError",
        "ImproveInput",
        "ImproveResult",
        "Proposal",
        "SpecChange",
        "apply_changes",
        "candidates",
        "diagnose",
        "paired_verdict",
    ],
    "finetune": [
        "Adapter",
        "FinetuneError",
        "FinetuneInput",
        "FinetuneResult",
        "FinetuneUnavailable",
        "PreferenceRequest",
        "TrainReport",
        "create_tiny_model",
        "dpo_rows",
        "generate",
        "sft_rows",
        "train_dpo",
        "train_lora",
    ],
    "views": [
        "AttemptView",
        "ConfigUsage",
        "GateView",
        "HQSTrend",
        "RunReport",
        "RunTrace",
        "SPARK_WIDTH",
        "SpecDashboard",
        "SpecSummary",
        "StageView",
        "ToolCallView",
        "VersionStats",
        "build_dashboard",
        "build_overview",
        "build_report",
        "failure_counts",
        "load_run",
        "load_runs",
        "percentile",
        "render_dashboard",
        "render_overview",
        "render_report",
        "sparkline",
    ],
}


def test_public_api_is_pinned() -> None:
    assert sorted(armature_temporal.__all__) == sorted(
        [
            "ArmatureError",
            "HookContext",
            "HookResult",
            "InputError",
            "LoadedSpec",
            "Plan",
            "RunFailed",
            "RunHandle",
            "Spec",
            "SpecError",
            "SpecIssue",
            "__version__",
            "compile_spec",
            "configure_runtime",
            "load_plan",
            "load_spec",
            "load_spec_text",
            "register_hook",
            "run",
            "runtime_arms",
            "runtime_select",
            "runtime_update",
            "start",
        ]
    )
    for name in armature_temporal.__all__:
        assert hasattr(armature_temporal, name), name


@pytest.mark.parametrize("package", sorted(SUBPACKAGE_ALL))
def test_subpackage_all_is_pinned_and_resolves(package: str) -> None:
    module = importlib.import_module(f"armature_temporal.{package}")
    assert sorted(module.__all__) == SUBPACKAGE_ALL[package]
    assert len(set(module.__all__)) == len(module.__all__), "a name is listed twice"
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, type(sys)), f"{package}.{name} is a module, not the API name"


def test_importing_the_core_pulls_in_neither_temporal_workflow_nor_litellm() -> None:
    code = (
        "import sys, armature_temporal, armature_temporal.spec.compiler\n"
        "import armature_temporal.spec.loader, armature_temporal.runtime\n"
        "import armature_temporal.service, armature_temporal.finetune\n"
        "import armature_temporal.improve\n"
        "heavy = ('temporalio.workflow', 'litellm', 'torch', 'transformers', 'peft')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    assert fresh_python(code).strip() == ""


def fresh_python(code: str) -> str:
    """What ``code`` prints in a new interpreter (nothing imported beforehand)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout


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


def test_the_worker_passes_the_interpreter_through_unless_the_sandbox_is_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from worker import workflow_runner

    def passed(runner: object) -> frozenset[str]:
        return frozenset(runner.restrictions.passthrough_modules)  # type: ignore[attr-defined]

    assert "workflows" in passed(workflow_runner(strict=False))
    assert "workflows" not in passed(workflow_runner(strict=True))
    assert "armature_temporal" in passed(workflow_runner(strict=True))
    monkeypatch.setenv("ARMATURE_STRICT_SANDBOX", "1")
    assert "workflows" not in passed(workflow_runner())
    monkeypatch.setenv("ARMATURE_STRICT_SANDBOX", "0")
    assert "workflows" in passed(workflow_runner())


def test_the_command_line_and_the_package_load_the_spec_compiler_only_when_used() -> None:
    """`armature --help` and commands that never read a spec skip the compiler and its checks
    (a quarter of a second of imports, #27 item 2); the package's spec API still resolves."""
    code = (
        "import sys, cli, armature_temporal\n"
        "before = [m for m in ('armature_temporal.spec.compiler', 'armature_temporal.spec.checks',"
        " 'jsonschema') if m in sys.modules]\n"
        "from armature_temporal import Plan, compile_spec\n"
        "from armature_temporal.spec.compiler import Plan as P2\n"
        "print(','.join(before), Plan is P2, callable(compile_spec))\n"
    )
    printed = fresh_python(code)
    assert printed.split() == ["True", "True"], printed
