"""The spec's ``memory:`` section: outputs remembered across runs (``capture``) and the facts
that outlive a run (``extract_knowledge``, ``navigation_tools``), kept in the trace store."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from armature_temporal.spec.fields import IDENTIFIER, _Model

__all__ = ["MemoryCapture", "MemoryConfig"]


class MemoryCapture(_Model):
    """One output kept across runs."""

    stage: str = Field(..., min_length=1, description="The stage whose output is captured.")
    key: str = Field(..., min_length=1, description="The output field to keep.")
    max_entries: int = Field(5, ge=1, le=1000, description="Rolling window; oldest go first.")


class MemoryConfig(_Model):
    """Outputs remembered across runs of this spec, in the trace store."""

    enabled: bool = Field(True, description="false turns memory off without deleting it.")
    fresh: bool = Field(False, description="true: capture, but start each run with none.")
    capture: list[MemoryCapture] = Field(default_factory=list, description="What to keep.")
    inject_as: str = Field(
        "_memory",
        pattern=IDENTIFIER.pattern,
        description="Template variable holding {stage: {key: [values, newest first]}}; "
        "_stale_memory_keys names those older than 30 days.",
    )
    workflow_name: str | None = Field(
        None, description="Share another spec's memory (default: this spec's name)."
    )
    db: str | None = Field(
        None, description="0.7.0 field, accepted with a warning: memory lives in the trace store."
    )
    extract_knowledge: bool = Field(
        False,
        description="Keep the facts each stage's output states (facts, entities, relations: "
        "see the README's Facts) across runs, screened by the admission scan and reconciled "
        "with the facts kept; later runs' prompts carry the current ones.",
    )
    inject_knowledge_as: str = Field(
        "_knowledge",
        pattern=IDENTIFIER.pattern,
        description="Template variable holding the current facts as [{entity, fact, "
        "confidence, id, stale}] (the prompts carry them as a block either way).",
    )
    reconcile: bool = Field(
        True,
        description="Compare new facts with those kept (duplicate, update, supersede, "
        "contradict: both kept, the newer current); false keeps each as it comes. The "
        "admission scan runs either way.",
    )
    reconcile_llm: bool = Field(False, description="0.7.0 field, accepted with a warning.")
    navigation_tools: bool = Field(
        False,
        description="Roles may list the read-only fact tools (facts_index, facts_entity, "
        "facts_get, facts_search; 0.7.0's memory.search_records, memory.get_records); a stage "
        "that does reads facts by them instead of the prompt block.",
    )
    staleness_threshold_days: float | None = Field(
        None,
        gt=0,
        description="Facts last seen longer ago are marked stale in prompts and the trace "
        "(default 30).",
    )
    knowledge_budget_chars: int | None = Field(
        None,
        ge=200,
        description="Most characters of facts a prompt carries (default 2000); the rest are "
        "counted, not shown.",
    )

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # unset, the newer fields leave a spec's hash and its plan's bytes as they were
        data: dict[str, Any] = handler(self)
        for key in ("staleness_threshold_days", "knowledge_budget_chars"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def staleness_days(self) -> float:
        return 30.0 if self.staleness_threshold_days is None else self.staleness_threshold_days

    @property
    def budget_chars(self) -> int:
        return 2000 if self.knowledge_budget_chars is None else self.knowledge_budget_chars

    @property
    def keeps_facts(self) -> bool:
        """Whether runs read or keep facts (extract_knowledge or navigation_tools)."""
        return self.extract_knowledge or self.navigation_tools
