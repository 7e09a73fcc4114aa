"""Armature: durable LLM agent workflows on Temporal that get better the more they run.

The library call (``await run("spec.yaml", inputs)``, ``start`` -> :class:`RunHandle`, and
its ``InputError``), the bandit functions and the hook API are re-exported lazily, so
``import armature_temporal`` stays light. The layers live in subpackages: ``spec`` (the spec
language), ``runtime`` (what the interpreter and the activities share), ``service`` (the
Temporal side), and ``bandit``, ``store``, ``tools``, ``scanner``, ``improve``, ``finetune``,
``views``.
"""

from typing import TYPE_CHECKING, Any

from armature_temporal.errors import ArmatureError, SpecError, SpecIssue

if TYPE_CHECKING:
    from armature_temporal.spec.compiler import Plan, compile_spec, load_plan
    from armature_temporal.spec.loader import LoadedSpec, load_spec, load_spec_text
    from armature_temporal.spec.models import Spec

__version__ = "0.1.0"

__all__ = [
    "ArmatureError",
    "HookContext",
    "HookResult",
    "InputError",
    "LoadedSpec",
    "Plan",
    "RunFailed",
    "RunHandle",
    "Spec",
    "SpecError",
    "SpecIssue",
    "__version__",
    "compile_spec",
    "configure_runtime",
    "load_plan",
    "load_spec",
    "load_spec_text",
    "register_hook",
    "run",
    "runtime_arms",
    "runtime_select",
    "runtime_update",
    "start",
]

_BANDIT = ("configure_runtime", "runtime_arms", "runtime_select", "runtime_update")
_HOOKS = ("HookContext", "HookResult", "register_hook")
_LIBRARY = ("RunFailed", "RunHandle", "run", "start")


#: The spec language's API, loaded on first use: the compiler and its checks cost a quarter
#: of a second to import, which `armature --help` and commands that never read a spec skip.
_SPEC = {
    "Plan": "compiler",
    "compile_spec": "compiler",
    "load_plan": "compiler",
    "LoadedSpec": "loader",
    "load_spec": "loader",
    "load_spec_text": "loader",
    "Spec": "models",
}


def __getattr__(name: str) -> Any:
    if name in _SPEC:
        import importlib

        value = getattr(importlib.import_module(f"armature_temporal.spec.{_SPEC[name]}"), name)
        globals()[name] = value
        return value
    if name in _BANDIT:
        from armature_temporal import bandit

        return getattr(bandit, name)
    if name in _HOOKS:
        from armature_temporal.runtime import hooks

        return getattr(hooks, name)
    if name == "InputError":
        from armature_temporal.service.inputs import InputError

        return InputError
    if name in _LIBRARY:
        from armature_temporal import library

        return getattr(library, name)
    raise AttributeError(f"module 'armature_temporal' has no attribute {name!r}")
