"""The inputs and outputs of a frontier search's two activities (``improve_reflect``,
``improve_merge``; see activities/improve_search.py and workflows/improve_search.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.improve.cases import FailingCase
from armature_temporal.improve.models import Candidate, Diagnosis, SpecChange
from armature_temporal.spec.compiler import Plan

__all__ = ["Made", "MergeInput", "ReflectInput"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReflectInput(_Model):
    """Ask the refiner for one child of ``parent`` (its changes to the current spec), shown
    the cases the parent failed."""

    spec_text: str  # the current spec
    spec_path: str
    plan: Plan  # the current spec's
    diagnosis: Diagnosis
    parent: list[SpecChange]
    failing: list[FailingCase]
    tried: list[SpecChange] = Field(default_factory=list)  # never propose these again
    refiner_tier: str


class MergeInput(_Model):
    """Two frontier members' changes, merged (improve/frontier.py ``merge``)."""

    spec_text: str
    spec_path: str
    changes: list[SpecChange]


class Made(_Model):
    """A candidate the search made, or why none (``candidate`` None)."""

    candidate: Candidate | None = None
    notes: list[str] = Field(default_factory=list)
