"""Where things are: ARMATURE_HOME, the Temporal address, namespace and task queue.

Read from the environment each time (no import-time side effects), with the defaults of the
embedded single-machine setup.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "armature_home",
    "configured_address",
    "dev_port",
    "dev_ui_port",
    "namespace",
    "task_queue",
    "tool_output_cap",
    "ui_url",
    "workspace_root",
]

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "armature"
DEFAULT_PORT = 7233
DEFAULT_UI_PORT = 8233


def dev_port() -> int:
    """Port of the embedded dev server (``$ARMATURE_DEV_PORT``, default 7233)."""
    return int(os.environ.get("ARMATURE_DEV_PORT") or DEFAULT_PORT)


def dev_ui_port() -> int:
    """Web UI port of the embedded dev server (``$ARMATURE_UI_PORT``, default 8233)."""
    return int(os.environ.get("ARMATURE_UI_PORT") or DEFAULT_UI_PORT)


def armature_home() -> Path:
    """``$ARMATURE_HOME``, default ``~/.armature``."""
    return Path(os.environ.get("ARMATURE_HOME") or Path.home() / ".armature").expanduser()


def configured_address(cli_value: str | None = None) -> str | None:
    """The Temporal address the user chose (``--address`` or ``$TEMPORAL_ADDRESS``), if any."""
    return cli_value or os.environ.get("TEMPORAL_ADDRESS") or None


def namespace() -> str:
    return os.environ.get("TEMPORAL_NAMESPACE") or DEFAULT_NAMESPACE


def task_queue() -> str:
    return os.environ.get("ARMATURE_TASK_QUEUE") or DEFAULT_TASK_QUEUE


def ui_url(workflow_id: str | None = None, run_id: str | None = None) -> str:
    """The Temporal Web UI link (``$ARMATURE_UI_URL`` or the dev server's :8233)."""
    base = os.environ.get("ARMATURE_UI_URL") or f"http://localhost:{dev_ui_port()}"
    url = f"{base.rstrip('/')}/namespaces/{namespace()}/workflows"
    if workflow_id:
        from urllib.parse import quote

        url += f"/{quote(workflow_id, safe='')}"
        if run_id:
            url += f"/{run_id}/history"
    return url


def tool_output_cap() -> int:
    """Largest output one tool call may return, in bytes (``$ARMATURE_TOOL_OUTPUT_CAP``,
    default 2 MiB); larger outputs fail the call with a message saying so."""
    return int(os.environ.get("ARMATURE_TOOL_OUTPUT_CAP") or 2 * 1024 * 1024)


def workspace_root(spec_name: str) -> Path:
    """Where file and shell tools of a spec may work (``$ARMATURE_WORKSPACE`` overrides)."""
    override = os.environ.get("ARMATURE_WORKSPACE")
    return Path(override) if override else armature_home() / "workspace" / spec_name


def strict_sandbox() -> bool:
    """ARMATURE_STRICT_SANDBOX=1: re-import the interpreter in every run's sandbox, where a
    non-deterministic call raises at once (the test suite runs so); default off."""
    return os.environ.get("ARMATURE_STRICT_SANDBOX", "").strip().lower() in ("1", "true", "yes")
