"""A tool program cannot see the record's secrets: ARMATURE_HOME is hidden, its workspace is not.

The tools worker of the local stack shares ``$ARMATURE_HOME`` with the main worker, and runs as
root there, so file modes do not keep a ``shell`` call from reading ``trace.key`` (and forging
MACs) or rewriting the SQLite store. Where the sandbox has a mount namespace (bwrap, unshare),
:func:`armature_temporal.tools.sandbox.run_process` covers ARMATURE_HOME (and the worker's
credential files) with an empty read-only tmpfs and binds the call's workspace back; where a
mount fails, the call fails instead of running unhidden.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from armature_temporal.settings import workspace_root
from armature_temporal.store.trace_store import TraceStore
from armature_temporal.tools import ToolContext, call_tool
from armature_temporal.tools import sandbox as sandbox_module
from armature_temporal.tools.sandbox import (
    Guarantee,
    Sandbox,
    SandboxFailed,
    hidden_paths,
    minimal_env,
    run_process,
    sandbox,
)


def _needs_hiding() -> Sandbox:
    box = sandbox()
    if not box.hides:
        pytest.skip(
            f"no sandbox with a mount namespace works here ({box.note}): nothing can be hidden "
            "from a plain process group, as the module says"
        )
    return box


@pytest.fixture
def store(armature_home: Path) -> TraceStore:
    """A real trace store under ARMATURE_HOME: armature.db (-wal, -shm) and trace.key."""
    made = TraceStore()
    key = made.trace_key(create=True)
    assert key is not None and key.path == armature_home / "trace.key"
    assert (armature_home / "trace.key").read_bytes()
    assert (armature_home / "armature.db").is_file()
    return made


@pytest.fixture
def ctx(armature_home: Path) -> ToolContext:
    """The workspace a tool activity gives a call: under ARMATURE_HOME."""
    workspace = workspace_root("hiding")
    workspace.mkdir(parents=True)
    assert armature_home in workspace.parents
    return ToolContext(workspace=workspace, timeout_s=20, output_cap_bytes=100_000)


async def _sh(ctx: ToolContext, script: str) -> dict[str, object]:
    result = await call_tool("shell", {"argv": ["sh", "-c", script]}, ctx)
    assert result.ok, result.error
    assert isinstance(result.output, dict)
    return result.output


async def test_a_shell_call_cannot_read_the_trace_key_or_the_store(
    store: TraceStore, ctx: ToolContext, armature_home: Path
) -> None:
    _needs_hiding()
    key = armature_home / "trace.key"
    db = armature_home / "armature.db"
    out = await _sh(
        ctx,
        f"cat {key} && echo KEY-READ; "
        f"head -c 16 {db} && echo DB-READ; "
        f"ls -A {armature_home}; echo end",
    )
    assert "KEY-READ" not in str(out["stdout"]) and "DB-READ" not in str(out["stdout"]), out
    assert key.read_bytes().hex() not in str(out["stdout"]).encode().hex()
    assert "SQLite format" not in str(out["stdout"])
    # ARMATURE_HOME looks empty but for the way down to the workspace.
    listing = str(out["stdout"]).splitlines()
    assert listing == ["workspace", "end"], out


async def test_a_shell_call_cannot_write_into_armature_home_outside_its_workspace(
    store: TraceStore, ctx: ToolContext, armature_home: Path
) -> None:
    _needs_hiding()
    db, key = armature_home / "armature.db", armature_home / "trace.key"
    before = (db.read_bytes(), key.read_bytes(), sorted(os.listdir(armature_home)))
    out = await _sh(
        ctx,
        f"echo forged > {key}; echo x > {db}; rm -f {db}-wal {db}-shm; "
        f"echo x > {armature_home}/planted; mkdir {armature_home}/workspace/other; echo done",
    )
    assert str(out["stdout"]).endswith("done\n"), out
    # Under the worker's /tmp (as here) ARMATURE_HOME is under the program's private /tmp, where
    # the writes land and vanish; elsewhere it is covered by a read-only tmpfs.
    assert "Read-only file system" in str(out["stderr"]) or Path("/tmp") in armature_home.parents

    assert (db.read_bytes(), key.read_bytes(), sorted(os.listdir(armature_home))) == before
    assert not (armature_home / "workspace" / "other").exists()


async def test_the_workspace_under_armature_home_stays_readable_and_writable(
    store: TraceStore, ctx: ToolContext
) -> None:
    _needs_hiding()
    (ctx.workspace / "given.txt").write_text("from the worker\n")
    out = await _sh(
        ctx, "pwd; cat given.txt; echo made > made.txt; mkdir -p sub && echo deep > sub/f; ls"
    )
    assert out["exit_code"] == 0, out
    assert out["stdout"] == f"{ctx.workspace}\nfrom the worker\ngiven.txt\nmade.txt\nsub\n"
    assert (ctx.workspace / "made.txt").read_text() == "made\n"
    assert (ctx.workspace / "sub" / "f").read_text() == "deep\n"


async def test_a_call_in_a_workspace_subdirectory_still_sees_the_whole_workspace(
    store: TraceStore, ctx: ToolContext
) -> None:
    _needs_hiding()
    (ctx.workspace / "sub").mkdir()
    (ctx.workspace / "top.txt").write_text("top\n")
    result = await call_tool("shell", {"argv": ["cat", "../top.txt"], "cwd": "sub"}, ctx)
    assert result.ok and result.output["stdout"] == "top\n", result


async def test_the_workers_credential_files_are_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_hiding()
    home = tmp_path / "user"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = canary\n")
    (home / ".netrc").write_text("machine x login y password canary\n")
    monkeypatch.setenv("HOME", str(home))
    assert {home / ".aws", home / ".netrc"} <= set(hidden_paths())
    work = tmp_path / "work"
    work.mkdir()
    done = await run_process(
        ["sh", "-c", "cat ~/.aws/credentials ~/.netrc; ls -A ~/.aws; echo end"],
        cwd=work,
        env={**minimal_env(), "HOME": str(home)},
        timeout_s=10,
        cap=10_000,
    )
    assert "canary" not in done.stdout and done.stdout == "end\n", done


async def test_the_resolved_executable_keeps_its_argv0_while_hiding(ctx: ToolContext) -> None:
    _needs_hiding()
    done = await run_process(
        ["called-as", "-c", 'echo "$0"; pwd'],
        executable="/bin/sh",
        cwd=ctx.workspace,
        env={"PATH": "/nowhere"},
        timeout_s=10,
        cap=1000,
    )
    assert (done.exit_code, done.stdout) == (0, f"called-as\n{ctx.workspace}\n"), done


async def test_a_failed_mount_fails_the_call_instead_of_running_unhidden(
    ctx: ToolContext, armature_home: Path, tmp_path: Path
) -> None:
    box = _needs_hiding()
    marker = tmp_path / "ran"
    with pytest.raises(SandboxFailed, match=r"did not run: .*/workspace/gone: No such file"):
        await run_process(
            ["sh", "-c", f"touch {marker}"],
            cwd=ctx.workspace,
            env=minimal_env(),
            timeout_s=10,
            cap=1000,
            box=box,
            visible=(armature_home / "workspace" / "gone",),  # cannot be bound back
        )
    assert not marker.exists()


def _fake_bwrap(tmp_path: Path, unshare_flags: str) -> Sandbox:
    """A broken bwrap: it skips its options up to ``--`` and runs the rest under
    ``unshare UNSHARE_FLAGS`` (no hiding mounts, and whatever capabilities root has)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs unshare as root, to make namespaces without bwrap's mounts")
    fake = tmp_path / "fake-bwrap"
    fake.write_text(
        '#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift\n'
        f'exec {unshare} {unshare_flags} --fork --kill-child "$@"\n'
    )
    fake.chmod(0o755)
    return Sandbox("bwrap", (str(fake),), "test")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ("--pid", "no mount namespace of its own"),
        ("--pid --mount", "would keep capabilities"),
    ],
)
async def test_a_sandbox_that_gives_less_than_it_must_does_not_run_the_program(
    ctx: ToolContext,
    armature_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    flags: str,
    says: str,
) -> None:
    """Fail closed, through the shell tool: a sandbox (here a bwrap that makes no mount
    namespace, or one that leaves root its capabilities) is checked from inside before the
    program runs; the call is a tool_error that says why, nothing runs, nothing is mounted."""
    broken = _fake_bwrap(tmp_path, flags)
    monkeypatch.setattr(sandbox_module, "sandbox", lambda: broken)
    (armature_home / "trace.key").write_text("k")
    result = await call_tool("shell", {"argv": ["touch", "ran"]}, ctx)
    assert (result.ok, result.error_type) == (False, "tool_error"), result
    assert says in str(result.error), result.error
    assert "ARMATURE_SANDBOX=none" in str(result.error)
    assert not (ctx.workspace / "ran").exists()
    assert (armature_home / "trace.key").read_text() == "k"  # still visible here: not mounted


async def test_every_hiding_sandbox_that_works_here_hides_armature_home(
    store: TraceStore, ctx: ToolContext, armature_home: Path
) -> None:
    """Not only the one auto picks: unshare as root and unshare in a user namespace (and bwrap
    where installed) each hide the key and keep the workspace."""
    from armature_temporal.tools._detect import working as usable

    working = usable()
    if not working:
        pytest.skip("no sandbox with a mount namespace works here")
    for box in working:
        done = await run_process(
            ["sh", "-c", f"cat {armature_home}/trace.key; echo ok > in-ws; cat in-ws"],
            cwd=ctx.workspace,
            env=minimal_env(),
            timeout_s=10,
            cap=10_000,
            box=box,
        )
        assert done.stdout == "ok\n" and "No such file" in done.stderr, (box.kind, done)


@pytest.mark.parametrize(
    ("box", "status", "says"),
    [
        (
            Sandbox("unshare", guarantees=(Guarantee("pid_namespace", True, "pid 1"),)),
            "ok",
            "ARMATURE_HOME (trace key, store) and",
        ),
        (
            Sandbox(
                "unavailable",
                note="nothing works",
                guarantees=(Guarantee("no_capabilities", False, "CapEff 1"),),
            ),
            "fail",
            "tool programs will not run",
        ),
        (Sandbox("process-group", note="t"), "warn", "ARMATURE_HOME is NOT hidden"),
    ],
)
def test_doctor_says_whether_armature_home_is_hidden_from_tools(
    monkeypatch: pytest.MonkeyPatch, box: Sandbox, status: str, says: str
) -> None:
    from armature_temporal.commands.doctor import _sandbox_checks

    monkeypatch.setattr(sandbox_module, "sandbox", lambda: box)
    head, *guarantees = _sandbox_checks()
    assert head.status == status and says in head.detail, head
    for g, check in zip(box.guarantees, guarantees, strict=True):
        assert check.status == ("ok" if g.holds else "fail"), check
        assert ("holds" if g.holds else "does not hold") in check.detail
