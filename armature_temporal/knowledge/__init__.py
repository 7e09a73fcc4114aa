"""Knowledge: documents indexed for retrieval (issue #30, the first part).

:func:`index_sources` reads files, directories and globs of text, Markdown and HTML
(:mod:`.sources`), cuts them into chunks by structure and words (:mod:`.chunking`), embeds the
chunks with the local model (the ``embed`` extra; where it is not installed, the lexical
embedder, and the source records which) and stores them in the trace store's database
(:class:`~armature_temporal.store.knowledge.KnowledgeStore`), a source whose text did not
change left as it is; :func:`rebuild` indexes a collection's sources again into a staging
collection and swaps it in only once complete. :func:`search` ranks a collection's chunks by
full text, by vector or both fused by reciprocal rank.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from armature_temporal.knowledge.chunking import DEFAULT_OVERLAP, DEFAULT_SIZE, chunk_text
from armature_temporal.knowledge.sources import Document, Unreadable, read_sources

__all__ = [
    "DEFAULT_COLLECTION",
    "IndexReport",
    "default_embedder",
    "embedder_named",
    "index_sources",
    "rebuild",
    "search",
]

#: Where a rebuild indexes before it swaps the result in (a unique suffix follows).
STAGING_PREFIX = "~rebuild~"

DEFAULT_COLLECTION = "default"


def default_embedder() -> Any:
    """The local model where the ``embed`` extra is installed, else the lexical embedder."""
    from armature_temporal.experience.embeddings import (
        LexicalEmbedder,
        LocalEmbedder,
        local_available,
    )

    return LocalEmbedder() if local_available() else LexicalEmbedder()


def embedder_named(name: str) -> Any:
    """The embedder that made vectors recorded under ``name``."""
    from armature_temporal.experience.embeddings import LexicalEmbedder, LocalEmbedder

    return LexicalEmbedder() if name == LexicalEmbedder.name else LocalEmbedder()


@dataclass
class IndexReport:
    """What an ``add`` did: sources indexed (with their chunk counts), left as they were,
    and unreadable (with why)."""

    collection: str
    embedder: str
    indexed: dict[str, int] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "embedder": self.embedder,
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "unreadable": self.unreadable,
        }


def index_sources(
    store: Any,
    collection: str,
    sources: Iterable[str],
    *,
    embedder: Any | None = None,
    size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    progress: Callable[[str, int], None] | None = None,
    fetched: Iterable[Document | Unreadable] = (),
) -> IndexReport:
    """Index every readable file ``sources`` names, and the ``fetched`` pages
    (:mod:`.urls`), into ``collection``; ``progress(source, chunks)`` after each. An
    unreadable file is reported, and the rest indexed."""
    embedder = embedder or default_embedder()
    report = IndexReport(collection, embedder.name)
    known_sources = {s.source: s for s in store.knowledge_sources(collection)}  # read once
    used = {s.embedder for s in known_sources.values()}
    if used and used != {embedder.name}:
        from armature_temporal.store.knowledge import KnowledgeError

        raise KnowledgeError(
            f"collection {collection!r} was indexed with {sorted(used)}, this embedder is "
            f"{embedder.name!r}; vectors of two models cannot be compared: run `armature "
            f"knowledge rebuild --collection {collection}` to index it all again"
        )
    for item in itertools.chain(read_sources(sources), fetched):
        if isinstance(item, Unreadable):
            report.unreadable[item.source] = item.reason
            continue
        assert isinstance(item, Document)
        digest = hashlib.sha256(item.text.encode()).hexdigest()
        known = known_sources.get(item.source)
        if known is not None and known.sha256 == digest and known.embedder == embedder.name:
            report.unchanged.append(item.source)
            continue
        chunks = chunk_text(item.text, size=size, overlap=overlap)
        vectors = embedder.embed([f"{c.heading}\n{c.text}".strip() for c in chunks])
        store.add_document(collection, item.source, digest, chunks, vectors, embedder.name)
        report.indexed[item.source] = len(chunks)
        if progress is not None:
            progress(item.source, len(chunks))
    return report


def rebuild(
    store: Any,
    collection: str,
    *,
    embedder: Any | None = None,
    size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
    progress: Callable[[str, int], None] | None = None,
) -> IndexReport:
    """Index every source of ``collection`` again (with ``embedder``: another model may be
    chosen) into a staging collection, and swap that in for the old index once every source
    was read; until then, and if anything fails, searches see the old index, and the staging
    collection is dropped. A source that cannot be read any more is reported and left out of
    the new index; when none can be read, the old index is kept.

    Raises:
        KnowledgeError: the collection has nothing indexed, or no source could be read.
    """
    import uuid

    from armature_temporal.store.knowledge import KnowledgeError

    sources = [s.source for s in store.knowledge_sources(collection)]
    if not sources:
        raise KnowledgeError(
            f"collection {collection!r} has nothing indexed; add documents with "
            f"`armature knowledge add PATH... --collection {collection}`"
        )
    staging = f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    try:
        report = index_sources(
            store,
            staging,
            sources,
            embedder=embedder,
            size=size,
            overlap=overlap,
            progress=progress,
        )
        if not report.indexed:
            raise KnowledgeError(
                f"collection {collection!r}: none of its {len(sources)} sources could be read "
                f"({report.unreadable}); the index is left as it was"
            )
        store.replace_collection(staging, collection)
    except BaseException:
        store.drop_collection(staging)  # then the failure itself, unchanged
        raise
    report.collection = collection
    return report


def search(
    store: Any,
    collection: str,
    query: str,
    *,
    k: int = 5,
    mode: str = "hybrid",
    sources: Sequence[str] | None = None,
) -> list[Any]:
    """The ``k`` best chunks for ``query`` (``mode``: hybrid, text or vector), embedding the
    query with the model the collection was indexed with; with ``sources`` (``fnmatch``
    globs over source names), only chunks of matching sources are ranked, and none matching
    finds nothing.

    Raises:
        KnowledgeError: nothing is indexed in the collection (the message says how to add).
    """
    vector = None
    names = {s.embedder for s in store.knowledge_sources(collection)}
    if mode != "text" and names:  # an empty collection: search_chunks says how to add
        (name,) = names  # index_sources keeps one embedder per collection
        vector = embedder_named(name).embed([query])[0]
    return list(store.search_chunks(collection, query, vector, k=k, mode=mode, sources=sources))
