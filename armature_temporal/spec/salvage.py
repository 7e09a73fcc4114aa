"""What of an invalid spec can still be checked, so ``validate`` lists every problem in one pass.

When a spec fails validation, :func:`salvage` repairs a copy just enough for the
whole-document checks (references, tiers, templates, duplicate ids) to look at the rest:

- a field the schema does not know, or an optional field with a bad value, is dropped;
- a required field that is missing or bad gets a neutral placeholder of its type (an empty
  text, list or mapping, a model with its own gaps repaired the same way) and the checks'
  findings under it are set aside (:attr:`Salvaged.covered`): they would be about the
  placeholder, not the user's text;
- a stage whose own rules fail (no kind, two kinds) becomes a placeholder stage that keeps
  its id, so references to it stay valid, and its findings are set aside;
- a broken top-level field is dropped, with the check families that need it skipped.

So a stage with a misspelt field still has its tier, its templates and its id checked (before,
each problem showed only once the one before it was fixed). Pure: the loader reports.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from armature_temporal.spec.models import IDENTIFIER, Spec

__all__ = ["Salvaged", "allowed_fields", "salvage"]

#: Top-level fields whose breakage makes a family of whole-document checks meaningless.
CHECKS_NEEDING = {
    "model_tiers": "tiers",
    "role_type_defaults": "tiers",
    "inputs": "templates",
    "contracts": "templates",
    "continuation": "templates",
    "memory": "templates",
}
#: Rounds of repair: a placeholder model can reveal its own missing fields one level down.
_ROUNDS = 6

Loc = tuple[str | int, ...]


@dataclass
class Salvaged:
    """The repaired spec; the stages replaced whole (``placeholders``, by index); the paths
    whose findings are about a placeholder (``covered``); check families to ``skip``."""

    spec: Spec | None = None
    placeholders: set[int] = field(default_factory=set)
    covered: list[Loc] = field(default_factory=list)
    skip: set[str] = field(default_factory=set)

    def set_aside(self, path: Sequence[str | int]) -> bool:
        """Whether a check's finding at ``path`` is about something the repair put there."""
        if len(path) >= 2 and path[0] == "stages" and path[1] in self.placeholders:
            return True
        return any(tuple(path[: len(c)]) == c for c in self.covered)


def salvage(data: dict[str, Any], exc: ValidationError) -> Salvaged | None:
    """A spec without the parts that failed validation (see the module docstring); None when
    nothing sensible remains (no stages, or an error the repair cannot place)."""
    stages = data.get("stages")
    if not isinstance(stages, list) or not stages:
        return None
    repaired = copy.deepcopy(data)
    found = Salvaged()
    errors = exc.errors()
    for _ in range(_ROUNDS):
        for err in errors:
            if not _repair(repaired, tuple(err["loc"]), str(err["type"]), found):
                return None
        try:
            found.spec = Spec.model_validate(repaired)
        except ValidationError as again:
            errors = again.errors()
            continue
        return found
    return None


def _repair(data: dict[str, Any], loc: Loc, kind: str, found: Salvaged) -> bool:
    """Mend ``data`` at the error's ``loc``; False when it cannot be placed."""
    if not loc:
        return False
    if loc[0] != "stages":
        name = str(loc[0])
        if name == "name":
            data["name"] = "invalid"
        else:
            data.pop(name, None)  # a broken top-level field is dropped
        if name in CHECKS_NEEDING:
            found.skip.add(CHECKS_NEEDING[name])
        return True
    if len(loc) < 2 or not isinstance(loc[1], int):
        return False
    index = loc[1]
    stages = data["stages"]
    if index >= len(stages):
        return False
    real = _real_path(data, loc)
    if real is None or len(real) <= 2:
        _placeholder_stage(stages, index, found)  # the stage's own rules failed
        return True
    holder = _at(data, real[:-1])
    key = real[-1]
    if not isinstance(holder, dict | list):
        _placeholder_stage(stages, index, found)
        return True
    if kind == "extra_forbidden":
        if isinstance(holder, dict):
            holder.pop(key, None)
        return True
    required, annotation = _field(real)
    if not required and isinstance(holder, dict) and kind != "missing":
        holder.pop(key, None)
        return True
    value = _placeholder(annotation, key, index)
    if value is PydanticUndefined:
        _placeholder_stage(stages, index, found)
        return True
    if isinstance(holder, dict):  # noqa: SIM114 (separate branches narrow key's type)
        holder[key] = value
    elif isinstance(key, int) and key < len(holder):
        holder[key] = value
    else:
        _placeholder_stage(stages, index, found)
        return True
    found.covered.append(real)
    return True


def _placeholder_stage(stages: list[Any], index: int, found: Salvaged) -> None:
    raw = stages[index] if isinstance(stages[index], dict) else {}
    sid = raw.get("id")
    deps = raw.get("depends_on")
    stages[index] = {
        "id": sid if isinstance(sid, str) and IDENTIFIER.match(sid) else f"_invalid_{index}",
        "gate": "human",
        "depends_on": deps
        if isinstance(deps, list) and all(isinstance(d, str) for d in deps)
        else [],
    }
    found.placeholders.add(index)


def _real_path(data: Any, loc: Loc) -> Loc | None:
    """``loc`` without pydantic's union-branch tags (``function-after[...]``, ``str``): the
    keys and indexes that exist in ``data``, then the last part (the field at fault)."""
    real: list[str | int] = []
    here = data
    for part in loc[:-1]:
        if isinstance(here, dict) and part in here:  # noqa: SIM114 (narrowing, as above)
            here = here[part]
        elif isinstance(here, list) and isinstance(part, int) and part < len(here):
            here = here[part]
        else:
            continue  # a union branch's tag, not a key
        real.append(part)
    last = loc[-1]
    if isinstance(here, dict | list) or last in ("id",):
        real.append(last)
    return tuple(real) if real else None


def _at(data: Any, path: Loc) -> Any:
    for part in path:
        data = data[part]
    return data


def _field(path: Loc) -> tuple[bool, Any]:
    """(required, annotation) of the field at ``path`` in Spec (required: no default)."""
    annotation: Any = Spec
    required = True
    for part in path:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            info = annotation.model_fields.get(str(part))
            if info is None:
                return True, None
            required = info.is_required()
            annotation = info.annotation
        elif get_origin(annotation) in (list, dict):
            annotation, required = get_args(annotation)[-1], True
        else:
            return True, None
    return required, annotation


def _placeholder(annotation: Any, key: str | int, index: int) -> Any:
    """A neutral value of the field's type; PydanticUndefined when there is none."""
    kind = _unwrap(annotation)
    if key == "id":
        return f"_invalid_{index}"
    if kind is str:
        return "placeholder"
    if get_origin(kind) is list or kind is list:
        return []
    if get_origin(kind) is dict or kind is dict:
        return {}
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return {}
    return PydanticUndefined


def allowed_fields(loc: Sequence[str | int]) -> list[str]:
    """Field names of the model found at ``loc`` (walks Spec's annotations)."""
    annotation: Any = Spec
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            info = annotation.model_fields.get(str(part))
            if info is None:
                return []
            annotation = info.annotation
        elif get_origin(annotation) in (list, dict):
            annotation = get_args(annotation)[-1]
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated / Optional down to a model class, a list/dict generic or a type."""
    for _ in range(8):
        origin = get_origin(annotation)
        if origin in (list, dict) or (
            isinstance(annotation, type) and issubclass(annotation, BaseModel)
        ):
            return annotation
        args = [a for a in get_args(annotation) if a is not type(None)]
        if not args:
            return annotation
        models = [
            a
            for a in args
            if (isinstance(a, type) and issubclass(a, BaseModel)) or get_origin(a) in (list, dict)
        ]
        annotation = models[0] if models else args[0]
    return annotation
