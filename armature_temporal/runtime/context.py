"""A tool loop's window: which turns the model sees, and the ``recall`` tool that reads back the
rest (the ``context:`` section, armature_temporal/spec/context_window.py).

Pure and deterministic: the interpreter keeps a :class:`ContextKeeper` per model attempt in
workflow code. Every decision is taken from what the run's history holds — the spec's policy,
the tool results, and the token counts each ``llm_call`` reports for the messages it was sent
(litellm's counter for the model; the four-characters-a-token estimate for simulate and for
messages no call has counted yet) — so a replay takes the same decisions.

A *turn* is one reply of the model that called tools, with those tools' results. The window is
the prompt, then (once something was compacted) one message that says what is out of it — a
summary or one-line stubs, and the handles ``recall`` takes — then the pinned older turns and
the newest turns, in order. Every tool result has a handle, ``t<turn>.<call>``; results longer
than ``offload_over`` characters enter the window as their head and tail only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from armature_temporal.spec.context_window import (
    CHARS_PER_TOKEN,
    DEFAULT_OFFLOAD_OVER,
    PlanContext,
)

__all__ = [
    "PREVIEW_CHARS",
    "RECALL",
    "RECALL_TOOL",
    "STUB_LINES",
    "ContextKeeper",
    "Turn",
    "estimate_message_tokens",
    "summary_tokens_limit",
    "window_budget",
]

#: The name of the built-in tool that reads back a tool result by handle.
RECALL = "recall"
#: Characters of an offloaded result's head and of its tail that the window keeps.
PREVIEW_CHARS = 400
#: Stub lines the compaction message lists (the newest dropped turns); older ones are counted.
STUB_LINES = 30
#: Tokens a message costs beyond its text (role, separators), in the estimate.
MESSAGE_OVERHEAD = 4

RECALL_TOOL: dict[str, Any] = {
    "name": RECALL,
    "description": "Read back a tool result that is no longer (or only partly) in the "
    "conversation, by the handle the conversation shows for it (t<turn>.<call>, e.g. t3.1). "
    "Returns up to `length` characters from `start`, and the result's total length.",
    "parameters": {
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "The result's handle, e.g. t3.1."},
            "start": {"type": "integer", "minimum": 0, "description": "First character."},
            "length": {"type": "integer", "minimum": 1, "description": "Characters to return."},
        },
        "required": ["handle"],
        "additionalProperties": False,
    },
}


def estimate_message_tokens(message: dict[str, Any]) -> int:
    """A chat message's tokens by the documented estimate (its JSON, four characters a token)."""
    text = json.dumps(message, ensure_ascii=False, default=str, separators=(",", ":"))
    return len(text) // CHARS_PER_TOKEN + MESSAGE_OVERHEAD


def window_budget(policy: PlanContext, context_window: int | None) -> int | None:
    """Tokens the window may hold: ``token_budget``, else the model's context window less the
    reply reserve; None (no compaction) when neither is known or the policy is off."""
    if not policy.enabled:
        return None
    if policy.token_budget is not None:
        return policy.token_budget
    if context_window is None:
        return None
    return max(1, context_window - (policy.reply_reserve or 0))


@dataclass
class Turn:
    """One model reply that called tools, and their results."""

    number: int
    assistant: dict[str, Any]
    #: The tool messages as the window shows them (an offloaded result's preview).
    results: list[dict[str, Any]]
    #: Each result's whole text by handle, for recall.
    full: dict[str, str]
    #: ``name(args)`` of each call, for a stub.
    calls: list[str]
    pinned: bool
    #: Tokens of each message of the turn (assistant first): counted where a call reported
    #: them, else estimated.
    tokens: list[int] = field(default_factory=list)
    #: Each stored result's message-store reference by handle; a result whose text is not in
    #: ``full`` (the turn came back from a :class:`KeeperState`) is read back by it.
    refs: dict[str, str] = field(default_factory=dict)
    #: Out of the window and carried over as part of an archive (runtime/context_carry.py):
    #: its handles are read back through the archive.
    archived: bool = False

    @property
    def handles(self) -> list[str]:
        """Its results' handles, in call order (``t<turn>.<call>``)."""
        return sorted({*self.full, *self.refs}, key=lambda h: int(h.rsplit(".", 1)[1]))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [self.assistant, *self.results]

    @property
    def size(self) -> int:
        return sum(self.tokens)


class ContextKeeper:
    """The turns of one model attempt's tool loop, and which of them the window holds."""

    def __init__(self, policy: PlanContext, context_window: int | None = None) -> None:
        self.policy = policy
        self.context_window = context_window
        self.turns: list[Turn] = []
        #: Turns before this index are out of the window (pinned ones excepted).
        self.out_upto = 0
        self.summary: str | None = None
        #: Tokens of the prompt before the turns (system message and task), once counted.
        self.base_tokens: int | None = None
        self.compactions = 0
        self.offloaded = 0
        self._sent_note_tokens = 0
        self._sent: list[tuple[int, int] | None] = []
        #: Spans of archived turns: ``(first, last, reference)`` (runtime/context_carry.py).
        self.archives: list[tuple[int, int, str]] = []

    # --- building the transcript -------------------------------------------------------------

    def add_turn(
        self,
        assistant: dict[str, Any],
        results: list[tuple[dict[str, Any], str, str | None]],
    ) -> None:
        """Append a turn: the model's reply and, for each of its calls, ``(call, content,
        ref)``: the result's JSON text and its message-store reference (None: sent inline).
        Results over ``offload_over`` enter as a preview."""
        number = len(self.turns) + 1
        messages: list[dict[str, Any]] = []
        full: dict[str, str] = {}
        refs: dict[str, str] = {}
        calls: list[str] = []
        limit = self.policy.offload_over if self.policy.enabled else None
        tokens = [estimate_message_tokens(assistant)]
        for k, (call, content, ref) in enumerate(results, start=1):
            handle = f"t{number}.{k}"
            full[handle] = content
            if ref is not None:
                refs[handle] = ref
            calls.append(f"{call['name']}({_short_args(call.get('arguments'))})")
            # Off: cut as every result was before context policies (at 20,000 characters).
            shown = content if limit is not None else content[:DEFAULT_OFFLOAD_OVER]
            if limit is not None and len(content) > limit:
                shown, ref = _preview(handle, content), None
                self.offloaded += 1
            message = {"role": "tool", "tool_call_id": call["id"], "content": shown}
            tokens.append(estimate_message_tokens(message))
            if ref is not None:  # the same text, by reference (runtime/message_store.py)
                message = {"role": "tool", "tool_call_id": call["id"], "content_ref": ref}
            messages.append(message)
        pinned = self._pinned(assistant, [c for c, _, _ in results], full)
        turn = Turn(number, assistant, messages, full, calls, pinned, tokens, refs)
        self.turns.append(turn)

    def _pinned(
        self, assistant: dict[str, Any], calls: list[dict[str, Any]], full: dict[str, str]
    ) -> bool:
        said = str(assistant.get("content") or "")
        for rule in self.policy.pin:
            if rule.tool is not None and any(c["name"] == rule.tool for c in calls):
                return True
            if rule.contains is not None and (
                rule.contains in said or any(rule.contains in text for text in full.values())
            ):
                return True
        return False

    # --- the window ----------------------------------------------------------------------------

    @property
    def kept(self) -> list[Turn]:
        """The turns the window holds, in order."""
        return [t for i, t in enumerate(self.turns) if i >= self.out_upto or t.pinned]

    @property
    def dropped(self) -> list[Turn]:
        return [t for t in self.turns[: self.out_upto] if not t.pinned]

    def note(self) -> dict[str, Any] | None:
        """The message that stands for the turns out of the window (None while none is)."""
        dropped = self.dropped
        if not dropped:
            return None
        first, last = dropped[0].number, dropped[-1].number
        span = f"turn {first}" if first == last else f"turns {first}-{last}"
        lines = [
            f"[Context compacted: {span} ({len(dropped)} turns) are out of this window. "
            f"Every tool result keeps its handle t<turn>.<call>; call {RECALL}(handle) to read "
            "one again.]"
        ]
        if self.summary is not None:
            lines.append(f"Summary of those turns: {self.summary}")
        else:
            shown = dropped[-STUB_LINES:]
            if len(dropped) > len(shown):
                lines.append(f"- turns {first}-{shown[0].number - 1}: not listed")
            for turn in shown:
                handles = ", ".join(turn.handles)
                lines.append(f"- turn {turn.number}: {'; '.join(turn.calls)} [{handles}]")
        return {"role": "user", "content": "\n".join(lines)}

    def window(self) -> list[dict[str, Any]]:
        """The messages after the prompt that the next call sends; remembers which turn each
        is, for :meth:`counted`."""
        messages: list[dict[str, Any]] = []
        sent: list[tuple[int, int] | None] = []
        note = self.note()
        if note is not None:
            messages.append(note)
            sent.append(None)
        for turn in self.kept:
            for j, message in enumerate(turn.messages):
                messages.append(message)
                sent.append((turn.number - 1, j))
        self._sent = sent
        self._sent_note_tokens = estimate_message_tokens(note) if note is not None else 0
        return messages

    @property
    def sent_tokens(self) -> int:
        """The tokens of the request the last :meth:`window` went into: the prompt, and that
        window's messages by the latest counts (what progress shows)."""
        turns = sum(self.turns[where[0]].tokens[where[1]] for where in self._sent if where)
        return (self.base_tokens or 0) + self._sent_note_tokens + turns

    def tokens(self) -> int:
        """The window's tokens by the counts known now (the prompt's, once counted)."""
        note = self.note()
        total = self.base_tokens or 0
        total += estimate_message_tokens(note) if note is not None else 0
        return total + sum(t.size for t in self.kept)

    def counted(self, base_tokens: int | None, message_tokens: list[int]) -> None:
        """Take a call's counts: the prompt's, and one per message of the window it was sent
        (the order :meth:`window` gave); a mismatched list is ignored."""
        if base_tokens is not None:
            self.base_tokens = base_tokens
        if len(message_tokens) != len(self._sent):
            return
        for where, count in zip(self._sent, message_tokens, strict=True):
            if where is not None:
                index, j = where
                self.turns[index].tokens[j] = count

    # --- compaction ----------------------------------------------------------------------------

    def budget(self) -> int | None:
        return window_budget(self.policy, self.context_window)

    def over_budget(self) -> bool:
        budget = self.budget()
        return budget is not None and self.tokens() > budget

    def compact(self) -> list[Turn]:
        """Take the turns older than ``keep_recent`` out of the window, and more (never the
        newest) while it is still over budget; returns the unpinned turns newly taken out."""
        before = self.out_upto
        newest = len(self.turns) - 1
        self.out_upto = max(self.out_upto, len(self.turns) - self.policy.keep_recent)
        budget = self.budget()
        while budget is not None and self.tokens() > budget and self.out_upto < newest:
            self.out_upto += 1
        if self.out_upto > before:
            self.compactions += 1
        return [t for t in self.turns[before : self.out_upto] if not t.pinned]

    # --- recall ------------------------------------------------------------------------------

    @property
    def recallable(self) -> bool:
        """Whether anything is out of the window, or only partly in it: then ``recall`` is
        offered (before, offering it would change the requests of loops that fit)."""
        return self.offloaded > 0 or bool(self.dropped)

    def _span(self, args: dict[str, Any]) -> tuple[int, int]:
        """A recall's ``(start, length)``: ``length`` at most ``offload_over``."""
        limit = self.policy.offload_over
        start, length = args.get("start", 0), args.get("length", limit)
        if not isinstance(start, int) or start < 0:
            start = 0
        if not isinstance(length, int) or length < 1:
            length = limit
        return start, min(length, limit)

    def recall_ref(self, arguments: Any) -> tuple[str, int, int, str | None] | None:
        """``(reference, start, length, key)`` to read first when a ``recall`` call asks for a
        result this keeper holds only by reference (a turn carried over as a stub; ``key``
        None), or only through an archive (the archive's reference, ``key`` the handle to look
        up in it); else None."""
        args = arguments if isinstance(arguments, dict) else {}
        handle = args.get("handle")
        for turn in self.turns:
            if handle in turn.refs and handle not in turn.full:
                return (turn.refs[handle], *self._span(args), None)
        number = _turn_of(handle)
        for first, last, ref in self.archives:
            if number is not None and first <= number <= last and self.turns[number - 1].archived:
                return (ref, *self._span(args), handle)
        return None

    def recall(
        self, arguments: Any, read: tuple[str, int] | None = None
    ) -> tuple[bool, dict[str, Any]]:
        """``(ok, content)`` for a ``recall`` call: the slice of the result, or an error the
        model reads (an unknown handle names the known ones). ``read``: ``(slice, total
        characters)`` as read by :meth:`recall_ref`'s reference."""
        args = arguments if isinstance(arguments, dict) else {}
        handle = args.get("handle")
        start, length = self._span(args)
        for turn in self.turns:
            if handle in turn.full:
                text = turn.full[handle]
                piece, total = text[start : start + length], len(text)
            elif read is not None and (handle in turn.refs or turn.archived):
                if turn.archived and _turn_of(handle) != turn.number:
                    continue
                piece, total = read
            else:
                continue
            return True, {
                "handle": handle,
                "start": start,
                "end": min(total, start + len(piece)),
                "total_chars": total,
                "text": piece,
            }
        known = [h for t in self.turns for h in t.handles]
        shown = ", ".join(known[-10:]) if known else "none yet"
        return False, {
            "error": f"no tool result with handle {handle!r}; handles look like t<turn>.<call> "
            f"(the latest: {shown})",
            "error_type": "unknown_handle",
        }

    def stats(self) -> dict[str, Any]:
        """What the window holds now, for traces and progress."""
        return {
            "turns": len(self.turns),
            "in_window": len(self.kept),
            "out_of_window": len(self.dropped),
            "window_tokens": self.tokens(),
            "budget": self.budget(),
            "compactions": self.compactions,
            "offloaded": self.offloaded,
        }


def _turn_of(handle: Any) -> int | None:
    """The turn number of a handle ``t<turn>.<call>`` (None: not one)."""
    if not isinstance(handle, str) or not handle.startswith("t") or "." not in handle:
        return None
    number = handle[1:].split(".", 1)[0]
    return int(number) if number.isdigit() else None


def _preview(handle: str, content: str) -> str:
    head, tail = content[:PREVIEW_CHARS], content[-PREVIEW_CHARS:]
    return (
        f"[tool result {handle}: {len(content):,} characters, only its head and tail are "
        f"shown; call {RECALL}(handle={handle!r}, start=..., length=...) for the rest]\n"
        f"{head}\n[...]\n{tail}"
    )


def _short_args(arguments: Any, width: int = 60) -> str:
    text = json.dumps(arguments, ensure_ascii=False, default=str, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_tokens_limit(budget: int | None) -> int:
    """Output tokens a summary may take: an eighth of the window, between 64 and 2048."""
    return max(64, min(2048, (budget or 8000) // 8))
