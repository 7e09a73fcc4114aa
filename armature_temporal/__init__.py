"""Armature: durable LLM agent workflows on Temporal that get better the more they run."""

from armature_temporal.compiler import Plan, compile_spec, load_plan
from armature_temporal.errors import ArmatureError, SpecError, SpecIssue
from armature_temporal.loader import LoadedSpec, load_spec, load_spec_text
from armature_temporal.spec import Spec

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
    "load_plan",
    "load_spec",
    "load_spec_text",
]
