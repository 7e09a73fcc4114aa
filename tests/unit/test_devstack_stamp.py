"""The local stack restarts its background worker when the installed code changes."""

from __future__ import annotations

import os
from pathlib import Path

from armature_temporal.service.devstack import code_stamp


def test_the_code_stamp_is_stable_and_changes_with_any_module(tmp_path: Path) -> None:
    for package in ("armature_temporal", "workflows", "activities"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "a.py").write_text("x = 1\n")
    (tmp_path / "worker.py").write_text("")
    first = code_stamp(tmp_path)
    assert code_stamp(tmp_path) == first
    module = tmp_path / "workflows" / "a.py"
    module.write_text("x = 2\n")
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert code_stamp(tmp_path) != first
    assert len(code_stamp()) == 64  # the installed tree
