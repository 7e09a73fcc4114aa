"""What crosses Temporal for retrieval: a search of a knowledge collection (``retrieve:``, the
``retrieve`` tool) and the passages it found. Plain data, like runtime/models.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KnowledgeFound", "KnowledgeQuery"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KnowledgeQuery(_Model):
    """Search ``collection`` for ``query``: the ``k`` best passages of the sources matching
    ``sources`` (globs; empty: all)."""

    collection: str
    query: str
    k: int = 4
    mode: Literal["hybrid", "text", "vector"] = "hybrid"
    sources: list[str] = Field(default_factory=list)


class KnowledgeFound(_Model):
    """The passages found, best first, each ``{ref, heading, text, sha256, score}``."""

    passages: list[dict[str, Any]] = Field(default_factory=list)
