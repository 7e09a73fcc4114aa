"""A cases file: the test cases ``armature eval`` runs, in promptfoo's shape where it fits.

::

    description: Quickstart paragraphs        # optional
    repeat: 3                                 # optional: each case 3 times (--repeat wins)
    defaultTest:                              # merged into every test, as promptfoo does
      assert:
        - {type: not-icontains, value: "as an AI"}
    tests:
      - description: tide pools
        vars: {topic: tide pools}             # the run inputs
        assert:
          - {type: icontains, value: tide}
          - {type: llm-rubric, value: "Accurate and clear", threshold: 0.7}
          - {type: is-json, stage: outline}   # Armature: assert on another stage's output

A test's ``vars`` are the run inputs (checked against the spec's inputs before anything runs);
``defaultTest``'s ``vars``, ``options`` and ``metadata`` are defaults a test's own override,
its ``assert`` list comes before the test's. ``stage:`` (on a test, an assertion, or in
``options``) names the stage asserted on. Everything is checked when the file is read: an
error names the file, the line, the field, the value and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.errors import ArmatureError, did_you_mean
from armature_temporal.evals.assertions import check_assertion

__all__ = ["Assertion", "Case", "CasesError", "CasesFile", "load_cases"]

#: A cases file larger than this is refused (a few thousand cases fit in far less).
MAX_CASES_BYTES = 8 * 1024 * 1024

_TOP = ("description", "tests", "defaultTest", "repeat")
_TEST = ("description", "vars", "assert", "stage", "options", "metadata")
_ASSERT = ("type", "value", "threshold", "stage", "provider")
#: promptfoo keys that have no meaning here, and what to do instead.
_PROMPTFOO_ONLY = {
    "prompts": "Armature's prompts are the spec's stages; remove `prompts:`",
    "providers": "the spec's model_tiers choose the models; remove `providers:`",
    "scenarios": "write each scenario's vars as tests of their own",
    "evaluateOptions": "use `armature eval --concurrency N` and `--repeat N`",
    "outputPath": "use `armature eval --json` or `--junit FILE`",
}


class CasesError(ArmatureError):
    """A cases file that cannot be used: the message names the file, where, and the fix."""


class Assertion(BaseModel):
    """One expectation on a case's output (promptfoo's ``assert`` item)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    value: Any = None
    threshold: float | None = None
    #: Armature: the stage whose output this assertion reads (else the case's, else the default).
    stage: str | None = None
    #: ``llm-rubric``: the spec's tier that grades (default: ``frontier``, else the largest).
    provider: str | None = None


class Case(BaseModel):
    """One test, ``defaultTest`` merged in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    description: str
    vars: dict[str, Any] = Field(default_factory=dict)
    asserts: list[Assertion] = Field(default_factory=list)
    stage: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: Where the test is in its file, for messages (``cases.yaml:12``).
    where: str = ""


class CasesFile(BaseModel):
    """A whole cases file, loaded and checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    description: str | None = None
    repeat: int | None = Field(None, ge=1)
    cases: list[Case]


def _line(node: Any, key: Any = None) -> int | None:
    """The 1-based line of ``node`` (or of its item ``key``) in a ruamel round-trip tree."""
    lc = getattr(node, "lc", None)
    if lc is None:
        return None
    try:
        if key is not None:
            pos = lc.key(key) if isinstance(key, str) else lc.item(key)
            return int(pos[0]) + 1
        return int(lc.line) + 1
    except (KeyError, IndexError, TypeError):
        return None


class _Reader:
    """Reads one file's tree, raising :class:`CasesError` with ``file:line: field: ...``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, line: int | None, field: str, message: str) -> CasesError:
        where = f"{self.path}:{line}" if line else str(self.path)
        return CasesError(f"{where}: {field}: {message}")

    def mapping(
        self, node: Any, field: str, keys: tuple[str, ...], line: int | None
    ) -> dict[str, Any]:
        if not isinstance(node, dict):
            raise self.fail(
                line, field, f"expected a mapping, got {type(node).__name__} {node!r:.60}"
            )
        for key in node:
            if key not in keys:
                hint = _PROMPTFOO_ONLY.get(str(key)) if field == "file" else None
                fix = hint or f"known keys: {list(keys)}{did_you_mean(key, keys)}"
                raise self.fail(_line(node, key), f"{field}.{key}", f"unknown key; {fix}")
        return dict(node)


def load_cases(path: Path) -> CasesFile:
    """Read and check the cases file at ``path`` (assertion types and values included; the
    spec-dependent checks are :func:`armature_temporal.evals.runner.check_cases`).

    Raises:
        CasesError: unreadable, not YAML, no ``tests:``, or a field that is wrong.
    """
    from ruamel.yaml.error import YAMLError

    from armature_temporal.spec.yaml_limits import bounded_yaml

    reader = _Reader(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CasesError(f"{path}: cannot read the cases file ({exc}); check the path") from None
    try:
        tree = bounded_yaml("rt", MAX_CASES_BYTES).load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise reader.fail(
            line, "file", f"not valid YAML ({problem}); a cases file is YAML with a `tests:` list"
        ) from None
    if not isinstance(tree, dict) or "tests" not in tree:
        raise reader.fail(
            None,
            "tests",
            "the file has no `tests:` list; write `tests:` with one item per case, each with "
            "`vars:` (the run inputs) and `assert:` (see `armature eval --help`)",
        )
    top = reader.mapping(tree, "file", _TOP, 1)
    tests = top["tests"]
    if not isinstance(tests, list) or not tests:
        raise reader.fail(
            _line(tree, "tests"), "tests", f"expected a non-empty list of cases, got {tests!r:.60}"
        )
    default = top.get("defaultTest") or {}
    default = reader.mapping(default, "defaultTest", _TEST, _line(tree, "defaultTest"))
    repeat = top.get("repeat")
    if repeat is not None and (
        not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1
    ):
        raise reader.fail(
            _line(tree, "repeat"), "repeat", f"{repeat!r} is not a whole number ≥ 1; write e.g. 3"
        )
    default_asserts = _asserts(reader, default.get("assert"), "defaultTest.assert", default)
    cases = []
    for i, raw in enumerate(tests):
        line = _line(tests, i)
        test = reader.mapping(raw, f"tests[{i}]", _TEST, line)
        merged_vars = {
            **_dict(reader, default, "vars", "defaultTest"),
            **_dict(reader, test, "vars", f"tests[{i}]"),
        }
        options = {
            **_dict(reader, default, "options", "defaultTest"),
            **_dict(reader, test, "options", f"tests[{i}]"),
        }
        unknown = set(options) - {"stage"}
        if unknown:
            raise reader.fail(
                line,
                f"tests[{i}].options",
                f"unknown option(s) {sorted(unknown)}; the one option Armature reads is `stage`",
            )
        stage = test.get("stage") or options.get("stage") or default.get("stage")
        own = _asserts(reader, test.get("assert"), f"tests[{i}].assert", test)
        asserts = default_asserts + own
        if not asserts:
            raise reader.fail(
                line,
                f"tests[{i}].assert",
                "the case asserts nothing; add `assert:` with at least one {type, value} "
                "(or a defaultTest.assert for every case)",
            )
        description = test.get("description") or _describe(merged_vars, i)
        cases.append(
            Case(
                index=i,
                description=str(description),
                vars=merged_vars,
                asserts=asserts,
                stage=None if stage is None else str(stage),
                metadata={
                    **_dict(reader, default, "metadata", "defaultTest"),
                    **_dict(reader, test, "metadata", f"tests[{i}]"),
                },
                where=f"{path}:{line}" if line else str(path),
            )
        )
    description = top.get("description")
    return CasesFile(
        path=str(path),
        description=None if description is None else str(description),
        repeat=repeat,
        cases=cases,
    )


def _dict(reader: _Reader, node: dict[str, Any], key: str, field: str) -> dict[str, Any]:
    value = node.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise reader.fail(
            _line(node, key), f"{field}.{key}", f"expected a mapping, got {value!r:.60}"
        )
    plain: dict[str, Any] = _plain(value)
    return plain


def _plain(value: Any) -> Any:
    """ruamel's round-trip containers as plain dicts and lists (for pydantic and JSON)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def _asserts(reader: _Reader, raw: Any, field: str, parent: dict[str, Any]) -> list[Assertion]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise reader.fail(
            _line(parent, "assert"), field, f"expected a list of {{type, value}}, got {raw!r:.60}"
        )
    out = []
    for j, item in enumerate(raw):
        line = _line(raw, j)
        node = reader.mapping(item, f"{field}[{j}]", _ASSERT, line)
        if "type" not in node:
            raise reader.fail(line, f"{field}[{j}]", "no `type:`; every assertion names its type")
        threshold = node.get("threshold")
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, int | float)
        ):
            raise reader.fail(
                line, f"{field}[{j}].threshold", f"{threshold!r} is not a number; write e.g. 0.8"
            )
        assertion = Assertion(
            type=str(node["type"]),
            value=_plain(node.get("value")),
            threshold=None if threshold is None else float(threshold),
            stage=None if node.get("stage") is None else str(node["stage"]),
            provider=None if node.get("provider") is None else str(node["provider"]),
        )
        problem = check_assertion(assertion.type, assertion.value, assertion.threshold)
        if problem:
            raise reader.fail(line, f"{field}[{j}].type={assertion.type!r}", problem)
        out.append(assertion)
    return out


def _describe(values: dict[str, Any], index: int) -> str:
    shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
    return f"case {index + 1}" + (f" ({shown[:60]})" if shown else "")
