"""The spec's knowledge: the ``knowledge:`` section (documents indexed for retrieval) and a
stage's ``retrieve:`` (the passages put into its prompt), plus the ``retrieve`` tool a role may
list. The index itself lives in the trace store (armature_temporal/knowledge/)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from armature_temporal.spec.fields import StrList, _Model

__all__ = [
    "KNOWLEDGE_SURFACE",
    "RETRIEVE_DESCRIPTION",
    "RETRIEVE_TOOL_NAME",
    "KnowledgeConfig",
    "StageRetrieve",
]

#: The editable surface of the enrichment loop: the spec's knowledge.sources.
KNOWLEDGE_SURFACE = "knowledge.sources"

#: The built-in tool a role lists in ``tools`` to search the spec's knowledge itself.
RETRIEVE_TOOL_NAME = "retrieve"

#: The description of ``Stage.retrieve`` (kept here so the stage model stays short).
RETRIEVE_DESCRIPTION = (
    "LLM stages: passages searched in a knowledge collection before the model is called and "
    "put into its prompt, each with its reference (knowledge:<source>#<chunk>), traced and "
    "shown by armature report."
)


class KnowledgeConfig(_Model):
    """``knowledge:``: the documents this spec's stages search (``retrieve:``, the ``retrieve``
    tool)."""

    collection: str | None = Field(
        None,
        min_length=1,
        pattern=r"^[A-Za-z0-9][\w.-]*$",
        description="The collection in the trace store (default: the spec's name).",
    )
    sources: StrList = Field(
        default_factory=list,
        description="Files, directories and globs of text, Markdown and HTML, relative to the "
        "spec's folder, and web pages (http(s) URLs on http_allow_hosts); armature submit "
        "indexes what changed before it starts the run.",
    )
    embedder: Literal["auto", "local", "lexical"] = Field(
        "auto",
        description="auto: the local model where the embed extra is installed, else lexical.",
    )
    candidates: StrList = Field(
        default_factory=list,
        description="Documents (files, directories, globs in the spec's folder) the "
        "enrichment loop may propose adding to sources when answers show a knowledge gap; "
        "each addition is verified by paired runs (armature improve, with knowledge.sources "
        "in self_improvement.editable_surfaces).",
    )


class StageRetrieve(_Model):
    """``retrieve:`` on a stage: the passages its prompt carries."""

    query: str = Field(
        ...,
        min_length=1,
        description="Jinja template of the search, e.g. '{{ question }}' (run inputs and "
        "upstream outputs, as in the role's description).",
    )
    k: int = Field(4, ge=1, le=50, description="How many passages.")
    collection: str | None = Field(
        None,
        min_length=1,
        pattern=r"^[A-Za-z0-9][\w.~-]*$",  # ~: the plans of enrichment's trials; specs: refused
        description="Collection to search (default: knowledge.collection, else the spec's name).",
    )
    sources: StrList = Field(
        default_factory=list,
        description="Only passages of sources matching these globs (e.g. 'policies/*').",
    )
    mode: Literal["hybrid", "text", "vector"] = Field(
        "hybrid", description="Full text, vectors, or both fused by reciprocal rank."
    )
    cite: bool = Field(
        False,
        description="The answer must cite the [knowledge:...] reference of a passage it was "
        "shown, and no other; an answer that does not is retried like an invalid one.",
    )
