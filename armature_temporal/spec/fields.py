"""The building blocks of the spec models: the base model, identifier patterns, durations,
lists that accept a single string, and expressions that accept ``"{{ expr }}"``."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema

from armature_temporal.spec.durations import parse_duration

RoleType = Literal["worker", "orchestrator", "judge", "researcher"]


OutputMode = Literal["text", "json", "guided_json"]


FanIn = Literal["list", "merge", "first", "consensus"]


RuleOp = Literal["contains", "not_contains", "equals", "not_equals", "matches_regex", "truthy"]


RuleAction = Literal["allow", "block", "warn", "log", "require_approval"]


#: The built-in tier ladder, smallest first. Escalation moves up this order.
STANDARD_TIERS: tuple[str, ...] = ("tiny", "small", "medium", "large", "frontier")


IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


SPEC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


Seconds = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}]},
        mode="validation",
    ),
]


class FieldValueError(ValueError):
    """A model validator's error about one of the model's fields: the loader reports it at
    that field's own line (``stages[0].fan_in``), not at the model's."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _listify(value: Any) -> Any:
    """Accept a single string where a list of strings is expected."""
    return [value] if isinstance(value, str) else value


StrList = Annotated[list[str], BeforeValidator(_listify)]


_WRAPPED = re.compile(r"^\s*\{\{(.*)\}\}\s*$", re.S)


def unwrap_expression(value: Any) -> Any:
    """``"{{ expr }}"`` (the 0.7.0 way of writing an expression) is the expression ``expr``."""
    if isinstance(value, str):
        match = _WRAPPED.match(value)
        if match and "{{" not in match.group(1) and "}}" not in match.group(1):
            return match.group(1).strip()
    return value


#: A Jinja expression; ``"{{ expr }}"`` is accepted and means ``expr``.
Expression = Annotated[str, BeforeValidator(unwrap_expression)]


def _keys_mapping(value: Any) -> Any:
    """``[a, b]`` → ``{a: "", b: ""}`` (names with no description)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {v: "" for v in value}
    return value


KeysMapping = Annotated[dict[str, str], BeforeValidator(_keys_mapping)]


def _gate_shorthand(value: Any) -> Any:
    if isinstance(value, str):
        if value != "human":
            raise ValueError(f"unknown gate {value!r}; write gate: human or gate: {{type: human}}")
        return {"type": "human"}
    return value
