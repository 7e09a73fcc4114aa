"""Armature: durable LLM agent workflows on Temporal that get better the more they run.

The bandit functions are re-exported lazily, so ``import armature_temporal`` stays light.
"""

from typing import Any

from armature_temporal.errors import ArmatureError, SpecError, SpecIssue
from armature_temporal.spec.compiler import Plan, compile_spec, load_plan
from armature_temporal.spec.loader import LoadedSpec, load_spec, load_spec_text
from armature_temporal.spec.models import Spec

__version__ = "0.1.0"

__all__ = [
    "ArmatureError",
    "LoadedSpec",
    "Plan",
    "Spec",
    "SpecError",
    "SpecIssue",
    "__version__",
    "compile_spec",
    "configure_runtime",
    "load_plan",
    "load_spec",
    "load_spec_text",
    "runtime_arms",
    "runtime_select",
    "runtime_update",
]

_BANDIT = ("configure_runtime", "runtime_arms", "runtime_select", "runtime_update")


def __getattr__(name: str) -> Any:
    if name in _BANDIT:
        from armature_temporal import bandit

        return getattr(bandit, name)
    raise AttributeError(f"module 'armature_temporal' has no attribute {name!r}")
