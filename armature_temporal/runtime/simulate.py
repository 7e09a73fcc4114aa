"""Armature's offline ``simulate`` provider — a simulator, not a language model.

It exists so that specs can be tried, demos run, and tests and benchmarks executed without
API keys, a network or any cost. Nothing here understands the prompt: it writes output of
the requested shape from the prompt's own words, and each tier's two knobs decide how often
that output is valid (``valid_rate``) and how good it is deemed (``quality``). Text output
starts with ``[simulated]``, and so do free-text JSON fields (``rationale``, ``summary``, …)
where their length limits allow, so no one mistakes it for a real model's answer.

Everything is deterministic in ``seed`` (the caller passes e.g.
``f"{run_id}/{stage}/{attempt}/{tier}"``): the same arguments give the same bytes. The
validity coin and the content come from streams that do not depend on the knobs, so two
tiers given the same seed are coupled: the one with the higher ``valid_rate`` is valid
whenever the other is, which keeps tier comparisons in benchmarks low-noise.

Supported JSON Schema keywords for valid output: ``type`` (one or a list), ``properties``,
``required``, ``additionalProperties``, ``enum``, ``const``, ``minItems``/``maxItems``,
``items``, ``prefixItems``, ``uniqueItems``, ``minLength``/``maxLength``,
``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``, ``anyOf``/``oneOf`` (the
first branch that can be satisfied), ``allOf`` (merged), and ``$ref`` to ``#/$defs/…``.
``format`` is ignored; ``pattern`` and other keywords are not honoured, so a schema that
relies on them gets invalid simulated output.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any, Literal

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.runtime.parsing import parse_output

__all__ = ["SimulatedCompletion", "simulate_completion", "simulate_tool_turn"]

#: Share of outputs that are dressed up (a ```json fence or a leading <think> block).
DRESSED_SHARE = 0.2
#: Beta concentration of per-output quality around a tier's ``quality`` knob.
QUALITY_CONCENTRATION = 20.0

_SHALLOW = 3  # below this depth optional properties are included sometimes
_MAX_DEPTH = 24  # recursive $refs stop here
_ATTEMPTS = 4
_MARK = "[simulated] "
_SENTENCE_KEYS = re.compile(
    r"rational|reason|summary|explan|descri|answer|text|content|note|comment|feedback|body",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\W\d_]{3,}")
_STOPWORDS = frozenset(
    (
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "into",
        "your",
        "you",
        "are",
        "was",
        "were",
        "will",
        "would",
        "should",
        "could",
        "have",
        "has",
        "had",
        "not",
        "but",
        "all",
        "any",
        "can",
        "each",
        "its",
        "our",
        "their",
        "them",
        "they",
        "then",
        "than",
        "what",
        "when",
        "which",
        "who",
        "whom",
        "why",
        "how",
        "about",
        "over",
        "under",
        "only",
        "also",
        "just",
        "more",
        "most",
        "some",
        "such",
        "very",
        "json",
        "output",
        "reply",
        "return",
        "given",
        "following",
        "must",
        "please",
        "use",
        "using",
    )
)
_FALLBACK_WORDS = (
    "request",
    "summary",
    "customer",
    "report",
    "detail",
    "result",
    "priority",
    "account",
    "update",
    "review",
)
_TEXT_TEMPLATES = (
    "This response addresses {a} and {b}.",
    "The main point concerns {a}, with attention to {b}.",
    "Considering {a}, the answer notes {b} and {c}.",
    "Next steps would involve {a} and a closer look at {b}.",
    "In short, {a} matters most here.",
)


class SimulatedCompletion(BaseModel):
    """One simulated model response.

    Attributes:
        text: The raw output, as a model would return it.
        intended_valid: Whether the simulator meant this output to parse and match the schema
            (it draws the invalid ones on purpose, at rate ``1 - valid_rate``).
        quality: The output's simulated quality in [0, 1]; a judge's ``score`` repeats it.
        prompt_tokens: A rough token count of the prompt (characters / 4).
        completion_tokens: A rough token count of ``text`` (characters / 4).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    intended_valid: bool
    quality: float = Field(ge=0.0, le=1.0)
    prompt_tokens: int = Field(ge=1)
    completion_tokens: int = Field(ge=1)


def simulate_completion(
    *,
    seed: str,
    prompt: str,
    output_mode: Literal["text", "json", "guided_json"],
    output_schema: dict[str, Any] | None,
    role_type: Literal["worker", "orchestrator", "judge", "researcher"],
    valid_rate: float,
    quality: float,
) -> SimulatedCompletion:
    """Simulate one completion, deterministically in ``seed``.

    Args:
        seed: Identifies the call, e.g. ``f"{run_id}/{stage}/{attempt}/{tier}"``.
        prompt: The rendered prompt; its words make up the output's strings.
        output_mode: ``text`` gives ``[simulated] …`` sentences; the JSON modes give JSON.
        output_schema: The JSON Schema valid output must match; None means any object.
        role_type: A ``judge`` puts the output's quality in its ``score`` property.
        valid_rate: Probability in [0, 1] that the output is valid.
        quality: Mean in [0, 1] of the per-output quality.

    Returns:
        The text, whether it was meant to be valid, its quality and rough token counts.

    Raises:
        ValueError: ``valid_rate`` or ``quality`` is outside [0, 1].
    """
    for name, knob in (("valid_rate", valid_rate), ("quality", quality)):
        if not 0.0 <= knob <= 1.0:
            raise ValueError(
                f"{name} must be between 0 and 1, got {knob!r}; fix the simulate tier's {name}"
            )
    rng = _rng(seed)
    intended_valid = rng.random() < valid_rate
    dress = rng.random()
    content = random.Random(rng.getrandbits(64))
    drawn = _draw_quality(random.Random(rng.getrandbits(64)), quality)
    words = _words(prompt)
    if output_mode == "text":
        text = (
            _text_answer(content, words, role_type, drawn, dress)
            if intended_valid
            else _unfinished_reasoning(content, words)
        )
    else:
        schema = output_schema if output_schema is not None else _ANY_OBJECT
        gen = _Generator(content, words, schema)
        value = gen.valid_root()
        if role_type == "judge":
            value = _with_score(value, schema, drawn)
        if intended_valid:
            text = _render(value, dress, content, words)
        else:
            text = _invalid_text(value, output_mode, output_schema, dress, content, words)
    return SimulatedCompletion(
        text=text,
        intended_valid=intended_valid,
        quality=drawn,
        prompt_tokens=max(1, len(prompt) // 4),
        completion_tokens=max(1, len(text) // 4),
    )


def simulate_tool_turn(
    *, seed: str, turn: int, max_turns: int, tools: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The tool calls a simulated agent makes on ``turn``, or None to answer now.

    The agent calls tools on its first one or two turns (chosen by ``seed``), never on a turn
    ``>= max_turns - 1``, so the last turn is always left for the answer. Call ids run
    ``call_1``, ``call_2``, … across turns.

    Args:
        seed: The stage attempt's seed; the same for every turn of one conversation.
        turn: 0-based turn number.
        max_turns: The role's ``max_turns``.
        tools: Tool definitions ``{"name", "description", "parameters": JSON Schema}``.

    Returns:
        ``[{"id": "call_<n>", "name": ..., "arguments": {...}}]`` with arguments that match
        the tool's parameters schema, or None.

    Raises:
        ValueError: ``turn`` is negative or a tool has no ``name``.
    """
    if turn < 0:
        raise ValueError(f"turn is 0-based and must not be negative, got {turn}")
    for i, tool in enumerate(tools):
        if not isinstance(tool.get("name"), str):
            raise ValueError(
                f"tools[{i}] has no 'name'; each tool is a dict with 'name', "
                f"'description' and 'parameters' (a JSON Schema)"
            )
    if not tools or turn >= max_turns - 1:
        return None
    tool_turns = 1 if _rng(f"{seed}/tools").random() < 0.5 else 2
    if turn >= tool_turns:
        return None
    number = sum(_calls_on_turn(_rng(f"{seed}/tools/{t}")) for t in range(turn))
    rng = _rng(f"{seed}/tools/{turn}")
    calls: list[dict[str, Any]] = []
    for _ in range(_calls_on_turn(rng)):
        tool = rng.choice(tools)
        schema = tool.get("parameters") or {"type": "object"}
        words = _words(f"{tool['name'].replace('_', ' ')} {tool.get('description', '')}")
        arguments = _Generator(rng, words, schema, invent_keys=False).valid_root()
        number += 1
        calls.append(
            {
                "id": f"call_{number}",
                "name": tool["name"],
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
        )
    return calls


# --- randomness and words ----------------------------------------------------------------------


def _rng(seed: str) -> random.Random:
    digest = hashlib.sha256(seed.encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _calls_on_turn(rng: random.Random) -> int:
    return 2 if rng.random() < 0.25 else 1


def _draw_quality(rng: random.Random, mean: float) -> float:
    if mean <= 0.0 or mean >= 1.0:
        return mean
    drawn = rng.betavariate(mean * QUALITY_CONCENTRATION, (1.0 - mean) * QUALITY_CONCENTRATION)
    return min(1.0, max(0.0, drawn))


def _words(text: str) -> list[str]:
    seen = dict.fromkeys(w.lower() for w in _WORD.findall(text))
    words = [w for w in seen if w not in _STOPWORDS][:64]
    return words if len(words) >= 4 else [*words, *_FALLBACK_WORDS]


def _phrase(rng: random.Random, words: list[str]) -> str:
    """A short noun phrase: one to three distinct prompt words, capitalised."""
    text = " ".join(rng.sample(words, min(len(words), rng.randint(1, 3))))
    return text[:1].upper() + text[1:]


def _sentence(rng: random.Random, words: list[str]) -> str:
    """One plain sentence built on prompt words."""
    a, b, c = (rng.choice(words) for _ in range(3))
    return rng.choice(_TEXT_TEMPLATES).format(a=a, b=b, c=c)


# --- text mode ---------------------------------------------------------------------------------


def _text_answer(
    rng: random.Random, words: list[str], role_type: str, quality: float, dress: float
) -> str:
    sentences = [_sentence(rng, words) for _ in range(rng.randint(2, 4))]
    if role_type == "judge":
        sentences.append(f"Score: {round(quality, 3)}.")
    text = _MARK + " ".join(sentences)
    if dress < DRESSED_SHARE / 2:
        return f"<think>\n[simulated] Thinking about {rng.choice(words)}.\n</think>\n{text}"
    return text


def _unfinished_reasoning(rng: random.Random, words: list[str]) -> str:
    """Reasoning that never ends — a model that ran out of tokens before answering."""
    return (
        f"<think>\n[simulated] Let me think about {rng.choice(words)} and "
        f"{rng.choice(words)}. First, the {rng.choice(words)}"
    )


# --- JSON values -------------------------------------------------------------------------------


_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    return Draft202012Validator(json.loads(schema_json))


def _conforms(value: Any, schema: Any) -> bool:
    key = json.dumps(schema, separators=(",", ":"))
    return bool(_validator(key).is_valid(value))


class _Generator:
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
            text = _sentence(self.rng, self.words)
            if high is None or len(text) + len(_MARK) <= high:
                text = _MARK + text
        else:
            text = _phrase(self.rng, self.words)
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


def _with_score(value: Any, schema: dict[str, Any], quality: float) -> Any:
    """Set a judge's ``score`` to the output's quality (scaled to the schema's range)."""
    props = _Generator(random.Random(0), [], schema).resolve(schema).get("properties", {})
    if not isinstance(value, dict) or "score" not in props:
        return value
    sub = props["score"] if isinstance(props["score"], dict) else {}
    candidates: list[Any] = [round(quality, 3)]
    if any(k in sub for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        low, high, _, _ = _Generator(random.Random(0), [], schema).bounds(sub)
        scaled = low + quality * (high - low)
        candidates.append(round(scaled) if sub.get("type") == "integer" else round(scaled, 3))
    for score in candidates:
        scored = {**value, "score": score}
        if _conforms(scored, schema):
            return scored
    return value


# --- rendering ---------------------------------------------------------------------------------


def _render(value: Any, dress: float, rng: random.Random, words: list[str]) -> str:
    indent = 2 if isinstance(value, dict | list) and rng.random() < 0.5 else None
    body = json.dumps(value, ensure_ascii=False, indent=indent)
    if dress < DRESSED_SHARE / 2:
        return f"```json\n{body}\n```"
    if dress < DRESSED_SHARE:
        return (
            f"<think>\n[simulated] The answer should cover {rng.choice(words)} and "
            f"{rng.choice(words)}.\n</think>\n{body}"
        )
    return body


_INVALID_KINDS = ("missing", "wrong_type", "out_of_enum", "truncated")
_INVALID_WEIGHTS = (0.35, 0.35, 0.2, 0.1)
_MAX_DEFECTS = 16
_APOLOGY = "Sorry, I could not produce the requested JSON. [simulated]"


def _invalid_text(
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
        yield _render(broken, dress, rng, words)


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
