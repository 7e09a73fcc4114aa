"""The local stack: it restarts its background worker when the installed code changes, and its
dev server runs with Armature's dynamic config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from armature_temporal.service.devstack import code_stamp
from armature_temporal.service.temporal_bin import DEV_SERVER_CONFIG, dev_server_config_flags


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


def test_every_dev_server_armature_starts_gets_the_same_dynamic_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local stack and the tests' session server both run with DEV_SERVER_CONFIG (the
    history service's task-queue poll rate: 20 a second by default held each workflow task
    up to 50 ms; benchmarks/engine_overhead.py starts its server with it too)."""
    from armature_temporal.service import devstack
    from tests.conftest import _server_options

    spawned: list[list[str]] = []
    monkeypatch.setattr(devstack, "_spawn", lambda args, home, name, env: spawned.append(args) or 1)
    monkeypatch.setattr(devstack, "is_listening", lambda host, port: False)
    devstack.start_dev_server(tmp_path, port=1, ui_port=2)
    (argv,) = spawned
    pairs = {argv[i + 1] for i, a in enumerate(argv) if a == "--dynamic-config-value"}
    assert pairs == {f"{k}={v}" for k, v in DEV_SERVER_CONFIG.items()}
    assert "history.transferProcessorMaxPollRPS=1000" in pairs
    assert _server_options()["dev_server_extra_args"] == dev_server_config_flags()
