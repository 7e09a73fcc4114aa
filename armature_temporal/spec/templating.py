"""The one Jinja environment Armature uses: sandboxed, strict about undefined names.

Templates are rendered per stage at run time with the run's data as variables, never spliced
into the YAML text, so input data cannot change a spec's structure. The same environment parses
templates at validation time, so a syntax error is reported with its line before any run.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["environment", "evaluate", "referenced_names", "render"]


@lru_cache(maxsize=1)
def environment() -> ImmutableSandboxedEnvironment:
    """The shared sandboxed environment (no file loader; undefined names raise)."""
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    env.filters["tojson_compact"] = _tojson_compact
    return env


def _tojson_compact(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


@lru_cache(maxsize=1024)
def _template(source: str) -> Template:
    return environment().from_string(source)


@lru_cache(maxsize=1024)
def _expression(source: str) -> Any:
    return environment().compile_expression(source, undefined_to_none=False)


def render(source: str, variables: dict[str, Any]) -> str:
    """Render a template with ``variables``; raises jinja2 errors on undefined names.

    Compiled templates are cached (compiling costs ~60× rendering)."""
    return _template(source).render(variables)


def evaluate(expression: str, variables: dict[str, Any]) -> Any:
    """Evaluate a Jinja expression (``until``, ``condition``, ``skip_if``)."""
    return _expression(expression)(**variables)


def referenced_names(source: str, *, expression: bool = False) -> dict[str, set[str]]:
    """Free variable names of a template or expression, each with the attributes read on it.

    ``{{ triage.urgency }}`` gives ``{"triage": {"urgency"}}``. Raises
    ``jinja2.TemplateSyntaxError`` on bad syntax. Parses are cached.
    """
    return {name: set(attrs) for name, attrs in _referenced(source, expression)}


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
