"""What a JSON request body may not hold, for every route that reads one (the run API, the
webhooks): nesting deeper than :data:`MAX_JSON_DEPTH`, or a lone surrogate escape
(``"\\ud800"``, half of a UTF-16 pair: not text, and not storable — Temporal's payloads and
the trace store are UTF-8, so such a body would fail later, as a 500, or worse, be half-kept).

:func:`json_problem` scans the bytes first, at C speed; only a suspect body is parsed and
walked, to name the place.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any, Literal

__all__ = ["MAX_JSON_DEPTH", "Problem", "json_problem"]

#: JSON nested deeper than this (objects and arrays) is refused (400).
MAX_JSON_DEPTH = 64

#: What is wrong ("deep" or "surrogate") and where (a JSON path such as ``$.inputs.ticket``).
Problem = tuple[Literal["deep", "surrogate"], str]

_UNPARSED: Any = object()


def json_problem(body: bytes, parsed: Any = _UNPARSED) -> Problem | None:
    """What is wrong with the JSON text ``body`` (``parsed``: its value, when at hand), or None
    — also for a body that is not JSON at all: its parser says that, in its own words.
    """
    if _max_depth(body) <= MAX_JSON_DEPTH and not _SURROGATE_ESCAPE.search(body):
        return None
    if parsed is _UNPARSED:
        try:
            parsed = json.loads(body)
        except RecursionError:  # deeper than the parser goes: far past MAX_JSON_DEPTH
            return "deep", "$"
        except ValueError:  # not JSON (UnicodeDecodeError is one)
            return None
    return _walk(parsed)


_JSON_STRING = re.compile(rb'"[^"]*"')  # once escaped backslashes and quotes are gone
_NOT_BRACKETS = bytes(range(256)).translate(None, delete=b"[]{}")
_BRACKET_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
#: A \uD800-\uDFFF escape: maybe half of a pair, maybe a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _max_depth(body: bytes) -> int:
    """How deep a JSON text nests, from its brackets outside strings (at C speed)."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _JSON_STRING.sub(b"", unescaped).translate(None, delete=_NOT_BRACKETS)
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def _walk(value: Any) -> Problem | None:
    """("deep", path) for a container nested deeper than :data:`MAX_JSON_DEPTH`,
    ("surrogate", path) for a string (value or key) that is not valid Unicode, else None.

    Iterative (depth costs no recursion); a path is built only for the answer.
    """
    Trail = tuple[Any, str | int] | None  # (parent trail, key or index), linked
    stack: list[tuple[int, Any, Trail]] = [(0, value, None)]
    while stack:
        depth, item, trail = stack.pop()
        if isinstance(item, str):
            if not _is_text(item):
                return "surrogate", _path(trail)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth >= MAX_JSON_DEPTH:
            return "deep", _path(trail)
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for k, v in pairs:
            if isinstance(k, str) and not _is_text(k):
                return "surrogate", _path(trail)
            if isinstance(v, str | dict | list):
                stack.append((depth + 1, v, (trail, k)))
    return None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path(trail: Any) -> str:
    steps: list[str] = []
    while trail is not None:
        trail, step = trail
        steps.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    return _shown("$" + "".join(reversed(steps)))


def _shown(path: str) -> str:
    """A JSON path fit for an error message: ASCII (keys may hold lone surrogates), short."""
    text = path.encode("ascii", "backslashreplace").decode()
    return text[:120] + ("..." if len(text) > 120 else "")
