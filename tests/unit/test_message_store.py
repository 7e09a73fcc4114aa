"""Tool-loop messages by reference (armature_temporal/runtime/message_store.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from armature_temporal.runtime.message_store import (
    MessageMissing,
    get_text,
    message_dir,
    put_text,
    resolve_messages,
)


def test_a_text_is_stored_once_under_its_hash_and_read_back(armature_home: Path) -> None:
    ref = put_text("résumé: 3 KB of notes")
    assert ref == hashlib.sha256("résumé: 3 KB of notes".encode()).hexdigest()
    assert put_text("résumé: 3 KB of notes") == ref
    path = message_dir() / ref[:2] / ref
    assert path.is_relative_to(armature_home) and oct(path.stat().st_mode & 0o777) == "0o600"
    assert get_text(ref) == "résumé: 3 KB of notes"
    assert len(list(message_dir().rglob("*"))) == 2  # one directory, one file


def test_messages_with_references_are_resolved_in_place() -> None:
    ref = put_text('{"content": "x"}')
    messages = [
        {"role": "assistant", "content": None},
        {"role": "tool", "tool_call_id": "call_1", "content_ref": ref},
    ]
    assert resolve_messages(messages) == [
        {"role": "assistant", "content": None},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"content": "x"}'},
    ]


def test_a_missing_message_names_the_reference_and_the_directory() -> None:
    with pytest.raises(MessageMissing, match=r"message 0{12}… is missing from .*ARMATURE_PAYLOAD"):
        get_text("0" * 64)


def test_a_corrupt_message_is_refused(armature_home: Path) -> None:
    ref = put_text("the real text")
    (message_dir() / ref[:2] / ref).write_text("tampered", encoding="utf-8")
    with pytest.raises(MessageMissing, match="corrupt"):
        get_text(ref)


@pytest.mark.parametrize("ref", ["../../etc/passwd", "ab" * 31, "G" * 64, 7])
def test_anything_but_a_sha256_is_not_a_reference(ref: object) -> None:
    with pytest.raises(MessageMissing, match="is not a message reference"):
        get_text(ref)  # type: ignore[arg-type]
