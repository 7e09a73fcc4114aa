"""Several processes on one SQLite trace store, as a machine runs them: a worker holding the
store while it opens the bandit store and the cache, CLI commands opening and closing it
beside it, and the worker writing on (issue 26: the store silently stopped recording — the
worker's second engine opened and closed the database file, which dropped every SQLite lock
the process held, so a CLI command's close took the database for unused, checkpointed it
and deleted the -wal the worker still wrote to; every later run went unrecorded).

Real processes, real SQLite files; each step is driven over pipes so the order is fixed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from armature_temporal.store import TraceStore

REPO = Path(__file__).resolve().parents[2]

#: The worker: holds a TraceStore, opens what a worker opens beside it (the bandit store,
#: more trace stores for the cache and the API), then writes a run each time it is told.
WORKER = r"""
import sys
from armature_temporal.bandit._sql import SqlBackend
from armature_temporal.store import TraceStore
from tests.store.chains import make_run

url = sys.argv[1]
store = TraceStore(url)
store.write(make_run("before"))
bandits = SqlBackend(url)          # the bandit store of a spec with arms
cache = TraceStore(url)            # the cache, the run API, another activity
print("ready", flush=True)
for line in sys.stdin:
    run_id = line.strip()
    store.write(make_run(run_id))
    print("wrote", run_id, flush=True)
"""

#: A CLI command: open the store, read, close (`armature cache stats`, `report`, ...).
COMMAND = r"""
import sys
from armature_temporal.store import TraceStore

store = TraceStore(sys.argv[1])
store.runs(limit=5)
store.close()
"""


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _deleted_handles(pid: int, db: Path) -> list[str]:
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(db)) and target.endswith("(deleted)"):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see handles")
def test_a_worker_keeps_recording_while_commands_open_and_close_the_store(
    tmp_path: Path,
) -> None:
    db = tmp_path / "armature.db"
    url = f"sqlite:///{db}"
    TraceStore(url).close()  # the store exists, as on a stack that has run before
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=REPO,
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        assert worker.stdout.readline().strip() == "ready"
        for i in range(3):
            done = subprocess.run(
                [sys.executable, "-c", COMMAND, url], env=_env(), cwd=REPO, check=False,
                capture_output=True, text=True,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            worker.stdin.write(f"run-{i}\n")
            worker.stdin.flush()
            assert worker.stdout.readline().split() == ["wrote", f"run-{i}"]
        # While the worker still runs: every run is in the store for everyone else ...
        reader = TraceStore(url)
        try:
            stored = {r.run_id for r in reader.runs(limit=100)}
            assert stored == {"before", "run-0", "run-1", "run-2"}, stored
            assert reader.records("run-2")[-1].kind == "run_end"
        finally:
            reader.close()
        # ... and the worker writes to the store's own files, none of them deleted.
        assert _deleted_handles(worker.pid, db) == []
    finally:
        worker.stdin.close()
        worker.wait(timeout=30)
