"""The one Jinja environment Armature uses: sandboxed, strict about undefined names.

Templates are rendered per stage at run time with the run's data as variables, never spliced
into the YAML text, so input data cannot change a spec's structure. The same environment parses
templates at validation time, so a syntax error is reported with its line before any run.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import ChainableUndefined, Template, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import missing

from armature_temporal.errors import ArmatureError

__all__ = [
    "TemplateRuntimeError",
    "environment",
    "evaluate",
    "referenced_names",
    "render",
    "split_template_command",
    "truth",
]


class RunInputs(dict[str, Any]):
    """The ``inputs`` variable: a missing run input is an error, even read as a field
    (``{{ inputs.questoin }}``), unlike a missing field of a stage's output."""


def _strict_inputs(variables: dict[str, Any]) -> dict[str, Any]:
    inputs = variables.get("inputs")
    if isinstance(inputs, dict) and not isinstance(inputs, RunInputs):
        return {**variables, "inputs": RunInputs(inputs)}
    return variables


class FieldUndefined(ChainableUndefined):
    """Undefined *names* raise (a misspelt variable fails loudly, as StrictUndefined does); a
    missing *field* of a value that exists (``{{ classify.intent }}`` when the output has no
    ``intent``) is empty and false, as armature-agents 0.7.0 rendered it. ``validate`` reports
    reads of fields an output schema does not declare."""

    __slots__ = ()

    def _name_missing(self) -> None:
        if isinstance(self._undefined_obj, RunInputs):
            given = sorted(self._undefined_obj)
            raise self._undefined_exception(
                f"run input {self._undefined_name!r} was not given (given: {given}); pass "
                f"--input {self._undefined_name}=... or give it a default"
            )
        if self._undefined_obj is missing:
            self._fail_with_undefined_error()

    def __str__(self) -> str:
        self._name_missing()
        return ""

    def __iter__(self) -> Iterator[Any]:
        self._name_missing()
        return iter(())

    def __bool__(self) -> bool:
        self._name_missing()
        return False

    def __len__(self) -> int:
        self._name_missing()
        return 0

    def __eq__(self, other: object) -> bool:
        self._name_missing()
        return type(self) is type(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return id(type(self))


#: The oldest Jinja2 whose sandbox has no published escape. The sandbox is a security boundary
#: (templates come from specs, proposals and learnt heuristics): 3.1.6 fixed CVE-2025-27516
#: (the ``|attr`` filter reached ``str.format`` past the sandbox), 3.1.5 CVE-2024-56326.
MIN_JINJA2 = (3, 1, 6)


def _check_jinja2(version: str) -> None:
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    if parts < MIN_JINJA2:
        need = ".".join(map(str, MIN_JINJA2))
        raise ArmatureError(
            f"jinja2 {version} is installed, but Armature needs jinja2>={need}: older versions "
            "have sandbox escapes (CVE-2025-27516: the |attr filter), and spec templates run "
            f"in that sandbox. Upgrade it: pip install 'jinja2>={need}'"
        )


class TemplateRuntimeError(jinja2.TemplateError):
    """A template raised while it was evaluated (``{{ inputs.n / 0 }}``, a filter given the
    wrong type): a template error like an undefined name, whatever Python raised inside it."""


class _DataFirstEnvironment(ImmutableSandboxedEnvironment):
    """``{{ plan.items }}`` reads the data: on a mapping, a key wins over a method of the same
    name (``items``, ``keys``, ``values``, ``get`` are common field names in schemas), where
    Jinja would prefer the attribute and hand the prompt ``<built-in method items ...>``. A
    mapping without that key still has its methods (``inputs.items()``)."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                pass
        return super().getattr(obj, attribute)


def _finalize(value: Any) -> Any:
    """What ``{{ ... }}`` prints: booleans, null and containers as JSON (``false``, ``null``,
    ``{"ok": true}``) — what a model reads as data — rather than Python's ``False``/``None``."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value


@lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    """The shared sandboxed environment (no file loader; undefined names raise, missing fields
    of existing values are empty — see :class:`FieldUndefined`; a mapping's keys before its
    methods; booleans, null and containers print as JSON).

    Raises:
        ArmatureError: The installed jinja2 is older than :data:`MIN_JINJA2`.
    """
    _check_jinja2(getattr(jinja2, "__version__", None) or importlib.metadata.version("jinja2"))
    env = _DataFirstEnvironment(undefined=FieldUndefined, autoescape=False, finalize=_finalize)
    env.filters["tojson_compact"] = _tojson_compact
    return env


def _tojson_compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


@lru_cache(maxsize=1024)
def _template(source: str) -> Template:
    return environment().from_string(source)


@lru_cache(maxsize=1024)
def _expression(source: str) -> Any:
    return environment().compile_expression(source, undefined_to_none=False)


def render(source: str, variables: dict[str, Any]) -> str:
    """Render a template with ``variables``.

    Compiled templates are cached (compiling costs ~60× rendering).

    Raises:
        jinja2.TemplateError: an undefined name, bad syntax, or (as
            :class:`TemplateRuntimeError`) anything the template's own code raised.
    """
    template = _template(source)
    try:
        return template.render(_strict_inputs(variables))
    except jinja2.TemplateError:
        raise
    except Exception as exc:  # the template's code raised: 1/0, a filter on the wrong type
        raise _runtime_error(exc) from exc


def evaluate(expression: str, variables: dict[str, Any]) -> Any:
    """Evaluate a Jinja expression (``until``, ``condition``, ``skip_if``); raises as
    :func:`render` does."""
    compiled = _expression(expression)
    try:
        return compiled(**_strict_inputs(variables))
    except jinja2.TemplateError:
        raise
    except Exception as exc:
        raise _runtime_error(exc) from exc


def _runtime_error(exc: Exception) -> TemplateRuntimeError:
    return TemplateRuntimeError(f"{type(exc).__name__}: {exc}")


_TEMPLATE_SPAN = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
_HIDDEN = re.compile(r"\x00(\d+)\x00")


def split_template_command(cmd: str) -> list[str]:
    """A command line with Jinja parts split into argv words as a POSIX shell would, each
    ``{{ ... }}`` kept whole inside its word (``--source {{ url }}`` is two words, however many
    spaces the expression has). Shell operators outside quotes are refused: nothing would
    interpret them without a shell.

    Raises:
        ValueError: unclosed quotes, an empty command, or a shell operator.
    """
    from armature_temporal.tools import split_command

    spans: list[str] = []

    def hide(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"\x00{len(spans) - 1}\x00"

    words = split_command(_TEMPLATE_SPAN.sub(hide, cmd))
    return [_HIDDEN.sub(lambda m: spans[int(m.group(1))], word) for word in words]


def absent_as_empty(expression: str, variables: dict[str, Any]) -> dict[str, Any]:
    """``variables`` plus an empty value for each name ``expression`` reads that they lack:
    what a ``condition``/``skip_if`` naming a stage the spec does not have sees (its fields
    are then empty and false), as armature-agents 0.7.0 rendered it."""
    names = referenced_names(expression, expression=True)
    return {**variables, **{name: {} for name in names if name not in variables}}


def truth(value: Any) -> bool:
    """A condition's value as a decision. Text is true only when it says so ("true", "yes",
    "1", any case) — a model's "false" or "no" is false, as armature-agents 0.7.0 read it."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def referenced_names(source: str, *, expression: bool = False) -> dict[str, set[str]]:
    """Free variable names of a template or expression, each with the attributes read on it.

    ``{{ triage.urgency }}`` gives ``{"triage": {"urgency"}}``. Raises
    ``jinja2.TemplateSyntaxError`` on bad syntax. Parses are cached.
    """
    return {name: set(attrs) for name, attrs in _referenced(source, expression)}


def quoted_fields(source: str) -> dict[str, frozenset[str] | None]:
    """What a template quotes of each free name: the fields it reads (``{{ a.intent }}``
    gives ``{"a": {"intent"}}``), or None when it uses the value whole (``{{ a }}``,
    ``{{ a | tojson }}``, a loop over it). Raises ``jinja2.TemplateSyntaxError``."""
    return dict(_quoted(source))


@lru_cache(maxsize=2048)
def _quoted(source: str) -> tuple[tuple[str, frozenset[str] | None], ...]:
    from jinja2 import meta

    ast = environment().parse(source)
    free = meta.find_undeclared_variables(ast)
    fields: dict[str, set[str]] = {name: set() for name in free}
    by_field: set[int] = set()  # Name nodes read through .field or ["field"]
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        inner = node.node  # type: ignore[attr-defined]
        if not (isinstance(inner, nodes.Name) and inner.name in fields):
            continue
        if isinstance(node, nodes.Getattr):
            fields[inner.name].add(node.attr)
        elif isinstance(node, nodes.Getitem) and (
            isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str)
        ):
            fields[inner.name].add(node.arg.value)
        else:
            continue  # a[some_expression]: any field may be read
        by_field.add(id(inner))
    whole = {
        n.name
        for n in ast.find_all(nodes.Name)
        if n.ctx == "load" and n.name in fields and id(n) not in by_field
    }
    return tuple(
        (name, None if name in whole else frozenset(attrs))
        for name, attrs in sorted(fields.items())
    )


@lru_cache(maxsize=2048)
def _referenced(source: str, expression: bool) -> tuple[tuple[str, frozenset[str]], ...]:
    names = _parse_names(source, expression=expression)
    return tuple((name, frozenset(attrs)) for name, attrs in sorted(names.items()))


def _parse_names(source: str, *, expression: bool = False) -> dict[str, set[str]]:
    """Free variable names of a template or expression, each with the attributes read on it.

    ``{{ triage.urgency }}`` gives ``{"triage": {"urgency"}}``. Raises
    ``jinja2.TemplateSyntaxError`` on bad syntax.
    """
    from jinja2 import meta

    env = environment()
    if expression:
        env.compile_expression(source)  # raises on trailing garbage that parse() accepts
    ast = env.parse("{{ (" + source + ") }}" if expression else source)
    free = meta.find_undeclared_variables(ast)
    names: dict[str, set[str]] = {name: set() for name in free}
    for node in ast.find_all(nodes.Getattr):
        if isinstance(node.node, nodes.Name) and node.node.name in names:
            names[node.node.name].add(node.attr)
    for item in ast.find_all(nodes.Getitem):
        if (
            isinstance(item.node, nodes.Name)
            and item.node.name in names
            and isinstance(item.arg, nodes.Const)
            and isinstance(item.arg.value, str)
        ):
            names[item.node.name].add(item.arg.value)
    return names
