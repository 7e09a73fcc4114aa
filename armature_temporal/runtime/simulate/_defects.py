"""Realistic wrong answers: the valid value with one defect, until the output checker rejects it."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any, Literal

from armature_temporal.runtime.parsing import parse_output
from armature_temporal.runtime.simulate._output import render

__all__ = ["invalid_text"]

_INVALID_KINDS = ("missing", "wrong_type", "out_of_enum", "truncated")
_INVALID_WEIGHTS = (0.35, 0.35, 0.2, 0.1)
_MAX_DEFECTS = 16
_APOLOGY = "Sorry, I could not produce the requested JSON. [simulated]"


def invalid_text(
    value: Any,
    mode: Literal["json", "guided_json"],
    schema: dict[str, Any] | None,
    dress: float,
    rng: random.Random,
    words: list[str],
) -> str:
    """A realistic wrong answer: the chosen defect first, then the others, until one fails."""
    chosen = rng.choices(_INVALID_KINDS, weights=_INVALID_WEIGHTS)[0]
    order = [chosen, *(k for k in _INVALID_KINDS if k != chosen)]
    for kind in order:
        for text in _defects(kind, value, dress, rng, words):
            if not parse_output(text, mode, schema).valid:
                return text
    return _APOLOGY


def _defects(
    kind: str, value: Any, dress: float, rng: random.Random, words: list[str]
) -> Iterator[str]:
    """Candidate texts with one defect of ``kind`` (at most ``_MAX_DEFECTS`` of them)."""
    if kind == "truncated":  # the output stops mid-way
        if isinstance(value, dict | list):
            body = json.dumps(value, ensure_ascii=False)
            yield body[: max(1, min(len(body) - 1, int(len(body) * rng.uniform(0.4, 0.85))))]
        return
    paths = _paths(value)
    rng.shuffle(paths)
    made = 0
    for path in paths:
        if made >= _MAX_DEFECTS:
            return
        current = _get(value, path)
        if kind == "missing" and path and isinstance(_get(value, path[:-1]), dict):
            broken = _replaced(value, path, _DELETE)
        elif kind == "wrong_type":
            broken = _replaced(value, path, _other_type(current, words))
        elif kind == "out_of_enum" and isinstance(current, str):
            broken = _replaced(value, path, f"other {rng.choice(words)}")
        else:
            continue
        made += 1
        yield render(broken, dress, rng, words)


_DELETE = object()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_paths(v, (*prefix, i)))
    return found


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    out = copy.deepcopy(value)
    parent = _get(out, path[:-1])
    if new is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return out


def _other_type(value: Any, words: list[str]) -> Any:
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, int | float):
        return f"{words[0]} {value}"
    if isinstance(value, str):
        return 42
    if value is None:
        return "none"
    return " ".join(words[:3])  # a container written out as prose
