"""A spec's ``knowledge.sources``, indexed: what ``armature submit`` and ``armature run`` do
before they start a run of a spec with ``knowledge:``.

Sources are read as a spec reads any file: relative to the spec's folder and inside its
folder tree (or ``$ARMATURE_SPEC_ROOTS``), never in Armature's own records, the worker's
credentials or a kernel file system — a spec from elsewhere cannot put ``~/.ssh`` into a
prompt. Each source is named relative to the spec's folder (``docs/refunds.md``), so a
passage's reference is the same on every machine. Only files whose text changed are
indexed again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from armature_temporal.knowledge import IndexReport, default_embedder, index_sources
from armature_temporal.knowledge.sources import Document, Unreadable, _files, read_sources
from armature_temporal.knowledge.urls import fetch_page, is_url

__all__ = [
    "collection_embedder",
    "index_spec_knowledge",
    "spec_documents",
    "spec_embedder",
    "spec_files",
]


def spec_embedder(choice: str) -> Any:
    """The embedder ``knowledge.embedder`` names."""
    from armature_temporal.experience.embeddings import LexicalEmbedder, LocalEmbedder

    if choice == "auto":
        return default_embedder()
    return LocalEmbedder() if choice == "local" else LexicalEmbedder()


def collection_embedder(store: Any, collection: str, choice: str) -> Any:
    """The embedder a collection was indexed with (so its vectors compare), else the one
    ``knowledge.embedder`` names."""
    from armature_temporal.knowledge import embedder_named

    used = {s.embedder for s in store.knowledge_sources(collection)}
    return embedder_named(used.pop()) if len(used) == 1 else spec_embedder(choice)


def spec_files(folder: Path, given: str) -> Iterator[tuple[str, Path] | Unreadable]:
    """The files one source names, each as ``(its name relative to the spec's folder, its
    path)``, or why not: outside the folder tree (after ``..`` and symlinks), in Armature's
    own records, not a regular file. Resolved against ``folder`` explicitly: a worker thread
    never changes the process's working directory."""
    from armature_temporal.spec.files import SpecFileRefused, SpecRoots, spec_file_path

    if os.path.isabs(given) or given.startswith("~"):
        yield Unreadable(
            given,
            "a knowledge source is named relative to the spec's folder; move the documents "
            "under it and name them so, e.g. docs/",
        )
        return
    roots = SpecRoots.of(folder)
    for item in _files(str(folder / given)):
        if isinstance(item, Unreadable):
            yield Unreadable(given, item.reason)
            continue
        name = os.path.normpath(os.path.relpath(item, folder))
        try:
            spec_file_path(roots, folder, name)
        except SpecFileRefused as exc:
            yield Unreadable(name, str(exc))
            continue
        yield name, item


def spec_documents(folder: Path, sources: Sequence[str]) -> Iterator[Document | Unreadable]:
    """Each file the sources name, read, under its name relative to the spec's folder (or
    why not), each once."""
    seen: set[str] = set()
    for given in sources:
        for item in spec_files(folder, given):
            if isinstance(item, Unreadable):
                yield item
                continue
            name, path = item
            if name in seen:
                continue
            seen.add(name)
            for read in read_sources([str(path)]):
                yield (
                    Document(name, read.text)
                    if isinstance(read, Document)
                    else Unreadable(name, read.reason)
                )


def index_spec_knowledge(
    store: Any,
    spec_path: Path,
    collection: str,
    sources: list[str],
    *,
    embedder: Any,
    progress: Callable[[str, int], None] | None = None,
    allow_hosts: Sequence[str] = (),
    policy: Any = None,
) -> IndexReport:
    """Index the files ``sources`` name (relative to the spec's folder), and its web pages
    (fetched through the spec's ``http_allow_hosts`` and the egress ``policy``:
    :mod:`.urls`), into ``collection``. A file outside the spec's folder tree, a page the
    policy refuses, or any source otherwise unreadable is reported with the reason, and the
    rest are indexed.

    Raises:
        KnowledgeError: the collection was indexed with another embedder.
    """
    folder = spec_path.resolve().parent
    pages = [fetch_page(s, allow_hosts, policy=policy) for s in sources if is_url(s)]
    found = list(spec_documents(folder, [s for s in sources if not is_url(s)]))
    refused = {u.source: u.reason for u in found if isinstance(u, Unreadable)}
    documents = [d for d in found if isinstance(d, Document)]
    report = index_sources(
        store, collection, [], embedder=embedder, progress=progress, fetched=[*documents, *pages]
    )
    report.unreadable.update(refused)
    return report
