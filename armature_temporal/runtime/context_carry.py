"""A :class:`~armature_temporal.runtime.context.ContextKeeper` carried from one workflow execution
to the next (a long tool loop's AgentLoop child, runtime/loop_state.py), in size that does not
grow with the loop.

What the next execution needs of a keeper, and how it travels:

* the window's turns, whole (they are sent again);
* the newest turns out of the window, the ones its note lists (``STUB_LINES``), as stubs: their
  calls and their stored results' references;
* every older turn only through an **archive**: one message-store entry per span of turns
  archived together, holding each handle's reference (or, for a result that was not stored,
  its text). The state carries a span's first and last turn and the entry's reference; a
  ``recall`` of an archived handle reads the entry, then the result (activities/messages.py).

So each turn's stub is written once, to the message store, and a state holds a span per export
instead of a stub per turn. :func:`export_keeper` also returns the archives it made, as text,
for the workflow to write (through a local activity) before the state is used.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from typing import Any

from armature_temporal.runtime.context import STUB_LINES, ContextKeeper, Turn
from armature_temporal.runtime.loop_state import ArchivedSpan, KeeperState, TurnState
from armature_temporal.spec.context_window import PlanContext

__all__ = ["archive_text", "export_keeper", "restore_keeper"]


def archive_text(turns: list[Turn]) -> str:
    """One archive entry: each handle's reference, or its text where it was not stored."""
    refs = {h: r for t in turns for h, r in t.refs.items()}
    texts = {h: x for t in turns for h, x in t.full.items() if h not in t.refs}
    return json.dumps({"refs": refs, "texts": texts}, sort_keys=True, separators=(",", ":"))


def _fields(turn: Turn) -> dict[str, Any]:
    """A turn's fields as :class:`TurnState` has them (all but ``archived``)."""
    return {f.name: getattr(turn, f.name) for f in fields(turn) if f.name != "archived"}


def _ref(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()  # as message_store.put_text names it


def export_keeper(keeper: ContextKeeper) -> tuple[KeeperState, list[str]]:
    """The keeper as data for the next workflow execution, and the archive entries to store
    first. Turns it archives are marked so in ``keeper`` (their texts let go)."""
    dropped = [i for i in range(keeper.out_upto) if not keeper.turns[i].pinned]
    fresh = [i for i in dropped[:-STUB_LINES] if not keeper.turns[i].archived]
    written: list[str] = []
    if fresh:
        text = archive_text([keeper.turns[i] for i in fresh])
        first, last = keeper.turns[fresh[0]].number, keeper.turns[fresh[-1]].number
        keeper.archives.append((first, last, _ref(text)))
        written.append(text)
        for i in fresh:
            old = keeper.turns[i]
            keeper.turns[i] = Turn(old.number, {}, [], {}, [], False, archived=True)
    texts = keeper.policy.summarize is not None  # what the next summary reads
    limit = keeper.policy.offload_over
    turns = []
    for i, t in enumerate(keeper.turns):
        if t.archived:
            continue
        unstored = {h: x for h, x in t.full.items() if h not in t.refs}
        if i < keeper.out_upto and not t.pinned:  # out of the window: a stub
            turns.append(TurnState(number=t.number, full=unstored, refs=t.refs, calls=t.calls))
            continue
        full = {h: x for h, x in t.full.items() if len(x) <= limit} if texts else unstored
        turns.append(TurnState(**{**_fields(t), "full": full}))
    state = KeeperState(
        turns=turns,
        archives=[ArchivedSpan(first=f, last=la, ref=r) for f, la, r in keeper.archives],
        out_upto=keeper.out_upto,
        summary=keeper.summary,
        base_tokens=keeper.base_tokens,
        context_window=keeper.context_window,
        compactions=keeper.compactions,
        offloaded=keeper.offloaded,
    )
    return state, written


def restore_keeper(policy: PlanContext, state: KeeperState) -> ContextKeeper:
    """A keeper from :func:`export_keeper`'s data: the window holds the same turns, and each
    archived turn is a placeholder whose handles ``recall`` reads through its archive."""
    keeper = ContextKeeper(policy, state.context_window)
    turns = {t.number: Turn(**t.model_dump()) for t in state.turns}
    for span in state.archives:
        for n in range(span.first, span.last + 1):
            turns.setdefault(n, Turn(n, {}, [], {}, [], False, archived=True))
    keeper.turns = [turns[n] for n in sorted(turns)]
    keeper.archives = [(a.first, a.last, a.ref) for a in state.archives]
    keeper.out_upto = state.out_upto
    keeper.summary = state.summary
    keeper.base_tokens = state.base_tokens
    keeper.compactions = state.compactions
    keeper.offloaded = state.offloaded
    return keeper
