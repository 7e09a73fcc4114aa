"""Where things are: ARMATURE_HOME, the Temporal address, namespace and task queue.

Read from the environment each time (no import-time side effects), with the defaults of the
embedded single-machine setup. :func:`check_settings` validates every ``ARMATURE_*`` setting
that has a fixed form at once (the ``armature`` command calls it before any command runs), so
a bad value is one line naming the variable and what it accepts, never a traceback halfway
through a run; the accessors raise the same :class:`SettingError`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from armature_temporal.errors import ArmatureError

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "SettingError",
    "armature_home",
    "check_settings",
    "configured_address",
    "dev_port",
    "dev_ui_port",
    "namespace",
    "payload_threshold",
    "spec_roots",
    "strict_sandbox",
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


DEFAULT_TOOL_OUTPUT_CAP = 2 * 1024 * 1024
DEFAULT_MAX_INPUT_BYTES = 1024 * 1024
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


class SettingError(ArmatureError):
    """An ``ARMATURE_*`` environment variable holds a value Armature cannot use."""


def _integer(name: str, default: int, low: int, high: int | None, what: str) -> int:
    """``$name`` as an integer in ``[low, high]`` (unset or empty: ``default``).

    Raises:
        SettingError: naming the variable, its value and the accepted values.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        accepted = f"{low}-{high}" if high is not None else f"{low} or more"
        raise SettingError(
            f"{name}={raw!r} is not a valid {what}; use an integer {accepted}, or unset it "
            f"for the default {default}"
        )
    return value


def _port(name: str, default: int) -> int:
    return _integer(name, default, 1, 65535, "port")


def dev_port() -> int:
    """Port of the embedded dev server (``$ARMATURE_DEV_PORT``, default 7233)."""
    return _port("ARMATURE_DEV_PORT", DEFAULT_PORT)


def dev_ui_port() -> int:
    """Web UI port of the embedded dev server (``$ARMATURE_UI_PORT``, default 8233)."""
    return _port("ARMATURE_UI_PORT", DEFAULT_UI_PORT)


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
    return _integer("ARMATURE_TOOL_OUTPUT_CAP", DEFAULT_TOOL_OUTPUT_CAP, 1, None, "size in bytes")


def max_input_bytes() -> int:
    """Largest run inputs one run may start with, as UTF-8 JSON bytes
    (``$ARMATURE_MAX_INPUT_BYTES``, default 1 MiB, the run API's body limit): the CLI, the
    library, webhooks and the API refuse more, saying the size."""
    return _integer("ARMATURE_MAX_INPUT_BYTES", DEFAULT_MAX_INPUT_BYTES, 1, None, "size in bytes")


def payload_threshold(default: int) -> int:
    """Payloads larger than this many bytes go to external storage
    (``$ARMATURE_PAYLOAD_THRESHOLD``; the caller gives the default)."""
    return _integer("ARMATURE_PAYLOAD_THRESHOLD", default, 1, None, "size in bytes")


def workspace_root(spec_name: str) -> Path:
    """Where file and shell tools of a spec may work (``$ARMATURE_WORKSPACE`` overrides)."""
    override = os.environ.get("ARMATURE_WORKSPACE")
    return Path(override) if override else armature_home() / "workspace" / spec_name


def spec_roots() -> list[Path]:
    """Folders, besides a spec's own, whose files a spec may name (``$ARMATURE_SPEC_ROOTS``,
    absolute paths separated by ``os.pathsep``; default none): a shared prompts folder.

    Raises:
        SettingError: an entry is not an absolute path.
    """
    raw = os.environ.get("ARMATURE_SPEC_ROOTS", "")
    roots = [Path(part).expanduser() for part in raw.split(os.pathsep) if part.strip()]
    for root in roots:
        if not root.is_absolute():
            raise SettingError(
                f"ARMATURE_SPEC_ROOTS={raw!r} has the relative path {str(root)!r}; list "
                f"absolute folders separated by {os.pathsep!r}, or unset it"
            )
    return roots


def strict_sandbox() -> bool:
    """ARMATURE_STRICT_SANDBOX=1: re-import the interpreter in every run's sandbox, where a
    non-deterministic call raises at once (the test suite runs so); default off."""
    raw = os.environ.get("ARMATURE_STRICT_SANDBOX", "")
    value = raw.strip().lower()
    if value not in _TRUE + _FALSE:
        raise SettingError(
            f"ARMATURE_STRICT_SANDBOX={raw!r} is not a yes/no value; use one of "
            f"{[v for v in _TRUE + _FALSE if v]}, or unset it"
        )
    return value in _TRUE


def _url() -> None:
    raw = os.environ.get("ARMATURE_UI_URL", "").strip()
    if raw and not raw.startswith(("http://", "https://")):
        raise SettingError(
            f"ARMATURE_UI_URL={raw!r} is not a web address; use http://host:port or "
            "https://..., or unset it for the dev server's Web UI"
        )


def _home() -> None:
    """ARMATURE_HOME is a directory this user can use, or can be made one (nothing is
    created here)."""
    raw = os.environ.get("ARMATURE_HOME")
    home = armature_home()
    shown = f"ARMATURE_HOME={raw!r}" if raw else f"the default ARMATURE_HOME {str(home)!r}"
    if home.exists():
        if not home.is_dir():
            raise SettingError(
                f"{shown} is not a directory; point ARMATURE_HOME at a directory (it holds "
                "the trace store, the key and the local stack's files)"
            )
        if not os.access(home, os.R_OK | os.W_OK | os.X_OK):
            raise SettingError(
                f"{shown} is a directory this user cannot write; point ARMATURE_HOME at one "
                "it can (or fix its owner and mode)"
            )
        return
    probe = home.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:  # can a directory be made there? (os.access says yes to root, even in /proc)
        os.rmdir(tempfile.mkdtemp(prefix=".armature-probe-", dir=probe))
    except OSError as exc:
        raise SettingError(
            f"{shown} does not exist and cannot be made ({probe}: {exc.strerror}); point "
            "ARMATURE_HOME at a directory this user can create or use"
        ) from None


def check_settings() -> None:
    """Validate every ``ARMATURE_*`` setting with a fixed form, at once: the ports
    (``ARMATURE_DEV_PORT``, ``ARMATURE_UI_PORT``, 1-65535 and not the same), the sizes
    (``ARMATURE_TOOL_OUTPUT_CAP``, ``ARMATURE_PAYLOAD_THRESHOLD``, ``ARMATURE_MAX_INPUT_BYTES``,
    positive integers),
    ``ARMATURE_STRICT_SANDBOX`` (yes/no), ``ARMATURE_UI_URL`` (http(s)://) and
    ``ARMATURE_SPEC_ROOTS`` (absolute folders).

    Raises:
        SettingError: the first bad one, in one line naming it and the accepted values.
    """
    port, ui_port = dev_port(), dev_ui_port()
    if port == ui_port:
        raise SettingError(
            f"ARMATURE_DEV_PORT and ARMATURE_UI_PORT are both {port}; the dev server needs "
            "two ports, so give them different values"
        )
    tool_output_cap()
    payload_threshold(1)
    max_input_bytes()
    strict_sandbox()
    _url()
    _home()
    spec_roots()
