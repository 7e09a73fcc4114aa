"""shell's two forms (``argv`` and 0.7.0's ``cmd``), and safety rules that match what will run
whichever form the model used — including what a regex rule does and does not catch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.tools import tool_call
from armature_temporal.runtime.models import ToolCallInput, ToolCallResult
from armature_temporal.runtime.policy import evaluate_policy
from armature_temporal.spec.models import SafetyRule
from armature_temporal.tools import (
    ToolContext,
    call_tool,
    get_tool_spec,
    policy_args,
    tool_arg_fields,
)

#: The design documents' rule, written against ``cmd``.
RM_RF = SafetyRule.model_validate(
    {
        "tool": "shell",
        "condition": {"field": "cmd", "op": "matches_regex", "value": r"rm\s+-rf"},
        "action": "block",
        "message": "no rm -rf",
    }
)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    root.mkdir()
    return ToolContext(workspace=root, timeout_s=5, output_cap_bytes=1000)


def decide(args: dict[str, Any], rules: list[SafetyRule] | None = None) -> str:
    """The policy's action for a shell call with ``args``, seen as the activity sees it."""
    return evaluate_policy(
        rules=rules if rules is not None else [RM_RF],
        mode="permissive",
        tool="shell",
        args=policy_args("shell", args),
        reversibility="none",
    ).action


# --- the two forms -------------------------------------------------------------------------------


async def test_cmd_is_split_like_a_shell_and_run_without_one(ctx: ToolContext) -> None:
    result = await call_tool("shell", {"cmd": "printf '%s|' 'a b' \"$HOME\" c\\ d"}, ctx)
    assert result.ok, result.error
    assert result.output["stdout"] == "a b|$HOME|c d|"  # quotes group, nothing expands


async def test_argv_and_cmd_run_the_same_program(ctx: ToolContext) -> None:
    by_argv = await call_tool("shell", {"argv": ["echo", "x  y"]}, ctx)
    by_cmd = await call_tool("shell", {"cmd": "echo 'x  y'"}, ctx)
    assert by_argv.output == by_cmd.output and by_cmd.output["stdout"] == "x  y\n"


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"argv": ["ls"], "cmd": "ls"}, "not both"),
        ({}, "give the command to run"),
        ({"cwd": "."}, "give the command to run"),
        ({"cmd": "echo 'unclosed"}, "cannot be split"),
        ({"cmd": "   "}, "empty"),
        ({"argv": []}, "non-empty|at least 1"),
    ],
)
async def test_bad_shell_args_are_refused_before_anything_runs(
    ctx: ToolContext, args: dict[str, Any], problem: str
) -> None:
    result = await call_tool("shell", args, ctx)
    assert result.error_type == "invalid_args"
    assert result.error is not None
    assert re.search(problem, result.error), result.error


@pytest.mark.parametrize(
    ("cmd", "operator"),
    [
        ("ls | wc -l", "|"),
        ("ls|wc", "|"),
        ("make && make install", "&&"),
        ("echo a; rm x", ";"),
        ("python run.py > out.txt", ">"),
        ("cat < in.txt", "<"),
        ("sleep 9 &", "&"),
        ("echo $(id)", "("),
    ],
)
async def test_cmd_with_shell_operators_is_refused_not_misread(
    ctx: ToolContext, cmd: str, operator: str
) -> None:
    result = await call_tool("shell", {"cmd": cmd}, ctx)
    assert result.error_type == "invalid_args"
    assert f"shell syntax {operator!r}" in (result.error or "")
    assert "sh" in (result.error or "")  # says how to run a shell on purpose


async def test_quoted_operators_are_plain_words(ctx: ToolContext) -> None:
    result = await call_tool("shell", {"cmd": "echo 'a | b' \"c;d\" '>'"}, ctx)
    assert result.ok, result.error
    assert result.output["stdout"] == "a | b c;d >\n"


def test_the_model_is_shown_both_forms_and_neither_is_required() -> None:
    params = get_tool_spec("shell").parameters
    assert params["properties"]["argv"]["type"] == "array"
    assert params["properties"]["cmd"]["type"] == "string"
    assert "required" not in params


def test_tool_arg_fields_come_from_the_argument_models() -> None:
    assert tool_arg_fields("shell") == ["argv", "cmd", "timeout_s", "cwd"]
    assert tool_arg_fields("file_read") == ["path"]
    assert tool_arg_fields("file_write") == ["path", "content"]
    assert tool_arg_fields("file_list") == ["path", "recursive"]
    assert tool_arg_fields("http_request") == ["url", "method", "headers", "body", "timeout_s"]
    assert tool_arg_fields("pkg.mod:fn") is None  # known only where it is imported
    assert tool_arg_fields("search") is None  # a tool module's, or unknown


# --- what the policy sees ------------------------------------------------------------------------


def test_policy_sees_argv_and_cmd_whichever_form_was_used() -> None:
    from_cmd = policy_args("shell", {"cmd": "rm  -rf '/my dir'"})
    from_argv = policy_args("shell", {"argv": ["rm", "-rf", "/my dir"]})
    assert from_cmd["argv"] == from_argv["argv"] == ["rm", "-rf", "/my dir"]
    assert from_cmd["cmd"] == from_argv["cmd"] == "rm -rf '/my dir'"  # shlex.join of the argv
    # Args that do not validate are seen as given (and the call fails with invalid_args).
    assert policy_args("shell", {"argv": ["ls"], "cmd": "x"}) == {"argv": ["ls"], "cmd": "x"}
    # Other tools' args are seen as they are.
    assert policy_args("file_read", {"path": "a"}) == {"path": "a"}


def test_a_cmd_rule_blocks_rm_rf_in_either_form() -> None:
    assert decide({"cmd": "rm -rf /"}) == "block"
    assert decide({"argv": ["rm", "-rf", "/"]}) == "block"
    assert decide({"cmd": "ls -la"}) == "allow"
    assert decide({"argv": ["ls", "-la"]}) == "allow"


def test_an_argv_rule_blocks_rm_in_either_form() -> None:
    on_argv = SafetyRule.model_validate(
        {
            "tool": "shell",
            "condition": {"field": "argv.0", "op": "equals", "value": "rm"},
            "action": "block",
        }
    )
    assert decide({"cmd": "rm -rf /"}, [on_argv]) == "block"
    assert decide({"argv": ["rm", "-rf", "/"]}, [on_argv]) == "block"


#: What the rule ``cmd matches_regex rm\s+-rf`` sees (the normalised ``shlex.join`` of the argv
#: that will run) for an attacker's spellings, and whether it blocks them.
CAUGHT: list[dict[str, Any]] = [
    {"cmd": "rm  -rf /"},  # extra spaces: the join has one
    {"cmd": "rm\t-rf /"},  # a tab
    {"cmd": "'rm' -rf /"},  # quoting the program: the quotes are gone once split
    {"cmd": '"rm" "-rf" "/"'},
    {"cmd": "r\\m -rf /"},  # a backslash escape: split gives rm
    {"cmd": "/bin/rm -rf /"},  # a path: the unanchored regex still finds "rm -rf"
    {"cmd": "env rm -rf /"},  # env as the program
    {"cmd": "env FOO=1 rm -rf /"},
    {"cmd": "sudo rm -rf /"},
    {"cmd": "rm -rf -- /"},
    {"cmd": "sh -c 'rm -rf /'"},  # an explicit shell: the inner command is one quoted word
    {"argv": ["sh", "-c", "rm -rf /"]},
    {"argv": ["rm -rf /"]},  # one word (which would not even run: no such program)
]
#: Spellings this regex does NOT catch: the rule is a pattern over text, not an understanding
#: of rm. Prefer an allow-list in strict mode (specs/safe-shell.yaml) for commands that matter.
MISSED: list[dict[str, Any]] = [
    {"cmd": "rm -r -f /"},  # split flags
    {"cmd": "rm -fr /"},  # reordered flags
    {"cmd": "rm -Rf /"},  # capital R (the regex is case-sensitive)
    {"cmd": "rm --recursive --force /"},  # long options
    {"cmd": "find / -delete"},  # another program that deletes
    {"cmd": "sh -c 'r\"\"m -rf /'"},  # obfuscation that only the inner shell undoes
]


@pytest.mark.parametrize("args", CAUGHT, ids=lambda a: repr(a))
def test_attacker_spellings_the_cmd_rule_catches(args: dict[str, Any]) -> None:
    assert decide(args) == "block"


@pytest.mark.parametrize("args", MISSED, ids=lambda a: repr(a))
def test_attacker_spellings_the_cmd_rule_does_not_catch(args: dict[str, Any]) -> None:
    assert decide(args) == "allow"


def test_env_prefix_without_env_does_not_run_at_all() -> None:
    # With no shell, FOO=1 is the program's name: the call fails, whatever the rules say.
    view = policy_args("shell", {"cmd": "FOO=1 rm -rf /"})
    assert view["argv"][0] == "FOO=1"
    assert decide({"cmd": "FOO=1 rm -rf /"}) == "block"


# --- through the activity -------------------------------------------------------------------------


async def run_shell(args: dict[str, Any], **fields: Any) -> ToolCallResult:
    """The tool_call activity for a shell call under the RM_RF rule, in spec 'safety'."""
    result: ToolCallResult = await ActivityEnvironment().run(
        tool_call,
        ToolCallInput(
            run_id="r1",
            stage_id="s",
            tool="shell",
            args=args,
            spec_name="safety",
            safety_rules=[RM_RF.model_dump()],
            **fields,
        ),
    )
    return result


@pytest.mark.parametrize(
    "args",
    [{"cmd": "rm -rf victim"}, {"argv": ["rm", "-rf", "victim"]}],
    ids=["cmd", "argv"],
)
async def test_tool_call_activity_blocks_rm_rf_in_either_form(
    args: dict[str, Any], armature_home: Path
) -> None:
    victim = armature_home / "workspace" / "safety" / "victim"
    victim.mkdir(parents=True)
    result = await run_shell(args)
    assert result.error_type == "policy_blocked" and result.policy_rule == 0
    assert victim.is_dir()  # nothing ran


async def test_tool_call_activity_runs_an_allowed_cmd() -> None:
    result = await run_shell(
        {"cmd": "echo '{{ inputs.word }}'"}, variables={"inputs": {"word": "hi there"}}
    )
    assert result.ok, result.error
    assert result.output["stdout"] == "hi there\n"
