"""What a tool approval's gate carries (GateInfo.tool_call), from the tool activity's answer."""

from __future__ import annotations

from armature_temporal.runtime.models import ToolCallResult
from workflows.interpreter.tools import _approval


def test_a_rule_asked_approval_carries_the_call_reversibility_and_rule() -> None:
    rule = {"tool": "*", "action": "require_approval", "message": "irreversible"}
    result = ToolCallResult(
        ok=False,
        policy_action="require_approval",
        policy_rule=3,
        policy_message="irreversible",
        output={"args": {"argv": ["tar", "x"]}, "reversibility": "none", "rule": rule},
    )
    call = _approval("shell", {"argv": ["{{ raw }}"]}, result)
    assert (call.tool, call.args, call.reversibility) == ("shell", {"argv": ["tar", "x"]}, "none")
    assert (call.rule, call.rule_index, call.reason, call.hook) == (rule, 3, "irreversible", None)


def test_a_hook_asked_approval_names_the_hook_and_an_old_answer_still_reads() -> None:
    hooked = ToolCallResult(
        ok=False,
        policy_action="require_approval",
        policy_message="a person checks uploads",
        output={"args": {"path": "a"}, "reversibility": "partial", "rule": None},
        hooks={"pre_tool": {"action": "require_approval", "hook": "review_uploads"}},
    )
    call = _approval("file_write", {"path": "a"}, hooked)
    assert (call.hook, call.rule, call.reversibility) == ("review_uploads", None, "partial")
    # an activity answer from before reversibility and the rule were recorded
    old = ToolCallResult(ok=False, policy_action="require_approval", output={"args": {"p": 1}})
    call = _approval("t", {"p": 0}, old)
    assert (call.args, call.reversibility, call.rule) == ({"p": 1}, None, None)
