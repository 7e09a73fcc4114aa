"""ARMATURE_HOME is Armature's and private (issue 25, item 10), and an unusable one is a
one-line error (issue 26, item 17); doctor names a process writing to a deleted copy of the
store (issue 26, item 1).

An existing home kept the mode it was made with (0755) and the dev server's ``temporal.db``
(every payload of every run) was 0644: any local user could read them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from armature_temporal.commands.doctor_home import deleted_store_check, home_modes_check
from armature_temporal.runtime.private import secure_home
from armature_temporal.service import devstack

ROOT = Path(__file__).resolve().parents[2]
ARMATURE = str(Path(sys.executable).parent / "armature")


def armature(home: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ARMATURE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "ARMATURE_HOME": str(home)},
        timeout=120,
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def loose_home(tmp_path: Path) -> Path:
    """A home as an older Armature (or a umask of 022) left it."""
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    for name in ("temporal.db", "armature.db", "trace.key", "logs/temporal.log"):
        (home / name).write_bytes(b"x")
        os.chmod(home / name, 0o644)
    os.chmod(home / "logs", 0o755)
    os.chmod(home, 0o755)
    return home


def test_the_next_command_makes_an_existing_home_private_and_says_so_once(
    tmp_path: Path,
) -> None:
    home = loose_home(tmp_path)
    user_file = home / "notes.txt"  # not Armature's: left as the user made it
    user_file.write_text("mine")
    os.chmod(user_file, 0o644)

    first = armature(home, "validate", "specs/quickstart.yaml")
    assert first.returncode == 0, first.stderr
    notes = [line for line in first.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 6, first.stderr
    assert f"note: {home / 'temporal.db'} was 0644, now 0600" in first.stderr
    assert f"note: {home} was 0755, now 0700" in first.stderr
    assert mode(home) == 0o700 and mode(home / "logs") == 0o700
    for name in ("temporal.db", "armature.db", "trace.key", "logs/temporal.log"):
        assert mode(home / name) == 0o600, name
    assert mode(user_file) == 0o644

    second = armature(home, "validate", "specs/quickstart.yaml")
    assert second.returncode == 0 and "note:" not in second.stderr


def test_what_the_dev_server_creates_in_the_home_is_owner_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    made = home / "temporal.db"
    # The dev server's own process, as _spawn starts it: it creates its database with the
    # modes its umask allows (open(2) with 0666, as SQLite does).
    program = f"import os; os.close(os.open({str(made)!r}, os.O_CREAT | os.O_WRONLY, 0o666))"
    old = os.umask(0o022)  # a common login umask: without the spawn's own, this makes 0644
    try:
        args = [sys.executable, "-c", program]
        pid = devstack._spawn(args, home, "fake_server", dict(os.environ))
    finally:
        os.umask(old)
    os.waitpid(pid, 0)
    assert mode(made) == 0o600
    assert mode(home / "logs" / "fake_server.log") == 0o600
    assert mode(home / "run" / "fake_server.pid") == 0o600
    assert mode(home / "run") == 0o700


def test_doctor_warns_on_what_is_still_loose_and_names_the_paths(tmp_path: Path) -> None:
    home = loose_home(tmp_path)
    warned = home_modes_check(home)
    assert warned.status == "warn"
    assert f"{home / 'temporal.db'} is 0644" in warned.detail
    assert f"{home} is 0755" in warned.detail
    assert warned.fix.startswith("chmod go-rwx ") and str(home / "trace.key") in warned.fix
    secure_home(home)
    assert home_modes_check(home).status == "ok"
    assert home_modes_check(tmp_path / "none").status == "ok"


def test_doctor_from_the_cli_reports_the_home_private_after_startup_made_it_so(
    tmp_path: Path,
) -> None:
    home = loose_home(tmp_path)
    (home / "armature.db").unlink()  # a store doctor can open
    done = armature(home, "doctor", "--address", "127.0.0.1:1", "--json")
    checks = {c["check"]: c for c in json.loads(done.stdout)}
    assert checks["home modes"]["status"] == "ok", checks["home modes"]
    assert checks["store files"]["status"] == "ok"
    assert f"note: {home / 'temporal.db'} was 0644, now 0600" in done.stderr


HOLDER = r"""
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.unlink(path)          # what the other process's checkpoint did to the worker's -wal
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see handles")
def test_doctor_fails_when_a_process_writes_to_a_deleted_wal(tmp_path: Path) -> None:
    db = tmp_path / "armature.db"
    db.write_bytes(b"")
    assert deleted_store_check(db).status == "ok"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, f"{db}-wal"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "held"
        failed = deleted_store_check(db)
        assert failed.status == "fail"
        assert f"pid {holder.pid}" in failed.detail and f"{db}-wal (deleted)" in failed.detail
        assert "restart that process" in failed.fix and "armature dev stop" in failed.fix
        # Another store's deleted WAL is not this one's.
        assert deleted_store_check(tmp_path / "other.db").status == "ok"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    deadline = time.monotonic() + 10
    while deleted_store_check(db).status != "ok" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert deleted_store_check(db).status == "ok"


def test_a_home_that_is_a_file_is_one_line_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a directory")
    done = armature(home, "runs", "list")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: ARMATURE_HOME={str(home)!r} is not a directory; point ARMATURE_HOME at a "
        "directory (it holds the trace store, the key and the local stack's files)"
    ]
    assert home.read_text() == "not a directory"  # nothing lost


def test_a_home_that_cannot_be_made_is_one_line_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    home = blocker / "below" / "home"  # under a file: no one can make it, root neither
    done = armature(home, "runs", "list")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: ARMATURE_HOME={str(home)!r} does not exist and cannot be made")
    assert "Traceback" not in done.stderr
