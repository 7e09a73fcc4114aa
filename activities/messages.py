"""Local activities over the tool-loop message store (runtime/message_store.py) for a long loop
carried between workflow executions (runtime/context_carry.py):

* ``store_messages`` writes the archives an export made, before the state that names them is
  used;
* ``read_message`` reads a slice of a stored result for ``recall`` — directly, or through an
  archive (``key``: the handle to look up in it).
"""

from __future__ import annotations

import asyncio
import json

from temporalio import activity
from temporalio.exceptions import ApplicationError

from armature_temporal.runtime.loop_state import MessageSlice, MessageSliceQuery
from armature_temporal.runtime.message_store import MessageMissing, get_text, put_text

__all__ = ["read_message", "store_messages"]


@activity.defn(name="store_messages")
async def store_messages(texts: list[str]) -> list[str]:
    """Store each text (idempotent); their references, in order."""
    return [await asyncio.to_thread(put_text, text) for text in texts]


def _read(query: MessageSliceQuery) -> MessageSlice:
    text = get_text(query.ref)
    if query.key is not None:
        archive = json.loads(text)
        if query.key in archive.get("refs", {}):
            text = get_text(archive["refs"][query.key])
        elif query.key in archive.get("texts", {}):
            text = archive["texts"][query.key]
        else:
            return MessageSlice(found=False)
    start = max(0, query.start)
    return MessageSlice(text=text[start : start + query.length], total_chars=len(text))


@activity.defn(name="read_message")
async def read_message(query: MessageSliceQuery) -> MessageSlice:
    """``query.length`` characters of the stored text from ``query.start``, and its length."""
    try:
        return await asyncio.to_thread(_read, query)
    except MessageMissing as exc:
        raise ApplicationError(str(exc), type="message_missing", non_retryable=True) from exc
    except (ValueError, AttributeError) as exc:  # an archive that is not one
        raise ApplicationError(
            f"tool-loop archive {query.ref[:12]}… is not an archive: {exc}",
            type="message_missing",
            non_retryable=True,
        ) from exc
