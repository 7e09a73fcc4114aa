"""Tool-loop messages by reference: each tool result of a loop under a context policy is written
once, content-addressed, beside the payload store (``$ARMATURE_PAYLOAD_DIR``, default
``$ARMATURE_HOME/payloads``, under ``messages/``), and the ``llm_call`` inputs carry its hash.

A loop's window is sent again every turn; without references every turn's input would hold
every kept result again, so storage and history grew with turns × window. With them an input
holds a hash per kept result (``{"role": "tool", "tool_call_id", "content_ref"}``), and each
result's text is stored once: by the ``tool_call`` activity that made it, read back by
``llm_call``. Like the payload store, the directory must be one every worker shares.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from armature_temporal.errors import ArmatureError
from armature_temporal.runtime.payloads import payload_dir
from armature_temporal.runtime.private import write_private

__all__ = ["MessageMissing", "get_text", "message_dir", "put_text", "resolve_messages"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class MessageMissing(ArmatureError):
    """A referenced message is not in this worker's message store (or is corrupt)."""


def message_dir() -> Path:
    return payload_dir() / "messages"


def put_text(text: str) -> str:
    """Store ``text`` (idempotent); its reference, the SHA-256 of its UTF-8 bytes."""
    data = text.encode("utf-8")
    ref = hashlib.sha256(data).hexdigest()
    path = message_dir() / ref[:2] / ref
    if not path.exists():
        write_private(path, data)  # 0600 in a 0700 directory: tool results are run data
    return ref


def get_text(ref: str) -> str:
    """The text stored under ``ref``.

    Raises:
        MessageMissing: not a reference, not stored here, or not what was stored.
    """
    if not isinstance(ref, str) or not _SHA256.match(ref):
        raise MessageMissing(f"{ref!r} is not a message reference (64 hex digits of SHA-256)")
    path = message_dir() / ref[:2] / ref
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MessageMissing(
            f"tool-loop message {ref[:12]}… is missing from {message_dir()}; every worker must "
            "see the same ARMATURE_PAYLOAD_DIR (or ARMATURE_HOME) as the tool workers that "
            "wrote it"
        ) from None
    if hashlib.sha256(data).hexdigest() != ref:
        raise MessageMissing(f"tool-loop message {path} is corrupt (its hash does not match)")
    return data.decode("utf-8")


def resolve_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each ``content_ref`` replaced by the stored ``content``."""
    out = []
    for message in messages:
        if "content_ref" in message:
            rest = {k: v for k, v in message.items() if k != "content_ref"}
            message = {**rest, "content": get_text(message["content_ref"])}
        out.append(message)
    return out
