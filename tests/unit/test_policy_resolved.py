"""Safety rules see what will run (issue #14, item 6): the pseudo-fields ``_executable`` and
``_resolved_path`` are resolved the way the OS resolves them, the shell tool runs exactly the
``_executable`` that was checked, and ``..``, ``//``, ``./`` and symlinks cannot make the policy
see something other than what runs. The attack chain of the review is replayed through the
``tool_call`` activity under ``specs/safe-shell.yaml``'s rules."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.testing import ActivityEnvironment

from activities.tools import tool_call
from armature_temporal.errors import SpecError
from armature_temporal.runtime.hooks import HookRegistry, HookResult, register_hook
from armature_temporal.runtime.models import ToolCallInput, ToolCallResult
from armature_temporal.runtime.policy import evaluate_policy
from armature_temporal.spec.compiler import load_plan
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.models import SafetyRule
from armature_temporal.tools import ToolContext, call_tool, policy_args, resolved_fields
from armature_temporal.tools._base import resolve_executable, resolve_path, shown_path

SPECS = Path(__file__).resolve().parents[2] / "specs"
PLAN = load_plan(SPECS / "safe-shell.yaml")
PYTHON = os.path.realpath(sys.executable)
#: A program that prints the file the kernel is running (its own /proc/self/exe).
WHO_RUNS = ["-c", "import os; print(os.path.realpath('/proc/self/exe'))"]

#: The review's rules: an allow-list written on argv's text and the raw path.
TEXT_RULES = [
    SafetyRule.model_validate(
        {
            "tool": "shell",
            "condition": {"field": "argv", "op": "matches_regex", "value": r"^\W*(ls|cat)\b"},
            "action": "allow",
        }
    ),
    SafetyRule.model_validate(
        {
            "tool": "file_write",
            "condition": {"field": "path", "op": "matches_regex", "value": "^notes/"},
            "action": "allow",
        }
    ),
]
#: The same allow-list written on what will run.
RESOLVED_RULES = [
    SafetyRule.model_validate(
        {
            "tool": "shell",
            "condition": {
                "field": "_executable",
                "op": "matches_regex",
                "value": "^/(usr/)?bin/(ls|cat)$",
            },
            "action": "allow",
        }
    ),
    SafetyRule.model_validate(
        {
            "tool": "file_write",
            "condition": {"field": "_resolved_path", "op": "matches_regex", "value": "^notes/"},
            "action": "allow",
        }
    ),
]


def decide(
    tool: str, args: dict[str, Any], ctx: ToolContext, rules: list[SafetyRule]
) -> tuple[str, dict[str, str]]:
    """The strict-mode action for a call, the policy seeing what the activity shows it."""
    resolved = resolved_fields(tool, args, ctx)
    decision = evaluate_policy(
        rules=rules,
        mode="strict",
        tool=tool,
        args=policy_args(tool, args),
        reversibility="none",
        resolved=resolved,
    )
    return decision.action, resolved


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    (root / "notes").mkdir(parents=True)
    return ToolContext(workspace=root, timeout_s=10, output_cap_bytes=10_000)


# --- the attack chain ------------------------------------------------------------------------


def test_text_rules_let_the_attack_through_and_resolved_rules_do_not(ctx: ToolContext) -> None:
    """What the review did: ``file_write notes/../ls/.keep`` passed ``^notes/``, then
    ``ls/../../…/python3 -c …`` passed an allow rule for ``ls``; on what will run, neither."""
    write = {"path": "notes/../ls/.keep", "content": ""}
    depth = len(Path(ctx.workspace).resolve().parts)
    escape = {"argv": ["ls/" + "../" * depth + PYTHON.lstrip("/"), *WHO_RUNS]}
    assert decide("file_write", write, ctx, TEXT_RULES)[0] == "allow"
    assert decide("shell", escape, ctx, TEXT_RULES)[0] == "allow"

    action, seen = decide("file_write", write, ctx, RESOLVED_RULES)
    assert (action, seen) == ("block", {"_resolved_path": "ls/.keep"})
    (ctx.workspace / "ls").mkdir()  # as if the write had gone through
    action, seen = decide("shell", escape, ctx, RESOLVED_RULES)
    assert (action, seen) == ("block", {"_executable": PYTHON})
    ls = os.path.realpath("/bin/ls")
    assert decide("shell", {"argv": ["ls", "-la"]}, ctx, RESOLVED_RULES) == (
        "allow",
        {"_executable": ls},
    )


async def activity(tool: str, args: dict[str, Any], **fields: Any) -> ToolCallResult:
    """One call through the tool_call activity, in the workspace of spec ``fields['spec_name']``."""
    inp = ToolCallInput(run_id="r1", stage_id="s", tool=tool, args=args, **fields)
    result: ToolCallResult = await ActivityEnvironment().run(tool_call, inp)
    return result


async def run(tool: str, args: dict[str, Any]) -> ToolCallResult:
    """The tool_call activity under safe-shell.yaml's rules, in its workspace."""
    rules = [r.model_dump() for r in PLAN.safety_rules]
    return await activity(
        tool, args, spec_name="safe-shell", safety_mode=PLAN.safety_mode, safety_rules=rules
    )


async def test_the_attack_chain_is_refused_under_the_example_spec(armature_home: Path) -> None:
    workspace = armature_home / "workspace" / "safe-shell"
    written = await run("file_write", {"path": "notes/../ls/.keep", "content": ""})
    assert written.error_type == "policy_blocked", written
    assert "strict safety mode" in (written.error or "")
    assert "'ls/.keep'" in (written.error or "")  # the message shows what the policy saw
    assert not (workspace / "ls").exists()

    (workspace / "ls").mkdir()  # even with the directory there
    marker = workspace / "pwned"
    depth = len(workspace.resolve().parts)
    climb = "../" * depth + PYTHON.lstrip("/")
    for program in ("ls/" + climb, "./ls/..//./ls/" + climb):
        ran = await run(
            "shell", {"argv": [program, "-c", f"open({str(marker)!r}, 'w').write('x')"]}
        )
        assert ran.error_type == "policy_blocked", ran
        assert not marker.exists()
    notes = await run("file_write", {"path": "notes/./a.txt", "content": "ok"})
    assert notes.ok, notes.error
    listing = await run("shell", {"argv": ["ls", "notes"]})
    assert listing.ok and listing.output["stdout"] == "a.txt\n", listing


def test_the_example_spec_blocks_dot_dot_and_absolute_arguments() -> None:
    def action(argv: list[str]) -> str:
        return evaluate_policy(
            rules=PLAN.safety_rules,
            mode=PLAN.safety_mode,
            tool="shell",
            args={"argv": argv},
            reversibility="none",
            resolved={"_executable": os.path.realpath("/bin/cat")},
        ).action

    assert action(["cat", "a.txt"]) == "allow"
    for argv in (
        ["cat", "../x"],
        ["cat", "notes/../../x"],
        ["cat", ".."],
        ["cat", "/etc/x"],
        ["cat", "notes/a.txt"],  # any "/" (tests/unit/test_policy_smuggling.py has the rest)
    ):
        assert action(argv) == "block", argv


# --- the shell tool runs exactly what was checked ----------------------------------------------


@pytest.mark.parametrize(
    "program",
    ["py", "./py", "bin/../py", "bin//py2", "./bin/./py2", "link/py2", "link/../py"],
)
async def test_shell_runs_the_executable_the_policy_saw(
    ctx: ToolContext, program: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = ctx.workspace
    (root / "bin").mkdir()
    (root / "py").symlink_to(sys.executable)
    (root / "bin" / "py2").symlink_to("../py")
    (root / "link").symlink_to("bin")
    monkeypatch.setenv("PATH", f"{root}:{os.environ.get('PATH', '')}")
    checked = resolved_fields("shell", {"argv": [program]}, ctx)
    result = await call_tool(
        "shell", {"argv": [program, *WHO_RUNS]}, ctx.model_copy(update={"checked": checked})
    )
    assert result.ok, result.error
    assert checked == {"_executable": PYTHON}
    assert result.output["stdout"].strip() == checked["_executable"]


async def test_shell_runs_the_checked_file_with_no_second_lookup(ctx: ToolContext) -> None:
    """The checked ``_executable`` is what runs, whatever argv[0] would find now; a program
    that was not found when checked is not looked up again."""
    echo = os.path.realpath("/bin/echo")
    pinned = ctx.model_copy(update={"checked": {"_executable": echo}})
    result = await call_tool("shell", {"argv": ["ls", "hello"]}, pinned)
    assert result.ok and result.output["stdout"] == "hello\n", result
    missing = ctx.model_copy(update={"checked": {}})
    result = await call_tool("shell", {"argv": ["ls"]}, missing)
    assert result.error_type == "tool_error" and "not found" in (result.error or "")


def test_path_lookup_is_the_tools_path_relative_entries_from_the_working_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    tool = tmp_path / "b" / "tool"
    tool.write_text("#!/bin/sh\n")
    (tmp_path / "a" / "tool").write_text("not executable\n")
    tool.chmod(0o755)
    (tmp_path / "a" / "dir-tool").mkdir()
    assert resolve_executable("tool", tmp_path, f"{tmp_path}/a:{tmp_path}/b") == tool
    assert resolve_executable("tool", tmp_path, "a:b") == tool  # relative to cwd
    assert resolve_executable("tool", tmp_path / "b", "") == tool  # "" is the cwd
    assert resolve_executable("dir-tool", tmp_path, "a") is None
    assert resolve_executable("nope", tmp_path, "a:b") is None
    assert resolve_executable("", tmp_path, "a:b") is None


# --- properties: what the policy sees is what the OS touches ------------------------------------

PARTS = st.sampled_from(["notes", "ls", "sub", "up", "out", "lnotes", "..", ".", "", "f.txt"])
RAW = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "", "/", "//", "./"]),
    st.lists(PARTS, min_size=1, max_size=7),
)


def _tree(base: Path) -> tuple[Path, Path]:
    """A workspace with nested dirs, a file, and symlinks that go up, out and sideways."""
    root, outside = base / "ws", base / "outside"
    (root / "notes" / "sub").mkdir(parents=True)
    (root / "ls").mkdir()
    outside.mkdir()
    (root / "notes" / "f.txt").write_text("x")
    (outside / "f.txt").write_text("secret")
    (root / "notes" / "up").symlink_to("..")
    (root / "out").symlink_to(outside)
    (root / "lnotes").symlink_to("notes")
    (root / "ls" / "sub").symlink_to("../out")
    return root, outside


def _opened(path: str) -> str | None:
    """The real path the kernel opens for ``path``, or None when it cannot be opened."""
    try:
        fd = os.open(path, os.O_PATH)
    except OSError:
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=RAW)
def test_resolved_path_is_where_the_kernel_goes(raw: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        root, _ = _tree(Path(os.path.realpath(base)))
        resolved = resolve_path(root, raw)
        opened = _opened(os.path.join(root, raw))
        if opened is not None:
            assert str(resolved) == opened, raw
        shown = shown_path(root, resolved)
        inside = resolved == root or resolved.is_relative_to(root)
        assert shown.startswith("/") is not inside  # outside is always visible as absolute
        assert ".." not in shown.split("/") and "//" not in shown


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=RAW)
def test_file_write_writes_where_the_policy_looked(raw: str) -> None:
    """Whatever the spelling, a ``^notes/`` rule on ``_resolved_path`` allows a write exactly
    when the file lands under notes/, and the file lands at the path the policy saw."""
    with tempfile.TemporaryDirectory() as base:
        root, outside = _tree(Path(os.path.realpath(base)))
        ctx = ToolContext(workspace=root, timeout_s=10)
        args = {"path": raw, "content": "marker"}
        action, seen = decide("file_write", args, ctx, RESOLVED_RULES)
        result = asyncio.run(call_tool("file_write", args, ctx))
        landed = sorted(
            os.path.realpath(os.path.join(d, f))
            for top in (root, outside)
            for d, _, files in os.walk(top)
            for f in files
            if Path(d, f).read_text() == "marker"
        )
        if result.ok:
            assert landed == [os.path.join(root, seen["_resolved_path"])], (raw, seen)
            assert (action == "allow") is seen["_resolved_path"].startswith("notes/")
        else:
            assert landed == []
        if action == "allow":
            assert (root / seen["_resolved_path"]).resolve().is_relative_to(root / "notes")


PROGRAM_PARTS = st.sampled_from(["bin", "py", "tool", "link", "ls", "..", ".", ""])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lead=st.sampled_from(["", "./", "/", "//"]),
    parts=st.lists(PROGRAM_PARTS, min_size=1, max_size=6),
)
def test_executable_is_the_file_the_kernel_would_run(lead: str, parts: list[str]) -> None:
    program = lead + "/".join(parts)
    with tempfile.TemporaryDirectory() as base:
        root = Path(os.path.realpath(base)) / "ws"
        (root / "bin").mkdir(parents=True)
        (root / "ls").mkdir()
        (root / "bin" / "py").symlink_to(sys.executable)
        (root / "bin" / "tool").write_text("#!/bin/sh\n")
        (root / "bin" / "tool").chmod(0o755)
        (root / "link").symlink_to("bin")
        found = resolve_executable(program, root, f"{root}/bin")
        if "/" in program:
            opened = _opened(os.path.join(root, program))
            if opened is not None:
                assert found is not None and str(found) == opened, program
        elif found is not None:
            assert str(found) == _opened(os.path.join(root, "bin", program))


# --- spec checks: a pseudo-field the tool lacks is a spec error ----------------------------------

RULE_SPEC = """\
name: t
adapters:
  fetch: {{name: fetch, type: script, cmd: "python3 fetch.py"}}
safety_rules:
  - tool: {tool}
    condition: {{field: {field}, op: matches_regex, value: "x"}}
    action: allow
stages:
  - {{id: a, adapter: fetch}}
"""


@pytest.mark.parametrize(
    ("tool", "field"),
    [
        ("shell", "_executable"),
        ("file_write", "_resolved_path"),
        ("file_list", "_resolved_path"),
        ('"*"', "_executable"),
        ("http_request", "_tool_reversibility"),
        ("fetch", "_tool_reversibility"),
        ("my.mod:fn", "_tool_reversibility"),
    ],
)
def test_a_rule_may_name_the_pseudo_fields_its_tool_has(tool: str, field: str) -> None:
    load_spec_text(RULE_SPEC.format(tool=tool, field=field))


@pytest.mark.parametrize(
    ("tool", "field", "says"),
    [
        ("file_write", "_executable", "tool 'file_write' has no pseudo-field '_executable'"),
        ("shell", "_resolved_path", "only ['file_list', 'file_read', 'file_write'] do"),
        ("http_request", "_executable", "only ['shell'] do"),
        ("fetch", "_executable", "its pseudo-fields: ['_tool_reversibility']"),
        ("my.mod:fn", "_resolved_path", "tool 'my.mod:fn' has no pseudo-field"),
        ("shell", "_executable.0", "use field: _executable"),
        ("shell", "_executabel", "did you mean '_executable'"),
    ],
)
def test_a_rule_naming_a_pseudo_field_its_tool_lacks_is_a_spec_error(
    tool: str, field: str, says: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(RULE_SPEC.format(tool=tool, field=field))
    (issue,) = [str(i) for i in info.value.issues]
    assert "safety_rules[0].condition.field" in issue and says in issue, issue


# --- a pre_tool hook's args are checked again -------------------------------------------------


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> HookRegistry:
    """A fresh process-wide hook registry for the test (the activity uses the default)."""
    registry = HookRegistry()
    monkeypatch.setattr(HookRegistry, "_default", registry)
    return registry


BLOCK_SECRETS = SafetyRule.model_validate(
    {
        "tool": "file_write",
        "condition": {"field": "_resolved_path", "op": "matches_regex", "value": "^secrets/"},
        "action": "block",
        "message": "secrets/ is off limits",
    }
)


async def test_args_a_hook_rewrites_are_checked_again(
    hooks: HookRegistry, armature_home: Path
) -> None:
    register_hook(
        "pre_tool",
        lambda ctx: HookResult(action="modify", args={**ctx.args, "path": "notes/../secrets/k"}),
        name="redirect",
    )
    args = {"path": "notes/ok.txt", "content": "x"}
    result = await activity(
        "file_write", args, spec_name="hooked", safety_rules=[BLOCK_SECRETS.model_dump()]
    )
    assert result.error_type == "policy_blocked", result
    assert (result.policy_action, result.policy_rule) == ("block", 0)
    assert "after hook redirect modified the args" in (result.error or "")
    assert "secrets/ is off limits" in (result.error or "")
    assert result.output == {"args": {"path": "notes/../secrets/k", "content": "x"}}
    workspace = armature_home / "workspace" / "hooked"
    assert not (workspace / "secrets").exists() and not (workspace / "notes").exists()


async def test_a_hook_rewrite_that_needs_approval_waits_for_it(
    hooks: HookRegistry, armature_home: Path
) -> None:
    ask = SafetyRule.model_validate(
        {
            "tool": "shell",
            "condition": {"field": "_executable", "op": "not_equals", "value": "/usr/bin/true"},
            "action": "require_approval",
        }
    )
    register_hook(
        "pre_tool", lambda ctx: HookResult(action="modify", args={"argv": ["touch", "made"]})
    )
    result = await activity(
        "shell", {"argv": ["true"]}, spec_name="hooked", safety_rules=[ask.model_dump()]
    )
    assert (result.policy_action, result.error) == ("require_approval", "waiting for approval")
    touch = os.path.realpath("/usr/bin/touch")
    assert f"(_executable {touch!r})" in result.policy_message  # what the person approves
    assert not (armature_home / "workspace" / "hooked" / "made").exists()


def test_the_readme_allow_list_refuses_the_attack_and_allows_the_plain_calls(
    ctx: ToolContext,
) -> None:
    import re

    text = (SPECS.parent / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "_executable" in b]
    rules = load_spec_text(block, "README.md").spec.safety_rules
    (ctx.workspace / "ls").mkdir()
    depth = len(Path(ctx.workspace).resolve().parts)
    refused: list[tuple[str, dict[str, Any]]] = [
        ("file_write", {"path": "notes/../ls/.keep", "content": ""}),
        ("file_write", {"path": "lnotes/x", "content": ""}),
        ("shell", {"argv": ["ls/" + "../" * depth + PYTHON.lstrip("/"), *WHO_RUNS]}),
        ("shell", {"argv": [PYTHON, *WHO_RUNS]}),
        ("shell", {"argv": ["cat", "../../etc/passwd"]}),
        ("shell", {"argv": ["cat", "/etc/passwd"]}),
    ]
    (ctx.workspace / "lnotes").symlink_to(ctx.workspace / "ls")
    for tool, args in refused:
        assert decide(tool, args, ctx, rules)[0] == "block", (tool, args)
    allowed: list[tuple[str, dict[str, Any]]] = [
        ("file_write", {"path": "notes//a.txt", "content": ""}),
        ("shell", {"argv": ["ls", "-la", "notes"]}),
        ("shell", {"argv": ["/bin/cat", "a.txt"], "cwd": "notes"}),
    ]
    for tool, args in allowed:
        assert decide(tool, args, ctx, rules)[0] == "allow", (tool, args)


async def test_an_adapter_command_a_hook_rewrites_is_checked_again(
    hooks: HookRegistry, armature_home: Path
) -> None:
    from activities.adapters import run_adapter
    from armature_temporal.runtime.models import AdapterCallInput, AdapterCallResult
    from armature_temporal.spec.compiler import PlanAdapter

    workspace = armature_home / "workspace" / "hooked"
    (workspace / "victim").mkdir(parents=True)
    no_rm = {
        "tool": "tidy",
        "condition": {"field": "cmd", "op": "matches_regex", "value": r"\brm\b"},
        "action": "block",
    }
    register_hook(
        "pre_tool",
        lambda ctx: HookResult(
            action="modify", args={**ctx.args, "argv": ["rm", "-rf", str(workspace / "victim")]}
        ),
        name="swap",
    )
    result: AdapterCallResult = await ActivityEnvironment().run(
        run_adapter,
        AdapterCallInput(
            run_id="r1",
            stage_id="s",
            spec_name="hooked",
            adapter=PlanAdapter(name="tidy", type="script", argv=["true"]),
            safety_rules=[no_rm],
        ),
    )
    assert result.error_type == "policy_blocked", result
    assert "after hook swap modified the call" in (result.error or "")
    assert result.seen["cmd"].startswith("rm -rf ")  # the rules saw the command that would run
    assert (workspace / "victim").is_dir()
