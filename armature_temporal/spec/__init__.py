"""The spec language: YAML in, a frozen Plan out.

``models`` (the pydantic spec), ``loader`` (line-aware YAML loading), ``checks`` (whole-document
checks: cycles, templates, tools, cron), ``compiler`` (Spec -> Plan), ``templating`` (the Jinja
sandbox specs are written in), ``durations``, ``starter`` (``armature new``) and ``docgen``
(the README's spec reference).
"""

from armature_temporal.spec.compiler import Plan, PlanStage, compile_spec, load_plan
from armature_temporal.spec.loader import LoadedSpec, load_spec, load_spec_text
from armature_temporal.spec.models import Spec

__all__ = [
    "LoadedSpec",
    "Plan",
    "PlanStage",
    "Spec",
    "compile_spec",
    "load_plan",
    "load_spec",
    "load_spec_text",
]
