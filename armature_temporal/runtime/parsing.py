"""Read a model's raw output as the value a stage asked for, and say precisely what is wrong.

Models wrap answers in reasoning (``<think>…</think>``), code fences and polite prose, and
sometimes answer in TOML. :func:`parse_output` looks past all of that. When the answer is
still unusable, :attr:`ParsedOutput.error` is short and says what to fix, because it is sent
back to the model on the next attempt.

Pure: no I/O, deterministic, never raises on any text.
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from collections.abc import Iterator
from functools import lru_cache
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from pydantic import BaseModel, ConfigDict

__all__ = ["ParsedOutput", "parse_output", "schema_errors"]

#: At most this many schema errors are listed; the rest are counted.
MAX_LISTED_ERRORS = 12

_SHORT = 48  # characters of a value quoted in an error
_MAX_SCAN_STARTS = 64  # bounds the bracket scan on pathological text

# A complete reasoning block at the very start of the output (models put it first).
_LEADING_THINK = re.compile(r"\A\s*<(think|thinking)>.*?</\1>", re.IGNORECASE | re.DOTALL)
# The closing tag alone: the opening tag was part of the chat template, not the output.
_ORPHAN_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)
_UNCLOSED_OPEN = re.compile(r"\A\s*<(think|thinking)>", re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_OPENERS = re.compile(r"[\[{]")
_CLOSER = {"{": "}", "[": "]"}


class ParsedOutput(BaseModel):
    """A model output read as a stage's value.

    Attributes:
        value: The text (text mode), or the parsed JSON value — kept even when it fails the
            schema, for logs; ``None`` when nothing could be parsed.
        valid: True when the value is usable: non-empty text, or JSON that matches the schema.
        error: When not valid, what is wrong and how to fix it, phrased for the model.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: Any = None
    valid: bool
    error: str | None = None


def parse_output(
    text: str,
    output_mode: Literal["text", "json", "guided_json"],
    output_schema: dict[str, Any] | None,
) -> ParsedOutput:
    """Read ``text`` as the stage's output.

    Text mode returns the text without leading reasoning blocks, stripped. The JSON modes
    drop reasoning blocks and code fences, take the whole text as JSON or else the first
    balanced ``{…}``/``[…]`` that parses, fall back to TOML, and validate the result against
    ``output_schema`` (JSON Schema 2020-12; ``format`` is not asserted). Without a schema
    any JSON object or array is valid.

    A literal ``</think>`` inside an answer that is not bare JSON is taken as the end of a
    reasoning block; models do not write one there in practice.

    Args:
        text: The raw completion.
        output_mode: The stage's ``output_mode``; ``json`` and ``guided_json`` parse alike.
        output_schema: The stage's JSON Schema, or None.

    Returns:
        The value, whether it is valid, and an error for the model when it is not.
    """
    answer, reasoning_only = _strip_reasoning(text)
    if output_mode == "text":
        if not answer:
            return ParsedOutput(value="", valid=False, error=_no_text_error(text, reasoning_only))
        return ParsedOutput(value=answer, valid=True)

    if not answer:
        return ParsedOutput(valid=False, error=_no_text_error(text, reasoning_only))
    found, value, detail = _find_value(text.strip().lstrip("\ufeff"), answer)
    if not found:
        expected = _expected_kind(output_schema)
        error = (
            f"expected {expected} and nothing else, but the output starts with "
            f"{_quote(answer)}{detail}; reply with only the JSON"
        )
        return ParsedOutput(valid=False, error=error)
    if output_schema is None:
        if isinstance(value, dict | list):
            return ParsedOutput(value=value, valid=True)
        error = (
            f"expected a JSON object or array, got {_json_type(value)} "
            f"{_short(value)}; wrap the answer in an object"
        )
        return ParsedOutput(value=value, valid=False, error=error)
    errors = schema_errors(value, output_schema)
    if not errors:
        return ParsedOutput(value=value, valid=True)
    listed = errors[:MAX_LISTED_ERRORS]
    more = len(errors) - len(listed)
    lines = [
        "the JSON does not match the schema; fix these and send the whole JSON again:",
        *listed,
        *([f"(and {more} more)"] if more else []),
    ]
    return ParsedOutput(value=value, valid=False, error="\n".join(lines))


def schema_errors(value: Any, schema: dict[str, Any]) -> list[str]:
    """Every way ``value`` fails ``schema``, sorted by path, one short line each.

    Lines read ``at /points: [1] is too short; give at least 3 items``; ``/`` is the top level.

    Args:
        value: A JSON value.
        schema: A valid JSON Schema (2020-12).

    Returns:
        The error lines; empty when the value is valid.
    """
    found: list[ValidationError] = list(_validator(_schema_key(schema)).iter_errors(value))
    found.sort(key=lambda e: (_path_key(e.absolute_path), str(e.validator), e.message))
    lines = (f"at {_pointer(e.absolute_path)}: {_describe(e)}" for e in found)
    return list(dict.fromkeys(lines))


# --- reasoning and text ------------------------------------------------------------------------


def _strip_reasoning(text: str) -> tuple[str, bool]:
    """The answer without reasoning, stripped; and whether reasoning was all there was."""
    rest = text.lstrip("\ufeff")
    had_reasoning = False
    while match := _LEADING_THINK.match(rest):
        rest = rest[match.end() :]
        had_reasoning = True
    if _UNCLOSED_OPEN.match(rest):  # reasoning that never ended: no answer was given
        return "", True
    if orphan := _ORPHAN_CLOSE.search(rest):
        rest = rest[orphan.end() :]
        had_reasoning = True
    answer = rest.strip()
    return answer, had_reasoning and not answer


def _no_text_error(text: str, reasoning_only: bool) -> str:
    if reasoning_only:
        return (
            "the model returned only a <think> reasoning block and no answer; "
            "close the reasoning with </think> and give the answer after it"
        )
    return "the model returned no text; reply with the answer"


# --- finding the value -------------------------------------------------------------------------


def _find_value(raw: str, answer: str) -> tuple[bool, Any, str]:
    """Find the JSON (or TOML) value. Returns (found, value, detail for the error)."""
    fences = [(m.group(1).lower(), m.group(2).strip()) for m in _FENCE.finditer(answer)]
    candidates = [raw] if raw == answer else [raw, answer]
    candidates.extend(body for _, body in fences)
    detail = ""
    for candidate in candidates:
        ok, value, err = _loads_json(candidate)
        if ok:
            return True, value, ""
        if not detail and candidate[:1] in ("{", "["):
            detail = f" (invalid JSON: {err})"
    for span, unclosed_at in _balanced_spans(answer):
        if unclosed_at is not None:
            detail = (
                f" (the JSON opened at character {unclosed_at + 1} is never closed: "
                f"the output looks cut off; keep it shorter)"
            )
            break
        ok, value, err = _loads_json(span)
        if ok:
            return True, value, ""
        detail = detail or f" (invalid JSON: {err})"
    for body in [*(body for lang, body in fences if lang == "toml"), answer]:
        ok, value = _loads_toml(body)
        if ok:
            return True, value, ""
    return False, None, detail


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON; use null or a number")


def _loads_json(text: str) -> tuple[bool, Any, str]:
    try:
        return True, json.loads(text, parse_constant=_reject_constant), ""
    except json.JSONDecodeError as exc:
        return False, None, f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except (ValueError, RecursionError) as exc:
        return False, None, str(exc) or type(exc).__name__


def _loads_toml(text: str) -> tuple[bool, Any]:
    try:
        value = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError):
        return False, None
    return (True, _toml_to_json(value)) if value else (False, None)


def _toml_to_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _toml_to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_toml_to_json(v) for v in value]
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return value.isoformat()
    return value


def _balanced_spans(text: str) -> Iterator[tuple[str, int | None]]:
    """Yield each balanced ``{…}``/``[…]`` span, left to right, skipping over each one.

    The second item is the index of an opener that never closes, on the last item only: past
    it everything is inside that unclosed value, so the scan stops there.
    """
    pos = 0
    for _ in range(_MAX_SCAN_STARTS):
        match = _OPENERS.search(text, pos)
        if match is None:
            return
        start = match.start()
        end = _matching_close(text, start)
        if end is None:
            yield "", start
            return
        if end < 0:  # a mismatched closer: not a value; try the next opener
            pos = start + 1
            continue
        yield text[start : end + 1], None
        pos = end + 1


def _matching_close(text: str, start: int) -> int | None:
    """Index of the bracket closing ``text[start]``; -1 on a mismatch, None when unclosed."""
    stack: list[str] = []
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSER:
            stack.append(_CLOSER[ch])
        elif ch in "}]":
            if ch != stack.pop():
                return -1
            if not stack:
                return i
    return None


# --- error text --------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    return Draft202012Validator(json.loads(schema_json))


def _schema_key(schema: dict[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))


def _path_key(path: Any) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in path)


def _pointer(path: Any) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _quote(text: str) -> str:
    head = " ".join(text.split()).replace("`", "'")
    return "`" + (head if len(head) <= _SHORT else head[: _SHORT - 3] + "...") + "`"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _expected_kind(schema: dict[str, Any] | None) -> str:
    kind = schema.get("type") if schema is not None else None
    if kind == "object":
        return "a JSON object"
    if kind == "array":
        return "a JSON array"
    return "a JSON object or array" if schema is None else "JSON"


def _names(values: Any) -> str:
    items = [_short(v) for v in values]
    return ", ".join(items[:10]) + (", ..." if len(items) > 10 else "")


def _describe(error: ValidationError) -> str:
    """One validation error as a short instruction, in JSON (not Python) notation."""
    keyword, expected, instance = error.validator, error.validator_value, error.instance
    shown = _short(instance)
    if keyword == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return f"expected {wanted}, got {_json_type(instance)} {shown}"
    if keyword == "required":  # one error per missing name; all say the same, deduplicated
        missing = [name for name in expected if name not in instance]
        noun = "property" if len(missing) == 1 else "properties"
        return f"missing required {noun} {_names(missing)}"
    if keyword == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        patterns = list(error.schema.get("patternProperties", {}))
        extra = [
            k for k in instance if k not in allowed and not any(re.search(p, k) for p in patterns)
        ]
        hint = f"; allowed: {_names(allowed)}" if allowed else "; remove it"
        noun = "property" if len(extra) == 1 else "properties"
        return f"unexpected {noun} {_names(extra)}{hint}"
    if keyword == "enum":
        return f"{shown} is not one of {_names(expected)}"
    if keyword == "const":
        return f"must be {_short(expected)}, got {shown}"
    if keyword in ("minItems", "maxItems", "minLength", "maxLength"):
        unit = "items" if keyword.endswith("Items") else "characters"
        bound = "at least" if keyword.startswith("min") else "at most"
        size = "short" if keyword.startswith("min") else "long"
        return f"{shown} is too {size}; give {bound} {expected} {unit}"
    bounds = {
        "minimum": "be at least",
        "maximum": "be at most",
        "exclusiveMinimum": "be greater than",
        "exclusiveMaximum": "be less than",
    }
    if keyword in bounds:
        return f"{shown} is out of range; it must {bounds[keyword]} {expected}"
    if keyword == "oneOf" and not error.context:
        return f"{shown} matches more than one of the oneOf alternatives; match exactly one"
    if keyword in ("anyOf", "oneOf"):
        closest = best_match(error.context)
        hint = (
            f"; closest: at {_pointer(closest.absolute_path)}: {_describe(closest)}"
            if closest is not None
            else ""
        )
        return f"{shown} matches none of the allowed alternatives{hint}"
    message = str(error.message)
    return message.replace(repr(instance), shown) if len(repr(instance)) > _SHORT else message
