"""The example safety spec's rules, checked through the one policy function."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.tools import strictest
from armature_temporal.runtime.policy import PolicyDecision, evaluate_policy
from armature_temporal.spec.compiler import load_plan
from armature_temporal.tools import ToolContext, resolved_fields

PLAN = load_plan(Path(__file__).resolve().parents[2] / "specs" / "safe-shell.yaml")


def decide(tool: str, args: dict[str, object], reversibility: str = "none") -> PolicyDecision:
    """The decision as the tool_call activity makes it: with the resolved pseudo-fields."""
    ctx = ToolContext(workspace=Path(__file__).parent)  # bare program names: looked up on PATH
    return evaluate_policy(
        rules=PLAN.safety_rules,
        mode=PLAN.safety_mode,
        tool=tool,
        args=args,
        reversibility=reversibility,
        resolved=resolved_fields(tool, args, ctx),
    )


@pytest.mark.parametrize("argv", [["rm", "-rf", "/"], ["rm", "-r", "notes"], ["rm", "-f", "x"]])
def test_destructive_rm_is_blocked(argv: list[str]) -> None:
    decision = decide("shell", {"argv": argv})
    assert decision.action == "block" and decision.rule_index == 0


def test_read_only_commands_are_allowed_and_other_shell_calls_need_a_person() -> None:
    assert decide("shell", {"argv": ["ls", "-la"]}).action == "allow"
    assert decide("shell", {"argv": ["tar", "-czf", "a.tgz", "notes"]}).action == (
        "require_approval"
    )


def test_strict_mode_denies_a_tool_no_rule_allows() -> None:
    decision = decide("http_request", {"url": "https://example.com"}, reversibility="partial")
    assert decision.action == "block" and decision.rule_index is None
    assert "strict" in decision.message


def test_the_most_restrictive_decision_wins_across_nested_policies() -> None:
    allow = PolicyDecision(action="allow", rule_index=0, message="child allows")
    block = PolicyDecision(action="block", rule_index=1, message="parent blocks")
    ask = PolicyDecision(action="require_approval", rule_index=2, message="ask")
    assert strictest([block, allow]).message == "parent blocks"
    assert strictest([allow, ask]).action == "require_approval"
    assert strictest([allow]).action == "allow"
