"""JSON values that match a JSON Schema, drawn from a seeded stream and the prompt's words."""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

from armature_temporal.runtime.simulate._words import MARK, phrase, rng_for, sentence

__all__ = ["ANY_OBJECT", "SENTENCE_KEYS", "Generator", "conforms", "with_score"]

_SHALLOW = 3  # below this depth optional properties are included sometimes
_MAX_DEPTH = 24  # recursive $refs stop here
_ATTEMPTS = 4
SENTENCE_KEYS = _SENTENCE_KEYS = re.compile(
    r"rational|reason|summary|explan|descri|answer|text|content|note|comment|feedback|body",
    re.IGNORECASE,
)

ANY_OBJECT: dict[str, Any] = {"type": "object"}


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    return Draft202012Validator(json.loads(schema_json))


def _conforms(value: Any, schema: Any) -> bool:
    key = json.dumps(schema, separators=(",", ":"))
    return bool(_validator(key).is_valid(value))


#: ``_conforms`` under a public name (the pitfalls module uses it).
conforms = _conforms


class Generator:
    """Builds values that match a JSON Schema, from a seeded stream and a vocabulary."""

    def __init__(
        self, rng: random.Random, words: list[str], root: Any, *, invent_keys: bool = True
    ) -> None:
        self.rng = rng
        self.words = words
        self.root = root
        self.invent_keys = invent_keys  # fill a property-less object with made-up keys

    def valid_root(self) -> Any:
        """A value for the root schema; retried a few times if a draw misses."""
        value = self.value(self.root, 0, "")
        for _ in range(_ATTEMPTS - 1):
            if _conforms(value, self.root):
                break
            value = self.value(self.root, 0, "")
        return value

    def standalone(self, schema: Any) -> Any:
        """``schema`` made checkable on its own: the root's ``$defs`` come along."""
        defs = {
            k: self.root[k]
            for k in ("$defs", "definitions")
            if isinstance(self.root, dict) and k in self.root
        }
        if not defs:
            return schema
        return {**schema, **defs} if isinstance(schema, dict) else {"allOf": [schema], **defs}

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Inline ``$ref`` (local only) and merge ``allOf`` into one schema."""
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            target: Any = self.root
            for token in ref[1:].lstrip("/").split("/") if ref != "#" else []:
                name = token.replace("~1", "/").replace("~0", "~")
                target = target.get(name, {}) if isinstance(target, dict) else {}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, dict) else rest
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for branch in schema["allOf"]:
                part = self.resolve(branch) if isinstance(branch, dict) else {}
                props = {**merged.get("properties", {}), **part.get("properties", {})}
                required = [*merged.get("required", []), *part.get("required", [])]
                merged = {
                    **merged,
                    **part,
                    "properties": props,
                    "required": list(dict.fromkeys(required)),
                }
            schema = merged
        return schema

    def value(self, schema: Any, depth: int, key: str) -> Any:
        if schema is True or schema == {}:
            return self.string({}, key)
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return None
        schema = self.resolve(schema)
        if "$ref" in schema and depth < _MAX_DEPTH:  # a $ref inside the referenced schema
            return self.value(schema, depth + 1, key)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return copy.deepcopy(self.rng.choice(schema["enum"]))
        for keyword in ("oneOf", "anyOf"):
            if isinstance(schema.get(keyword), list):
                return self.alternative(schema, keyword, depth, key)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
        if kind is None:
            kind = self.infer_type(schema)
        makers: dict[str, Callable[[], Any]] = {
            "object": lambda: self.object(schema, depth, key),
            "array": lambda: self.array(schema, depth, key),
            "string": lambda: self.string(schema, key),
            "integer": lambda: self.integer(schema),
            "number": lambda: self.number(schema),
            "boolean": lambda: self.rng.random() < 0.5,
        }
        maker = makers.get(str(kind))
        return maker() if maker is not None else None

    def alternative(self, schema: dict[str, Any], keyword: str, depth: int, key: str) -> Any:
        base = {k: v for k, v in schema.items() if k != keyword}
        whole = self.standalone(schema)
        candidate: Any = None
        for branch in schema[keyword]:
            merged = {**base, **branch} if isinstance(branch, dict) else base
            for _ in range(2):
                candidate = self.value(merged, depth + 1, key)
                if _conforms(candidate, whole):
                    return candidate
        return candidate

    @staticmethod
    def infer_type(schema: dict[str, Any]) -> str:
        if any(k in schema for k in ("properties", "required", "additionalProperties")):
            return "object"
        if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
            return "array"
        if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
            return "number"
        return "string"

    def object(self, schema: dict[str, Any], depth: int, key: str) -> dict[str, Any]:
        props: dict[str, Any] = schema.get("properties", {})
        required: list[str] = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or (depth < _SHALLOW and self.rng.random() < 0.75):
                out[name] = self.value(sub, depth + 1, name)
        if not out and props and depth == 0:  # a model fills in something at the top
            name, sub = next(iter(props.items()))
            out[name] = self.value(sub, depth + 1, name)
        for name in required:
            if name not in out:
                found = self.pattern_schema(schema, name)
                if found is None:
                    found = extra if isinstance(extra, dict) else {"type": "string"}
                out[name] = self.value(found, depth + 1, name)
        if (
            self.invent_keys
            and not props
            and not required
            and extra is not False
            and depth < _SHALLOW
        ):
            for name in self.rng.sample(self.words, min(len(self.words), self.rng.randint(1, 3))):
                sub = extra if isinstance(extra, dict) else {"type": "string"}
                out[name] = self.value(sub, depth + 1, name)
        for name, sub in props.items():  # honour minProperties from the optional ones
            if len(out) >= schema.get("minProperties", 0):
                break
            out.setdefault(name, self.value(sub, depth + 1, name))
        return out

    @staticmethod
    def pattern_schema(schema: dict[str, Any], name: str) -> Any:
        for pattern, sub in schema.get("patternProperties", {}).items():
            if re.search(pattern, name):
                return sub
        return None

    def array(self, schema: dict[str, Any], depth: int, key: str) -> list[Any]:
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", low + 3))
        prefix: list[Any] = schema.get("prefixItems", [])
        items = schema.get("items", {})
        if items is False:
            high = min(high, len(prefix))
        top = min(high, low + (3 if depth < _SHALLOW else 1))
        count = self.rng.randint(min(max(low, 1), top), top) if top >= low else low
        out: list[Any] = []
        seen: set[str] = set()
        for _ in range(count * 5 if schema.get("uniqueItems") else count):
            if len(out) >= count:
                break
            sub = prefix[len(out)] if len(out) < len(prefix) else items
            item = self.value(sub, depth + 1, key)
            marker = json.dumps(item, sort_keys=True)
            if schema.get("uniqueItems") and marker in seen:
                continue
            seen.add(marker)
            out.append(item)
        return out

    def string(self, schema: dict[str, Any], key: str) -> str:
        low = int(schema.get("minLength", 0))
        high = schema.get("maxLength")
        if _SENTENCE_KEYS.search(key):
            text = sentence(self.rng, self.words)
            if high is None or len(text) + len(MARK) <= high:
                text = MARK + text
        else:
            text = phrase(self.rng, self.words)
        while len(text) < low:
            text += " " + self.rng.choice(self.words)
        if high is not None and len(text) > high:
            text = text[: int(high)].rstrip()
        return text + "x" * (low - len(text))

    def bounds(self, schema: dict[str, Any]) -> tuple[float, float, bool, bool]:
        """(low, high, low exclusive, high exclusive), defaulting to a span of 100."""
        low_ex, high_ex = "exclusiveMinimum" in schema, "exclusiveMaximum" in schema
        low: Any = schema.get("exclusiveMinimum", schema.get("minimum"))
        high: Any = schema.get("exclusiveMaximum", schema.get("maximum"))
        if "minimum" in schema and "exclusiveMinimum" in schema:  # the tighter one wins
            low_ex = schema["exclusiveMinimum"] >= schema["minimum"]
            low = max(schema["minimum"], schema["exclusiveMinimum"])
        if "maximum" in schema and "exclusiveMaximum" in schema:
            high_ex = schema["exclusiveMaximum"] <= schema["maximum"]
            high = min(schema["maximum"], schema["exclusiveMaximum"])
        if low is None and high is None:
            low, high = 0, 100
        elif low is None:
            low = high - 100
        elif high is None:
            high = low + 100
        return float(low), float(high), low_ex, high_ex

    def integer(self, schema: dict[str, Any]) -> int:
        low, high, low_ex, high_ex = self.bounds(schema)
        first = int(low) + 1 if low_ex and low == int(low) else -int(-low // 1)
        last = int(high) - 1 if high_ex and high == int(high) else int(high // 1)
        return self.rng.randint(first, last) if first <= last else first

    def number(self, schema: dict[str, Any]) -> float:
        low, high, low_ex, high_ex = self.bounds(schema)
        drawn = round(self.rng.uniform(low, high), 2)
        above = drawn > low or (not low_ex and drawn == low)
        below = drawn < high or (not high_ex and drawn == high)
        return drawn if above and below else (low + high) / 2


def with_score(value: Any, schema: dict[str, Any], quality: float) -> Any:
    """Set a judge's ``score`` to the output's quality (scaled to the schema's range)."""
    props = Generator(random.Random(0), [], schema).resolve(schema).get("properties", {})
    if not isinstance(value, dict) or "score" not in props:
        return value
    sub = props["score"] if isinstance(props["score"], dict) else {}
    candidates: list[Any] = [round(quality, 3)]
    if any(k in sub for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        low, high, _, _ = Generator(random.Random(0), [], schema).bounds(sub)
        scaled = low + quality * (high - low)
        candidates.append(round(scaled) if sub.get("type") == "integer" else round(scaled, 3))
    for score in candidates:
        scored = {**value, "score": score}
        if _conforms(scored, schema):
            return scored
    return value


def with_criterion_scores(
    value: Any, schema: dict[str, Any], seed: str, judged: float, sd: float
) -> Any:
    """A judge without a ``score`` property scores each criterion: every property that is a
    number bounded to [0, 1] (an ``evaluate`` judge's criteria) gets ``clip(judged + N(0,
    sd))``, its own noise per property (``sd``: the declared judge noise)."""
    props = Generator(random.Random(0), [], schema).resolve(schema).get("properties", {})
    if not isinstance(value, dict) or "score" in props:
        return value
    scored = dict(value)
    for key, sub in props.items():
        if not isinstance(sub, dict) or sub.get("type") != "number":
            continue
        if sub.get("minimum") != 0 or sub.get("maximum") != 1:
            continue
        noise = rng_for(f"{seed}/criterion/{key}").gauss(0.0, sd)
        scored[key] = round(min(1.0, max(0.0, judged + noise)), 3)
    return scored if _conforms(scored, schema) else value
