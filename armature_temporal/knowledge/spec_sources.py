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

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from armature_temporal.knowledge import IndexReport, default_embedder, index_sources
from armature_temporal.knowledge.sources import Unreadable, _files
from armature_temporal.knowledge.urls import fetch_page, is_url

__all__ = ["collection_embedder", "index_spec_knowledge", "spec_embedder"]


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
    from armature_temporal.spec.files import SpecFileRefused, SpecRoots, spec_file_path

    folder = spec_path.resolve().parent
    roots = SpecRoots.of(folder)
    files: list[str] = []
    refused: dict[str, str] = {}
    pages = [fetch_page(s, allow_hosts, policy=policy) for s in sources if is_url(s)]
    with contextlib.chdir(folder):
        for given in sources:
            if is_url(given):
                continue
            if os.path.isabs(given) or given.startswith("~"):
                refused[given] = (
                    "a knowledge source is named relative to the spec's folder; move the "
                    "documents under it and name them so, e.g. docs/"
                )
                continue
            for item in _files(given):
                if isinstance(item, Unreadable):
                    refused[item.source] = item.reason
                    continue
                try:
                    spec_file_path(roots, folder, str(item))
                except SpecFileRefused as exc:
                    refused[str(item)] = str(exc)
                    continue
                files.append(os.path.normpath(str(item)))
        report = index_sources(
            store, collection, files, embedder=embedder, progress=progress, fetched=pages
        )
    report.unreadable.update(refused)
    return report
