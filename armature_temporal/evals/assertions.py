"""Assertion types (promptfoo's names) and their graders.

Every grader reads the case's *subject*: the output of the stage the assertion names (else the
case's ``stage``, else the run's answer: see :func:`armature_temporal.evals.runner.answer_stage`)
as text — a string as it is, a text stage's ``{content}`` as its content, anything else as
JSON. It returns a :class:`Verdict`: ``pass`` or ``fail`` with a score in [0, 1] and a reason,
or ``error`` when the grader itself could not decide (an exception in a python assertion, a
judge that did not answer, the embedding model missing). ``not-<type>`` inverts a pass or a
fail; an error stays an error.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from armature_temporal.errors import did_you_mean

__all__ = [
    "ASSERTION_TYPES",
    "GradeContext",
    "Verdict",
    "check_assertion",
    "grade",
    "subject_text",
]

#: Every type, and what its ``value`` is. Each also takes the ``not-`` prefix.
ASSERTION_TYPES: dict[str, str] = {
    "equals": "the whole output equals value (a mapping or list: as parsed JSON)",
    "contains": "value is a substring of the output",
    "icontains": "value is a substring, ignoring case",
    "contains-any": "one of the listed values is a substring",
    "contains-all": "every listed value is a substring",
    "icontains-any": "contains-any, ignoring case",
    "icontains-all": "contains-all, ignoring case",
    "starts-with": "the output starts with value",
    "regex": "the output matches the regular expression value (re.search)",
    "is-json": "the output is JSON; with a value, JSON matching that JSON Schema",
    "contains-json": "some JSON object or array inside the output (matching value's schema)",
    "json-schema": "Armature: the output is JSON matching the JSON Schema value",
    "similar": "embedding cosine similarity to value ≥ threshold (default 0.75)",
    "llm-rubric": "a judge tier scores the output against the rubric value ≥ threshold (0.5)",
    "python": "value module:function or file://path.py:function, called (output, context)",
}
#: Types a threshold means something for.
_THRESHOLD = {"similar", "llm-rubric", "python"}
_NEEDS_VALUE = set(ASSERTION_TYPES) - {"is-json", "contains-json"}
_UNSUPPORTED = {
    "javascript": "Armature runs no JavaScript; write the check in Python as "
    "`type: python, value: module:function` (or file://path.py:function)",
}
DEFAULT_SIMILAR = 0.75
DEFAULT_RUBRIC = 0.5


class Verdict(BaseModel):
    """One assertion's result on one run."""

    model_config = ConfigDict(frozen=True)

    type: str
    status: Literal["pass", "fail", "error"]
    score: float | None = None
    reason: str = ""
    stage: str | None = None


@dataclass
class GradeContext:
    """What a grader may read: the subject (``output`` as the stage gave it and ``text`` as
    assertions see it), the stage it came from, every stage's output, the case's vars, the run
    and where the cases file is (``file://`` paths are relative to it)."""

    text: str
    output: Any
    stage: str | None
    outputs: dict[str, Any]
    vars: dict[str, Any]
    run_id: str
    base_dir: Path
    description: str = ""
    #: ``llm-rubric``: (rubric, text, stage, tier, index) -> (score, reason); raises on failure.
    judge: (
        Callable[[str, str, str | None, str | None, int], Awaitable[tuple[float, str]]] | None
    ) = None
    index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class GraderError(Exception):
    """A grader could not decide; the message says why and what to do."""


def subject_text(output: Any) -> str:
    """An output as assertions read it: a string as it is, a text stage's ``{content}`` as the
    content, anything else as JSON (keys in the stage's order)."""
    if isinstance(output, str):
        return output
    if (
        isinstance(output, dict)
        and set(output) == {"content"}
        and isinstance(output["content"], str)
    ):
        return output["content"]
    return json.dumps(output, ensure_ascii=False, default=str)


def _base(kind: str) -> tuple[str, bool]:
    return (kind[4:], True) if kind.startswith("not-") else (kind, False)


def check_assertion(kind: str, value: Any, threshold: float | None) -> str | None:
    """What is wrong with an assertion before anything runs (None: nothing): an unknown or
    unsupported type (listing the supported ones), a missing or malformed value, a threshold
    that the type does not read."""
    base, _ = _base(kind)
    supported = sorted(ASSERTION_TYPES)
    if base in _UNSUPPORTED:
        return (
            f"not supported: {_UNSUPPORTED[base]}. Supported types: {supported} (each also "
            "as not-<type>)"
        )
    if base not in ASSERTION_TYPES:
        return (
            f"unknown assertion type{did_you_mean(base, supported)}; supported types: "
            f"{supported} (each also as not-<type>)"
        )
    if base in _NEEDS_VALUE and value is None:
        return f"needs a `value:` ({ASSERTION_TYPES[base]})"
    if threshold is not None and base not in _THRESHOLD:
        return f"takes no threshold (only {sorted(_THRESHOLD)} do); remove `threshold:`"
    if base in ("contains-any", "contains-all", "icontains-any", "icontains-all") and (
        not isinstance(value, list) or not value
    ):
        return f"value must be a non-empty list of strings, got {value!r:.60}"
    if base in ("contains", "icontains", "starts-with", "llm-rubric") and not isinstance(
        value, str
    ):
        return f"value must be text, got {value!r:.60}"
    if base == "regex":
        try:
            re.compile(str(value))
        except re.error as exc:
            return f"value {value!r} is not a regular expression ({exc}); fix the pattern"
    if base in ("is-json", "contains-json", "json-schema") and value is not None:
        return _schema_problem(value)
    if base == "similar" and not (
        isinstance(value, str)
        or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    ):
        return f"value must be text or a list of texts, got {value!r:.60}"
    if base == "python":
        return _python_problem(value)
    return None


def _schema_problem(value: Any) -> str | None:
    import jsonschema

    if not isinstance(value, dict):
        return f"value must be a JSON Schema mapping, got {value!r:.60}"
    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        return f"value is not a valid JSON Schema ({exc.message}); fix the schema"
    return None


def _python_problem(value: Any) -> str | None:
    text = str(value)
    target = text.removeprefix("file://")
    module, sep, function = target.rpartition(":")
    if not isinstance(value, str) or not sep or not module or not function.isidentifier():
        return (
            f"value {value!r} must name a function as module:function or "
            "file://path.py:function (inline Python code is not run)"
        )
    return None


async def grade(kind: str, value: Any, threshold: float | None, ctx: GradeContext) -> Verdict:
    """Grade one assertion on ``ctx``'s subject; ``not-`` inverts pass and fail."""
    import asyncio

    base, negate = _base(kind)
    try:
        if base == "llm-rubric":
            passed, score, reason = await _rubric(value, threshold, ctx)
        elif base in ("similar", "python"):
            passed, score, reason = await asyncio.to_thread(_GRADERS[base], value, threshold, ctx)
        else:
            passed, score, reason = _GRADERS[base](value, threshold, ctx)
    except GraderError as exc:
        return Verdict(type=kind, status="error", reason=str(exc), stage=ctx.stage)
    if negate:
        passed, score = not passed, None if score is None else round(1.0 - score, 4)
        reason = f"not: {reason}"
    return Verdict(
        type=kind, status="pass" if passed else "fail", score=score, reason=reason, stage=ctx.stage
    )


_Result = tuple[bool, float | None, str]


def _cut(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 1] + "…")


def _equals(value: Any, _t: float | None, ctx: GradeContext) -> _Result:
    if isinstance(value, dict | list):
        try:
            same = json.loads(ctx.text) == value
        except ValueError:
            same = False
    else:
        same = ctx.text == str(value)
    return (
        same,
        1.0 if same else 0.0,
        f"output {_cut(ctx.text)} {'=' if same else '≠'} {value!r:.60}",
    )


def _contains(case: bool, mode: str) -> Callable[[Any, float | None, GradeContext], _Result]:
    def check(value: Any, _t: float | None, ctx: GradeContext) -> _Result:
        wanted = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        hay = ctx.text if case else ctx.text.lower()
        found = [w for w in wanted if (w if case else w.lower()) in hay]
        ok = bool(found) if mode == "any" else len(found) == len(wanted)
        missing = [w for w in wanted if w not in found]
        said = f"found {found!r}" if ok else f"missing {missing!r}"
        return ok, 1.0 if ok else 0.0, f"{said} in {_cut(ctx.text)}"

    return check


def _starts(value: Any, _t: float | None, ctx: GradeContext) -> _Result:
    ok = ctx.text.startswith(str(value))
    return (
        ok,
        1.0 if ok else 0.0,
        f"output {_cut(ctx.text)} {'starts' if ok else 'does not start'} with {value!r}",
    )


def _regex(value: Any, _t: float | None, ctx: GradeContext) -> _Result:
    match = re.search(str(value), ctx.text)
    said = f"matched {match.group(0)!r:.60}" if match else f"no match for /{value}/"
    return match is not None, 1.0 if match else 0.0, f"{said} in {_cut(ctx.text)}"


def _parsed(ctx: GradeContext) -> Any:
    if not isinstance(ctx.output, str) and subject_text(ctx.output) == ctx.text:
        return ctx.output  # structured output: already JSON
    return json.loads(ctx.text)


def _schema_verdict(doc: Any, schema: Any, what: str) -> _Result:
    if schema is None:
        return True, 1.0, f"{what} is JSON"
    import jsonschema

    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path)
    )
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.path) or "(root)"
        return False, 0.0, f"{what} does not match the schema at {where}: {first.message}"
    return True, 1.0, f"{what} matches the schema"


def _is_json(value: Any, _t: float | None, ctx: GradeContext) -> _Result:
    try:
        doc = _parsed(ctx)
    except ValueError as exc:
        return False, 0.0, f"output is not JSON ({exc}): {_cut(ctx.text)}"
    return _schema_verdict(doc, value, "output")


def _contains_json(value: Any, _t: float | None, ctx: GradeContext) -> _Result:
    decoder = json.JSONDecoder()
    last = "no JSON object or array in the output"
    for i, ch in enumerate(ctx.text):
        if ch not in "{[":
            continue
        try:
            doc, _ = decoder.raw_decode(ctx.text, i)
        except ValueError:
            continue
        verdict = _schema_verdict(doc, value, "JSON inside the output")
        if verdict[0]:
            return verdict
        last = verdict[2]
    return False, 0.0, f"{last}: {_cut(ctx.text)}"


def _similar(value: Any, threshold: float | None, ctx: GradeContext) -> _Result:
    from armature_temporal.experience.embeddings import EmbeddingError, LocalEmbedder, cosine

    bound = DEFAULT_SIMILAR if threshold is None else threshold
    wanted = value if isinstance(value, list) else [value]
    try:
        vectors = LocalEmbedder().embed([ctx.text, *wanted])
    except EmbeddingError as exc:
        raise GraderError(f"similar needs the local embedding model: {exc}") from None
    best = max(cosine(vectors[0], v) for v in vectors[1:])
    ok = best >= bound
    return ok, round(best, 4), f"similarity {best:.3f} {'≥' if ok else '<'} {bound:g}"


def _load_function(value: str, base_dir: Path) -> Callable[..., Any]:
    target = value.removeprefix("file://")
    module_name, _, function = target.rpartition(":")
    try:
        if value.startswith("file://") or module_name.endswith(".py"):
            path = Path(module_name)
            path = path if path.is_absolute() else base_dir / path
            if not path.is_file():
                raise GraderError(
                    f"python file {str(path)!r} does not exist; check the path (relative "
                    "to the cases file)"
                )
            spec = importlib.util.spec_from_file_location(f"_armature_eval_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if str(base_dir) not in sys.path:
                sys.path.insert(0, str(base_dir))
            module = importlib.import_module(module_name)
    except GraderError:
        raise
    except Exception as exc:  # the user's module: any error it raises on import
        raise GraderError(
            f"python {value!r}: importing it raised {type(exc).__name__}: {exc}"
        ) from None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise GraderError(f"python {value!r}: the module has no function {function!r}")
    return fn  # type: ignore[no-any-return]


def _python(value: Any, threshold: float | None, ctx: GradeContext) -> _Result:
    fn = _load_function(str(value), ctx.base_dir)
    context = {
        "vars": ctx.vars,
        "output": ctx.output,
        "outputs": ctx.outputs,
        "stage": ctx.stage,
        "run_id": ctx.run_id,
        "description": ctx.description,
    }
    try:
        answer = fn(ctx.text, context)
    except Exception as exc:  # the user's grader: any exception is a grader error
        raise GraderError(f"python {value!r} raised {type(exc).__name__}: {exc}") from None
    reason = f"python {value}"
    if isinstance(answer, dict):
        if "pass" not in answer and "score" not in answer:
            raise GraderError(
                f"python {value!r} returned a dict without `pass` or `score`: {answer!r:.80}"
            )
        reason = str(answer.get("reason") or reason)
        raw = answer.get("score")
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int | float)):
            raise GraderError(f"python {value!r} returned score {raw!r}; a score is a number")
        score = None if raw is None else float(raw)
        passed = answer.get("pass")
        if passed is None and score is not None:
            passed = score >= (threshold if threshold is not None else 0.5)
        return bool(passed), score, reason
    if isinstance(answer, bool):
        return answer, 1.0 if answer else 0.0, f"{reason} returned {answer}"
    if isinstance(answer, int | float):
        ok = answer >= threshold if threshold is not None else answer > 0
        return ok, float(answer), f"{reason} returned {answer:g}"
    raise GraderError(
        f"python {value!r} returned {type(answer).__name__} {answer!r:.60}; return a bool, "
        "a number, or {pass, score, reason}"
    )


async def _rubric(value: Any, threshold: float | None, ctx: GradeContext) -> _Result:
    if ctx.judge is None:
        raise GraderError("llm-rubric has no judge here")
    score, why = await ctx.judge(
        str(value), ctx.text, ctx.stage, ctx.extra.get("provider"), ctx.index
    )
    bound = DEFAULT_RUBRIC if threshold is None else threshold
    ok = score >= bound
    return ok, round(score, 4), f"judge score {score:.3f} {'≥' if ok else '<'} {bound:g}: {why}"


_GRADERS: dict[str, Callable[[Any, float | None, GradeContext], _Result]] = {
    "equals": _equals,
    "contains": _contains(True, "all"),
    "icontains": _contains(False, "all"),
    "contains-any": _contains(True, "any"),
    "contains-all": _contains(True, "all"),
    "icontains-any": _contains(False, "any"),
    "icontains-all": _contains(False, "all"),
    "starts-with": _starts,
    "regex": _regex,
    "is-json": _is_json,
    "contains-json": _contains_json,
    "json-schema": _is_json,
    "similar": _similar,
    "python": _python,
}
