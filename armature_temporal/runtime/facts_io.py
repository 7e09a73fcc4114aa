"""What crosses Temporal for the facts that outlive a run (``memory.extract_knowledge``,
``memory.navigation_tools``): reading them for a run's prompts, recording what a stage's output
states, and answering a navigation tool. Plain data, like runtime/models.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["FactsLoaded", "FactsNavigate", "FactsQuery", "FactsRecord", "FactsRecorded"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FactsQuery(_Model):
    """The current facts of ``namespace`` for a run's prompts, at ``now`` (ISO 8601)."""

    namespace: str
    budget_chars: int
    staleness_days: float
    now: str


class FactsLoaded(_Model):
    """The prompt block (``text``), 0.7.0's ``_knowledge`` items, and what the trace keeps."""

    text: str = ""
    items: list[dict[str, Any]] = Field(default_factory=list)
    trace: dict[str, Any] = Field(default_factory=dict)


class FactsRecord(_Model):
    """The facts one completed stage's ``output`` states, to reconcile and keep."""

    namespace: str
    run_id: str
    stage: str
    output: Any = None
    recorded_at: str
    reconcile: bool = True


class FactsRecorded(_Model):
    """What became of them: counts per decision, the ids kept or changed, the rejected ones
    with the scan's findings, and what the extractor skipped."""

    summary: dict[str, int] = Field(default_factory=dict)
    fact_ids: list[str] = Field(default_factory=list)
    rejected: dict[str, list[str]] = Field(default_factory=dict)
    skipped: dict[str, str] = Field(default_factory=dict)


class FactsNavigate(_Model):
    """One call of a navigation tool (``facts_index``, ``facts_entity``, ``facts_get``,
    ``facts_search``, or 0.7.0's ``memory.*`` names)."""

    namespace: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    now: str
    staleness_days: float
