"""A tool program cannot undo its sandbox (issue #25 item 1), tried through the real shell tool.

The review's program kept its capabilities in the sandbox's mount namespace (real root under
``unshare``), so ``umount -l`` on the hiding mounts showed all of ARMATURE_HOME, and unmounting
``/proc`` showed the worker's. Here each trick it used, and the ones a second review would try
next, runs as a ``shell`` call (``call_tool`` -> ``run_process``) against a trace key and a
store, with ARMATURE_HOME both under the worker's ``/tmp`` (as tests have it) and under its
``$HOME`` (as ``~/.armature`` is by default, where only the hiding mounts cover it):
``umount``/``umount -l`` of every cover, ``unshare -rm`` and a raw ``unshare(CLONE_NEWUSER |
CLONE_NEWNS)`` then ``umount2``, ``mount -t proc``, ``mount --bind``, reading every
``/proc/*/environ``, capabilities and ``no_new_privs`` from ``/proc/self/status``, a setuid
copy of a program, raw block devices, ``/etc/shadow``, the worker's ``/tmp`` and ``/run``
(PostgreSQL's socket), services on the worker's loopback, writes outside the workspace, and
the program's environment. Every one must fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from armature_temporal.tools import ToolContext, call_tool
from armature_temporal.tools.sandbox import sandbox

KEY = "7b1d-trace-key-canary"
CANARY = "sk-worker-environ-canary-55"

#: Everything the review tried, and more; prints ESCAPED <how> for each that worked.
ATTACKS = r"""
H="$1"
covers="$H /tmp /proc /dev /run /var/tmp /"
for p in $covers $(awk '{print $5}' /proc/self/mountinfo | sort -ru); do
  umount -l "$p" 2>/dev/null && echo "ESCAPED umount -l $p"
  umount "$p" 2>/dev/null && echo "ESCAPED umount $p"
done
undo="for p in $covers; do umount -l \$p 2>/dev/null && echo ESCAPED unshare \$p; done"
unshare -rm sh -c "$undo; cat $H/trace.key" 2>/dev/null
unshare -m sh -c "$undo" 2>/dev/null
"$2" -I -c "
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x00020000) == 0:
    for p in sys.argv[1].split():
        if libc.umount2(p.encode(), 2) == 0:
            print('ESCAPED unshare(2)+umount2', p)
    print(open(sys.argv[2]).read())
" "$covers" "$H/trace.key" 2>/dev/null
mount -t proc proc /mnt 2>/dev/null && echo "ESCAPED mount -t proc"
mount --bind / /mnt 2>/dev/null && echo "ESCAPED mount --bind"
mount -t tmpfs none "$H" 2>/dev/null && echo "ESCAPED mount over the record"
cat "$H/trace.key" "$H/armature.db" "$H/payloads/p.json" 2>/dev/null
cat /proc/*/environ /proc/*/task/*/environ 2>/dev/null | tr '\0' '\n' | grep -a CANARY
echo "processes: $(ls /proc | grep -c '^[0-9]')"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status
echo "block devices: $(find /dev -type b 2>/dev/null | wc -l)"
echo "shadow: $(cat /etc/shadow 2>/dev/null | wc -c)"
echo end
"""


@pytest.fixture(params=["under-tmp", "under-home"])
def record(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """ARMATURE_HOME holding a trace key, a store and a payload, with a workspace inside."""
    if request.param == "under-tmp":
        home = tmp_path / "record"
        home.mkdir()
    else:
        try:
            home = Path(tempfile.mkdtemp(prefix=".armature-escape-", dir=Path.home()))
        except OSError as exc:
            pytest.skip(f"cannot make a directory under $HOME: {exc}")
    monkeypatch.setenv("ARMATURE_HOME", str(home))
    monkeypatch.setenv("ARMATURE_ESCAPE_CANARY", CANARY)
    (home / "trace.key").write_text(KEY)
    (home / "armature.db").write_text(f"SQLite format 3 {KEY}")
    (home / "payloads").mkdir()
    (home / "payloads" / "p.json").write_text(KEY)
    (home / "workspace" / "escape").mkdir(parents=True)
    try:
        yield home
    finally:
        if request.param == "under-home":
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def ctx(record: Path) -> ToolContext:
    return ToolContext(workspace=record / "workspace" / "escape", timeout_s=60)


def _isolated() -> None:
    box = sandbox()
    if not box.isolated:
        pytest.skip(f"no sandbox here ({box.note}); tool programs would not run at all")


async def _sh(ctx: ToolContext, script: str, *args: str) -> dict[str, object]:
    result = await call_tool("shell", {"argv": ["sh", "-c", script, "sh", *args]}, ctx)
    assert result.ok, result.error
    return result.output


async def test_no_trick_of_the_review_lifts_the_covers(ctx: ToolContext, record: Path) -> None:
    _isolated()
    out = await _sh(ctx, ATTACKS, str(record), sys.executable)
    stdout = str(out["stdout"])
    assert stdout.endswith("end\n"), out
    assert "ESCAPED" not in stdout, stdout
    assert KEY not in stdout and CANARY not in stdout, stdout
    assert (record / "trace.key").read_text() == KEY


async def test_the_program_has_no_capability_and_no_new_privileges(ctx: ToolContext) -> None:
    _isolated()
    out = await _sh(ctx, ATTACKS, str(ctx.workspace.parent.parent), sys.executable)
    status = dict(
        line.split(":", 1) for line in str(out["stdout"]).splitlines() if line.startswith("Cap")
    )
    assert set(status) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}, out
    assert all(int(value, 16) == 0 for value in status.values()), status
    assert "NoNewPrivs:\t1" in str(out["stdout"])
    if shutil.which("capsh"):
        said = await _sh(ctx, "capsh --print")
        current = [line for line in str(said["stdout"]).splitlines() if "Current" in line]
        assert current and current[0].strip().rstrip("=").rstrip() in ("Current:", ""), said


async def test_a_setuid_program_gains_nothing(ctx: ToolContext) -> None:
    """A setuid-root copy of a program, made by the worker in the workspace, runs with the
    program's own (empty) capabilities: no_new_privs, and every mount is nosuid."""
    _isolated()
    if os.geteuid() != 0:
        pytest.skip("needs root to make a setuid-root file")
    copy = ctx.workspace / "suid-cat"
    shutil.copy("/bin/cat", copy)
    copy.chmod(0o4755)
    assert copy.stat().st_mode & stat.S_ISUID
    out = await _sh(ctx, "./suid-cat /proc/self/status | grep -E '^(CapEff|CapPrm|NoNewPrivs)'")
    fields = dict(line.split(":\t") for line in str(out["stdout"]).splitlines())
    assert (int(fields["CapEff"], 16), int(fields["CapPrm"], 16)) == (0, 0), out
    assert fields["NoNewPrivs"] == "1"


async def test_only_its_own_processes_and_devices_are_there(ctx: ToolContext) -> None:
    _isolated()
    out = await _sh(ctx, ATTACKS, str(ctx.workspace.parent.parent), sys.executable)
    lines = str(out["stdout"]).splitlines()
    (count,) = [line for line in lines if line.startswith("processes: ")]
    assert int(count.split(": ")[1]) <= 6, lines
    assert "block devices: 0" in lines and "shadow: 0" in lines, lines
    listing = await _sh(ctx, "ls -A /dev")
    assert set(str(listing["stdout"]).split()) <= {
        "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
        "fd", "stdin", "stdout", "stderr",
    }, listing  # fmt: skip


async def test_the_workers_tmp_and_run_are_not_the_programs(ctx: ToolContext) -> None:
    """The worker's /tmp and /run are replaced by private ones: a file the worker left there
    and every unix socket (PostgreSQL's in /run/postgresql reaches the database with no
    network at all) are gone; what the program writes there never reaches the worker."""
    _isolated()
    left = Path(tempfile.mkdtemp(prefix="worker-tmp-", dir="/tmp"))
    (left / "secret").write_text(KEY)
    sockets = [p for p in Path("/run").rglob("*") if _is_socket(p)][:5]
    try:
        listed = " ".join(str(p) for p in sockets)
        out = await _sh(
            ctx,
            f'cat {left}/secret; for s in {listed}; do [ -e "$s" ] && echo "SOCKET $s"; done; '
            f"echo planted > /tmp/{left.name}-planted; echo done",
        )
        assert str(out["stdout"]) == "done\n", out
        assert not Path(f"/tmp/{left.name}-planted").exists()
    finally:
        shutil.rmtree(left)
        Path(f"/tmp/{left.name}-planted").unlink(missing_ok=True)


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def _reachable_unix(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


CONNECT = r"""
import socket, sys
for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    try:
        if target.startswith("/"):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(3)
            s.connect(target)
        else:
            s = socket.create_connection((host, int(port)), timeout=3)
        print("REACHED", target)
        s.close()
    except OSError as e:
        print("refused", target, e)
"""


async def test_services_on_the_workers_machine_are_unreachable(ctx: ToolContext) -> None:
    """A listener on the worker's 127.0.0.1 (the Temporal frontend in the review), and
    PostgreSQL and Redis where they run (TCP and PostgreSQL's unix socket)."""
    _isolated()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        targets = [f"127.0.0.1:{listener.getsockname()[1]}"]
        targets += [f"127.0.0.1:{p}" for p in (5432, 6379) if _reachable("127.0.0.1", p)]
        pg = "/run/postgresql/.s.PGSQL.5432"
        if _is_socket(Path(pg)) and _reachable_unix(pg):  # PostgreSQL's own, from here
            targets.append(pg)
        result = await call_tool(
            "shell", {"argv": [sys.executable, "-I", "-c", CONNECT, *targets]}, ctx
        )
    assert result.ok, result.error
    out = result.output
    said = str(out["stdout"])
    assert "REACHED" not in said, said
    assert [line.split()[1] for line in said.splitlines() if line.startswith("refused ")] == (
        targets
    ), out


async def test_nothing_outside_the_workspace_is_writable(ctx: ToolContext) -> None:
    """A uid-0 program without capabilities still passes owner checks: every mount but the
    workspace and the private tmpfs is read-only. (Only files this test made are aimed at,
    so a run against an unsandboxed build harms nothing.)"""
    _isolated()
    victim = Path(tempfile.mkdtemp(prefix=".armature-victim-", dir=Path.home()))
    (victim / "existing").write_text("before\n")
    try:
        out = await _sh(
            ctx,
            f"echo x > {victim}/planted; echo x >> {victim}/existing; "
            "echo ok > in-workspace; cat in-workspace",
        )
        assert str(out["stdout"]) == "ok\n", out
        assert str(out["stderr"]).count("Read-only file system") == 2, out
        assert not (victim / "planted").exists()
        assert (victim / "existing").read_text() == "before\n"
        assert (ctx.workspace / "in-workspace").read_text() == "ok\n"
    finally:
        shutil.rmtree(victim)


async def test_a_program_gets_an_allow_listed_environment(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the worker's: DB_PASS, MYSQL_PWD, GH_PAT, a FOO_CRED and a provider key stay behind;
    HOME is the workspace, TMPDIR the private /tmp."""
    for name in ("DB_PASS", "MYSQL_PWD", "GH_PAT", "FOO_CRED", "OPENAI_API_KEY", "SSH_AUTH_SOCK"):
        monkeypatch.setenv(name, CANARY)
    result = await call_tool("shell", {"argv": ["env"]}, ctx)
    assert result.ok, result.error
    env = dict(line.split("=", 1) for line in str(result.output["stdout"]).splitlines())
    assert CANARY not in str(result.output["stdout"])
    assert env["HOME"] == str(ctx.workspace) and env["TMPDIR"] == "/tmp", env
    allowed = {"PATH", "LANG", "TZ", "HOME", "TMPDIR", "PWD"}  # PWD: the shell's own
    assert {k for k in env if not k.startswith("LC_")} <= allowed, env
