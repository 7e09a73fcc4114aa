"""Run inputs: the values a user gives (``--input k=v``, a webhook body, a schedule, a library
call) read as the spec's inputs schema declares them, checked against it, with unknown names
refused, text that is not valid Unicode refused, and the whole bounded in size
(``$ARMATURE_MAX_INPUT_BYTES``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema

from armature_temporal.errors import ArmatureError, did_you_mean
from armature_temporal.spec.compiler import Plan

__all__ = ["InputError", "coerce_input", "prepare_inputs"]


class InputError(ArmatureError):
    """Run inputs do not satisfy the spec's input schema."""


def _declared_types(prop: Any) -> list[str]:
    """The JSON types an input's schema names (``type``, or its ``anyOf``/``oneOf``
    branches'), strings last so that ``["integer", "string"]`` reads ``5`` as a number."""
    if not isinstance(prop, dict):
        return []
    kinds = prop.get("type")
    found = [kinds] if isinstance(kinds, str) else list(kinds or [])
    for key in ("anyOf", "oneOf"):
        for branch in prop.get(key) or []:
            found += _declared_types(branch)
    ordered = [k for k in dict.fromkeys(found) if isinstance(k, str)]
    return [k for k in ordered if k != "string"] + [k for k in ordered if k == "string"]


_BOOLEAN_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _number(text: str) -> int | float | None:
    """``text`` as an int when it is one, else a finite float, else None."""
    import math

    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


_NO = (False, None)


def _as_type(kind: str, raw: str) -> tuple[bool, Any]:
    """``(True, value)`` when ``raw`` reads as JSON type ``kind``, else ``(False, None)``."""
    text = raw.strip()
    if kind == "string":
        return True, raw
    if kind in ("integer", "number"):
        number = _number(text)
        if number is None or (kind == "integer" and not float(number).is_integer()):
            return _NO
        return True, int(number) if kind == "integer" else number
    if kind == "boolean":
        word = text.lower()
        return (True, _BOOLEAN_WORDS[word]) if word in _BOOLEAN_WORDS else _NO
    if kind == "null":
        return (True, None) if text.lower() in ("null", "none", "") else _NO
    if kind in ("array", "object"):
        try:
            value = json.loads(text)
        except ValueError:
            return _NO
        return (True, value) if isinstance(value, list if kind == "array" else dict) else _NO
    return _NO


def coerce_input(inputs_schema: dict[str, Any], name: str, raw: str) -> Any:
    """The value of ``--input name=raw``: read as the type the inputs schema declares for
    ``name`` (the first that fits, strings last), else as JSON, else as the text itself.

    A value no declared type accepts is kept as JSON or text, so that validation against
    the schema (:func:`prepare_inputs`) reports the schema's own complaint about it.
    """
    import json

    props = inputs_schema.get("properties") if isinstance(inputs_schema, dict) else None
    prop = props.get(name) if isinstance(props, dict) else None
    for kind in _declared_types(prop):
        ok, value = _as_type(kind, raw)
        if ok:
            return value
    if isinstance(prop, dict):
        for choice in prop.get("enum") or []:
            if raw == (choice if isinstance(choice, str) else json.dumps(choice)):
                return choice
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _lone_surrogates(value: Any, path: str) -> Iterator[str]:
    """Where ``value`` holds text with a lone surrogate (``"\\ud800"``, or a byte that was not
    UTF-8 in a command-line argument): such text has no UTF-8 form, so nothing can store it."""
    if isinstance(value, str):
        for i, ch in enumerate(value):
            if "\ud800" <= ch <= "\udfff":
                yield f"{path}: has a lone surrogate (U+{ord(ch):04X}) at character {i}"
                return
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _lone_surrogates(key, f"{path} (a key)")
            yield from _lone_surrogates(item, f"{path}/{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _lone_surrogates(item, f"{path}/{i}")


def _check_text_and_size(plan: Plan, inputs: dict[str, Any]) -> None:
    from armature_temporal.settings import max_input_bytes

    bad = [where for name, v in inputs.items() for where in _lone_surrogates(v, str(name))]
    bad += [where for name in inputs for where in _lone_surrogates(name, "an input's name")]
    if bad:
        raise InputError(
            f"run inputs for {plan.name!r} are not valid Unicode text: {'; '.join(bad[:5])}; "
            "such text cannot be stored or sent to a model — give it as UTF-8 (on a command "
            "line, check the terminal's and the file's encoding)"
        )
    try:
        size = len(json.dumps(inputs, ensure_ascii=False, default=str).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"run inputs for {plan.name!r} are not JSON data ({exc}); give strings, numbers, "
            "booleans, null, lists and mappings"
        ) from None
    limit = max_input_bytes()
    if size > limit:
        biggest = max(
            inputs, key=lambda k: len(json.dumps(inputs[k], ensure_ascii=False, default=str))
        )
        exact = f"{size:,} bytes; " if size >= 1024 else ""
        raise InputError(
            f"run inputs for {plan.name!r} are {_size(size)} of JSON ({exact}the largest is "
            f"{biggest!r}), over the {_size(limit)} limit: every input is kept in "
            "the run's history and stored with each stage that reads it. Pass a reference "
            "(a path in the workspace, a URL) instead of the content, or raise "
            "ARMATURE_MAX_INPUT_BYTES on every client and server"
        )


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def prepare_inputs(
    plan: Plan,
    given: dict[str, Any],
    *,
    how: str = "pass them as --input name=value or --inputs file.json",
) -> dict[str, Any]:
    """Apply the input schema's defaults, then validate; ``how`` ends the error message.

    A spec that declares its inputs (schema properties, without ``additionalProperties``)
    refuses names it does not declare; one that declares none accepts any. Text must be valid
    Unicode, and the inputs at most ``$ARMATURE_MAX_INPUT_BYTES`` of JSON.

    Raises:
        InputError: naming each problem and the schema's properties.
    """
    _check_text_and_size(plan, dict(given))
    schema = plan.inputs_schema
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    inputs = dict(given)
    for name, prop in props.items():
        if name not in inputs and isinstance(prop, dict) and "default" in prop:
            inputs[name] = prop["default"]
    lines = []
    if props and isinstance(schema, dict) and "additionalProperties" not in schema:
        for name in sorted(set(inputs) - set(props)):
            lines.append(f"{name}: unknown input{did_you_mean(name, list(props))}")
    validator = jsonschema.Draft202012Validator(schema)
    problems = sorted(validator.iter_errors(inputs), key=lambda e: list(e.path))
    for err in problems:
        where = "/".join(str(p) for p in err.path) or "inputs"
        lines.append(f"{where}: {err.message}")
    if lines:
        known = list(props) or "none declared"
        raise InputError(
            f"run inputs for {plan.name!r} are invalid: "
            + "; ".join(lines)
            + f". Inputs of this spec: {known}; {how}"
        )
    return inputs
