"""Every sandbox that works here holds against the escape attempts, not only the one ``auto``
picks (issue #25 item 1): ``unshare`` (the worker has CAP_SYS_ADMIN), ``unshare-user`` (namespaces
inside a user namespace) and ``bwrap`` where it is installed; and the worker side run as an
unprivileged user (``nobody``, no capabilities at all), as real deployments often are.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from armature_temporal.tools.sandbox import Sandbox, minimal_env, run_process
from tests.unit.test_sandbox_escape import ATTACKS, KEY

REPO = Path(__file__).resolve().parents[2]


def _record(root: Path) -> tuple[Path, Path]:
    home = root / "record"
    (home / "workspace" / "w").mkdir(parents=True)
    (home / "trace.key").write_text(KEY)
    (home / "armature.db").write_text(KEY)
    return home, home / "workspace" / "w"


def _contained(stdout: str) -> None:
    assert stdout.endswith("end\n"), stdout
    assert "ESCAPED" not in stdout and KEY not in stdout, stdout
    caps = [line.split(":")[1].strip() for line in stdout.splitlines() if line.startswith("Cap")]
    assert len(caps) == 5 and all(int(c, 16) == 0 for c in caps), stdout
    assert "NoNewPrivs:\t1" in stdout and "block devices: 0" in stdout, stdout


def _kinds() -> list[Sandbox]:
    from armature_temporal.tools._detect import working

    found = working()
    if not found:
        pytest.skip("no sandbox works here")
    return found


async def test_every_working_sandbox_holds_against_the_attacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = []
    for box in _kinds():
        home, workspace = _record(tmp_path / box.kind)
        monkeypatch.setenv("ARMATURE_HOME", str(home))
        done = await run_process(
            ["sh", "-c", ATTACKS, "sh", str(home), sys.executable],
            cwd=workspace,
            env=minimal_env(workspace),
            timeout_s=60,
            cap=200_000,
            box=box,
        )
        _contained(done.stdout)
        tried.append(box.kind)
    # As root, both namespace kinds work; where bwrap is installed it is tried as well.
    expected = ["unshare", "unshare-user"] if os.geteuid() == 0 else ["unshare-user"]
    assert tried[: len(expected)] == expected or os.geteuid() != 0, tried
    if shutil.which("bwrap"):
        assert "bwrap" in tried, tried


def _python_for(uid: int) -> tuple[str, str] | None:
    """A Python the user ``uid`` can run with this project importable: (interpreter,
    PYTHONPATH), or None."""
    path = f"{REPO}{os.pathsep}{sysconfig.get_paths()['purelib']}"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", sys.executable):
        if not os.path.exists(python):
            continue
        probe = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-c",
             "import os, sys, pydantic, armature_temporal.tools.sandbox; "
             "assert os.path.isfile(sys.executable) and os.access(sys.executable, os.X_OK)"],
            env={"PYTHONPATH": path, "PATH": os.defpath},
            capture_output=True,
            check=False,
        )  # fmt: skip
        if probe.returncode == 0:
            return python, path
    return None


#: Run as the unprivileged worker: the sandbox auto picks, and the attacks through it.
WORKER = """
import asyncio, json, os, sys
from pathlib import Path
from armature_temporal.tools.sandbox import minimal_env, run_process, sandbox
async def main():
    box = sandbox()
    home = Path(os.environ["ARMATURE_HOME"])
    ws = home / "workspace" / "w"
    out = {"kind": box.kind, "note": box.note, "caps": open("/proc/self/status").read()}
    env = dict(minimal_env(), HOME=str(ws))
    if box.isolated:
        done = await run_process(["sh", "-c", sys.argv[1], "sh", str(home), sys.executable],
                                 cwd=ws, env=env, timeout_s=60, cap=200000)
        out["stdout"] = done.stdout
        ws_file = ws / "written"
        done = await run_process(["sh", "-c", "echo ok > written"], cwd=ws, env=env,
                                 timeout_s=30, cap=1000)
        out["owner"] = ws_file.stat().st_uid
    print(json.dumps(out))
asyncio.run(main())
"""


def test_an_unprivileged_worker_gets_the_same_sandbox(tmp_path: Path) -> None:
    """The tools worker as ``nobody`` with an empty bounding set: ``unshare-user`` is chosen
    and holds; what the program writes is owned by the worker's uid, not root."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become an unprivileged user")
    uid = pwd.getpwnam("nobody").pw_uid
    found = _python_for(uid)
    if found is None:
        pytest.skip("no Python that user nobody can run with this project importable")
    python, path = found
    root = Path(tempfile.mkdtemp(prefix="armature-nobody-", dir="/tmp"))
    try:
        home, _ = _record(root)
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.chown(name, uid, uid)
        done = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
             "--bounding-set=-all", "--inh-caps=-all", python, "-c", WORKER, ATTACKS],
            env={"PYTHONPATH": path, "PATH": os.environ.get("PATH", os.defpath),
                 "ARMATURE_HOME": str(home), "HOME": str(root)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.splitlines()[-1])
        worker_caps = {
            k: v.strip() for k, v in (line.split(":", 1) for line in out["caps"].splitlines())
        }
        assert int(worker_caps["CapEff"], 16) == 0 and int(worker_caps["CapBnd"], 16) == 0
        if out["kind"] == "unavailable" and "Operation not permitted" in out["note"]:
            pytest.skip(f"this kernel refuses unprivileged user namespaces: {out['note']}")
        assert out["kind"] == "unshare-user", out["note"]
        _contained(out["stdout"])
        assert out["owner"] == uid, out
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_the_remount_fallback_for_kernels_without_mount_setattr_holds_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Linux 5.12 there is no mount_setattr: every mount is remounted read-only one by
    one (ARMATURE_SANDBOX_NO_SETATTR=1 takes that path here), with the same result."""
    monkeypatch.setenv("ARMATURE_SANDBOX_NO_SETATTR", "1")
    for box in _kinds():
        home, workspace = _record(tmp_path / box.kind)
        monkeypatch.setenv("ARMATURE_HOME", str(home))
        done = await run_process(
            ["sh", "-c", ATTACKS + "echo x > /etc/armature-planted; echo ok > w; cat w", "sh",
             str(home), sys.executable],
            cwd=workspace, env=minimal_env(workspace), timeout_s=60, cap=200_000, box=box,
        )  # fmt: skip
        assert "Read-only file system" in done.stderr and done.stdout.endswith("end\nok\n")
        _contained(done.stdout.removesuffix("ok\n"))
        assert not Path("/etc/armature-planted").exists()


async def test_where_no_sandbox_works_programs_do_not_run_and_the_error_says_how_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: no candidate gives the guarantees (here: none is offered), so auto picks
    `unavailable`; a shell call is a tool_error naming the fixes and the waiver, and the
    program did not run. Naming a sandbox that cannot work is an error at once."""
    from armature_temporal.tools import ToolContext, _detect, call_tool
    from armature_temporal.tools import sandbox as sandbox_module
    from armature_temporal.tools.sandbox import SandboxUnavailable

    monkeypatch.setattr(_detect, "candidates", lambda wanted="auto": [])
    _detect.detect.cache_clear()
    try:
        box = _detect.detect("auto")
        assert box.kind == "unavailable" and not box.isolated, box
        with pytest.raises(SandboxUnavailable, match="ARMATURE_SANDBOX=bwrap but it does not"):
            _detect.detect("bwrap")
    finally:
        _detect.detect.cache_clear()
    monkeypatch.setattr(sandbox_module, "sandbox", lambda: box)
    result = await call_tool(
        "shell", {"argv": ["touch", "ran"]}, ToolContext(workspace=tmp_path, timeout_s=10)
    )
    assert (result.ok, result.error_type) == (False, "tool_error"), result
    for fix in (
        "bubblewrap",
        "unprivileged user namespaces",
        "CAP_SYS_ADMIN",
        "ARMATURE_SANDBOX=none",
    ):
        assert fix in str(result.error), (fix, result.error)
    assert not (tmp_path / "ran").exists()


def test_doctor_lists_every_guarantee_as_holding_here() -> None:
    from armature_temporal.commands.doctor import _sandbox_checks
    from armature_temporal.tools._detect import GUARANTEES
    from armature_temporal.tools.sandbox import sandbox

    if not sandbox().isolated:
        pytest.skip(f"no sandbox here ({sandbox().note})")
    head, *lines = _sandbox_checks()
    assert head.status == "ok", head
    assert [c.check for c in lines] == [f"sandbox: {what}" for what in GUARANTEES.values()]
    assert all(c.status == "ok" and c.detail.startswith("holds") for c in lines), lines
