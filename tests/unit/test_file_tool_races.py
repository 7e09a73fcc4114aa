"""The file tools stay inside the workspace while another process rewires it under them.

A second process keeps swapping a workspace name between a harmless regular file (or a real
directory) and a symlink to an outside secret, as fast as it can, while the tool reads and
writes that name thousands of times: nothing outside may be read or written, ever. Hard links
to outside files are refused (a hard link is the outside file under a workspace name).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from armature_temporal.tools import ToolContext, call_tool

SECRET = "TOPSECRET-do-not-leak"
HARMLESS = "harmless"
CALLS = 2500  # per race test; the old check-then-open code leaked about once in 50 here
SECONDS = 5.0  # ... or for this long, whichever ends first (a loaded machine makes fewer calls)

# The swapper: one cycle turns `swap` (a regular file) and `d` (a real directory) into symlinks
# to outside things and back. Renames are atomic; every step may race with the tool (which may
# create `d` itself), so each one tolerates the other side having moved first.
_SWAPPER = textwrap.dedent(
    """
    import os, shutil, sys, time
    ws, outside, stop_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
    os.chdir(ws)
    cycles = 0
    def attempt(fn, *args):
        try:
            fn(*args)
        except OSError:
            pass
    while time.time() < stop_at and not os.path.exists(".stop"):
        with open(".f", "w") as fh:
            fh.write("harmless")
        attempt(os.replace, ".f", "swap")
        attempt(os.symlink, os.path.join(outside, "secret.txt"), ".l")
        attempt(os.replace, ".l", "swap")
        attempt(os.rename, "d", ".dpark")
        attempt(os.symlink, outside, "d")
        attempt(os.unlink, "d")
        attempt(os.rename, ".dpark", "d")
        if os.path.isdir(".dpark") and os.path.isdir("d") and not os.path.islink("d"):
            shutil.rmtree("d", ignore_errors=True)  # the tool made a new d meanwhile
            attempt(os.rename, ".dpark", "d")
        if not os.path.isdir(".dpark") and not os.path.lexists("d"):
            attempt(os.mkdir, "d")
        cycles += 1
    print(cycles)
    """
)


@pytest.fixture
def arena(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (ws / "swap").write_text(HARMLESS)
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text(HARMLESS)
    return ws, outside


@pytest.fixture
def swapper(arena: tuple[Path, Path]) -> Iterator[subprocess.Popen[str]]:
    ws, outside = arena
    proc = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(ws), str(outside), str(time.time() + 60)],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.2)  # let it start swapping
    try:
        yield proc
    finally:
        (ws / ".stop").touch()
        try:
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _calls(most: int = CALLS) -> Iterator[int]:
    deadline = time.monotonic() + SECONDS
    for i in range(most):
        if time.monotonic() > deadline and i >= 200:
            return
        yield i


def _cycles(proc: subprocess.Popen[str], ws: Path) -> int:
    (ws / ".stop").touch()
    out, _ = proc.communicate(timeout=10)
    return int(out.strip() or 0)


def _outside_state(outside: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(outside.iterdir())
        if p.is_file()
    }


async def test_reads_never_leak_while_a_symlink_is_swapped_in_and_out(
    arena: tuple[Path, Path], swapper: subprocess.Popen[str]
) -> None:
    ws, _ = arena
    ctx = ToolContext(workspace=ws, timeout_s=5)
    leaks = harmless = refused = 0
    for i in _calls():
        path = "d/f.txt" if i % 4 == 0 else "swap"  # the file swap is the quicker to hit
        result = await call_tool("file_read", {"path": path}, ctx)
        text = str(result.output) + (result.error or "")
        if SECRET in text:
            leaks += 1
        elif result.ok:
            assert result.output["content"] == HARMLESS
            harmless += 1
        else:
            refused += 1
    cycles = _cycles(swapper, ws)
    assert leaks == 0, f"{leaks} of {harmless + refused + leaks} reads returned the secret"
    # The race really ran: the swapper went round many times and reads saw both states.
    assert cycles > 20, cycles
    assert harmless > 20 and refused > 20, (harmless, refused)


async def test_writes_never_land_outside_while_a_symlink_is_swapped_in_and_out(
    arena: tuple[Path, Path], swapper: subprocess.Popen[str]
) -> None:
    ws, outside = arena
    before = _outside_state(outside)
    ctx = ToolContext(workspace=ws, timeout_s=5)
    written = refused = 0
    for i in _calls():
        path = "swap" if i % 2 else "d/out.txt"
        result = await call_tool("file_write", {"path": path, "content": f"pwned {i}"}, ctx)
        if result.ok:
            written += 1
        else:
            refused += 1
    cycles = _cycles(swapper, ws)
    assert _outside_state(outside) == before, "a write landed outside the workspace"
    assert not (outside / "out.txt").exists()
    assert cycles > 20, cycles
    assert written > 20 and refused > 20, (written, refused)


async def test_file_list_does_not_follow_a_swapped_in_directory_symlink(
    arena: tuple[Path, Path], swapper: subprocess.Popen[str]
) -> None:
    ws, _ = arena
    ctx = ToolContext(workspace=ws, timeout_s=5)
    listed = 0
    for _ in _calls(CALLS // 5):
        result = await call_tool("file_list", {"path": "d"}, ctx)
        assert "secret.txt" not in str(result.output)
        listed += result.ok
        deep = await call_tool("file_list", {"recursive": True}, ctx)
        assert "secret.txt" not in str(deep.output)
    assert _cycles(swapper, ws) > 5
    assert listed > 5


# --- hard links --------------------------------------------------------------------------------


@pytest.fixture
def hard_link(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    try:
        os.link(secret, ws / "notes.txt")
    except OSError as exc:  # e.g. fs.protected_hardlinks for a file we do not own
        pytest.skip(f"cannot make a hard link here: {exc}")
    return ws, secret


async def test_write_through_a_hard_link_to_an_outside_file_is_refused(
    hard_link: tuple[Path, Path],
) -> None:
    ws, secret = hard_link
    ctx = ToolContext(workspace=ws)
    result = await call_tool("file_write", {"path": "notes.txt", "content": "pwned"}, ctx)
    assert (result.ok, result.error_type) == (False, "policy_blocked")
    assert "'notes.txt'" in (result.error or "") and "hard link" in (result.error or "")
    assert secret.read_text() == SECRET


async def test_read_through_a_hard_link_to_an_outside_file_is_refused(
    hard_link: tuple[Path, Path],
) -> None:
    ws, _ = hard_link
    result = await call_tool("file_read", {"path": "notes.txt"}, ToolContext(workspace=ws))
    assert (result.ok, result.error_type) == (False, "policy_blocked")
    assert SECRET not in str(result.output)
    assert "hard link" in (result.error or "")


# --- how the walk resolves paths ---------------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "real.txt").write_text("inside")
    return root


async def test_dotdot_is_refused_even_when_it_stays_inside(ws: Path) -> None:
    # Safety rules match the path as written: notes/../ls/.keep must not pass a ^notes/ rule.
    result = await call_tool(
        "file_write", {"path": "notes/../ls/.keep", "content": "x"}, ToolContext(workspace=ws)
    )
    assert (result.ok, result.error_type) == (False, "policy_blocked")
    assert "'..'" in (result.error or "")
    assert not (ws / "ls").exists() and not (ws / "notes").exists()


async def test_inner_symlinks_are_followed_only_while_they_stay_inside(
    ws: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text(SECRET)
    (ws / "sub" / "up.txt").symlink_to("../real.txt")  # inside, by a relative '..'
    (ws / "sub" / "out.txt").symlink_to("../../secret.txt")  # climbs out by '..'
    (ws / "sub" / "loop").symlink_to("loop")
    ctx = ToolContext(workspace=ws)
    up = await call_tool("file_read", {"path": "sub/up.txt"}, ctx)
    assert (up.output["content"], up.output["path"]) == ("inside", "real.txt")
    out = await call_tool("file_read", {"path": "sub/out.txt"}, ctx)
    assert out.error_type == "policy_blocked"
    assert "'sub/out.txt' -> '../../secret.txt'" in (out.error or "")
    wrote = await call_tool("file_write", {"path": "sub/out.txt", "content": "x"}, ctx)
    assert wrote.error_type == "policy_blocked"
    assert (tmp_path / "secret.txt").read_text() == SECRET
    loop = await call_tool("file_read", {"path": "sub/loop"}, ctx)
    assert loop.error_type == "tool_error" and "symlinks" in (loop.error or "")


async def test_new_files_and_directories_are_private_and_existing_modes_kept(ws: Path) -> None:
    ctx = ToolContext(workspace=ws)
    old = os.umask(0o022)
    try:
        assert (await call_tool("file_write", {"path": "a/b/new.txt", "content": "1"}, ctx)).ok
        (ws / "shared.txt").write_text("0")
        (ws / "shared.txt").chmod(0o644)
        again = await call_tool("file_write", {"path": "shared.txt", "content": "2"}, ctx)
    finally:
        os.umask(old)
    assert (ws / "a/b/new.txt").stat().st_mode & 0o777 == 0o600
    assert (ws / "a").stat().st_mode & 0o777 == (ws / "a/b").stat().st_mode & 0o777 == 0o700
    assert again.output["created"] is False
    assert ((ws / "shared.txt").read_text(), (ws / "shared.txt").stat().st_mode & 0o777) == (
        "2",
        0o644,
    )


async def test_a_fifo_is_refused_without_waiting_for_a_writer(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    ctx = ToolContext(workspace=ws, timeout_s=2)
    try:
        read = await call_tool("file_read", {"path": "pipe"}, ctx)
        write = await call_tool("file_write", {"path": "pipe", "content": "x"}, ctx)
    finally:  # a tool thread stuck opening the FIFO (the bug) is let go, so pytest can exit
        for flags in (os.O_RDONLY, os.O_WRONLY):
            with contextlib.suppress(OSError):
                os.close(os.open(ws / "pipe", flags | os.O_NONBLOCK))
    assert (read.error_type, write.error_type) == ("tool_error", "tool_error")
    assert "not a regular file" in (read.error or "") and "not a regular file" in (
        write.error or ""
    )


def test_resolve_in_workspace_follows_inner_symlinks_and_keeps_missing_parts(ws: Path) -> None:
    from armature_temporal.tools._errors import ToolFailure
    from armature_temporal.tools._files import resolve_in_workspace

    (ws / "notes").symlink_to("sub")
    ctx = ToolContext(workspace=ws)
    root = ws.resolve()
    assert resolve_in_workspace(ctx, "notes/x/y.txt") == (root, root / "sub/x/y.txt")
    assert resolve_in_workspace(ctx, str(ws / "notes")) == (root, root / "sub")
    assert resolve_in_workspace(ctx, ".") == (root, root)
    (ws / "esc").symlink_to("/etc")
    with pytest.raises(ToolFailure, match="'esc' -> '/etc'"):
        resolve_in_workspace(ctx, "esc/passwd")
