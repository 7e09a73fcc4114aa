"""``armature knowledge add|list|search|remove|rebuild``: documents indexed for retrieval, in
the trace store (see :mod:`armature_temporal.knowledge`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    LEARN,
    JsonFlag,
    err,
    fail,
    open_store,
    out,
    print_json,
    print_wide,
)
from armature_temporal.errors import ArmatureError

app = typer.Typer()
knowledge_app = typer.Typer(
    help="Documents indexed for retrieval: add files, directories or globs of text, Markdown "
    "and HTML; search them (full text, vectors, or both fused); list, remove, rebuild.",
    no_args_is_help=True,
)
app.add_typer(knowledge_app, name="knowledge", rich_help_panel=LEARN)

CollectionOpt = Annotated[
    str,
    typer.Option(
        "--collection", "-c", help="The collection (a name; specs will retrieve from it)."
    ),
]


EmbedderOpt = Annotated[
    str,
    typer.Option(
        "--embedder",
        help="auto (the local model where the embed extra is installed, else lexical), local "
        "(all-MiniLM-L6-v2) or lexical (hashed words and trigrams: fast, no model). A "
        "collection keeps one.",
    ),
]


def _embedder(choice: str) -> Any:
    from armature_temporal.experience.embeddings import LexicalEmbedder, LocalEmbedder
    from armature_temporal.knowledge import default_embedder

    if choice not in ("auto", "local", "lexical"):
        raise fail(f"error: --embedder {choice!r}: choose auto, local or lexical", 2)
    try:
        if choice == "auto":
            return default_embedder()
        return LocalEmbedder() if choice == "local" else LexicalEmbedder()
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None


def _writable() -> Any:
    from armature_temporal.store import TraceStore

    try:
        return TraceStore()
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None


@knowledge_app.command("add")
def add(
    sources: Annotated[
        list[str],
        typer.Argument(
            help="Files, directories (their .md .txt .rst .html files) or quoted globs.",
            metavar="PATH",
        ),
    ],
    collection: CollectionOpt = "default",
    chunk_words: Annotated[
        int, typer.Option("--chunk-words", min=20, help="Words per chunk at most.")
    ] = 200,
    overlap: Annotated[
        int, typer.Option("--overlap", min=0, help="Words two neighbouring chunks share.")
    ] = 40,
    embedder: EmbedderOpt = "auto",
    as_json: JsonFlag = False,
) -> None:
    """Index documents into a collection: chunked by headings and paragraphs, then by words
    with overlap; embedded with the local model (the embed extra; else the lexical embedder,
    and the source records which). A source added again is indexed again only if its text
    changed. An unreadable file is named with the reason, and the rest are indexed (exit 1
    if any was unreadable).

    Example: armature knowledge add docs/ 'notes/**/*.md' --collection handbook
    """
    from armature_temporal.knowledge import index_sources

    if overlap >= chunk_words:
        raise fail(f"error: --overlap {overlap} must be below --chunk-words {chunk_words}", 2)
    store = _writable()

    def progress(source: str, chunks: int) -> None:
        if not as_json:
            err.print(f"indexed {source} ({chunks} chunks)", markup=False, highlight=False)

    try:
        report = index_sources(
            store,
            collection,
            sources,
            embedder=_embedder(embedder),
            size=chunk_words,
            overlap=overlap,
            progress=progress,
        )
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json(report.as_json())
    else:
        for source, reason in report.unreadable.items():
            err.print(f"error: {source}: {reason}", markup=False, highlight=False)
        out.print(
            f"collection {collection!r}: {len(report.indexed)} indexed "
            f"({sum(report.indexed.values())} chunks), {len(report.unchanged)} unchanged, "
            f"{len(report.unreadable)} unreadable; embedder {report.embedder}",
            markup=False,
            highlight=False,
        )
    if report.unreadable:
        raise typer.Exit(1)


@knowledge_app.command("list")
def list_sources(
    collection: Annotated[
        str | None, typer.Option("--collection", "-c", help="Only this collection.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The indexed sources: collection, source, chunks, embedder, when added."""
    store, where = open_store()
    try:
        found = store.knowledge_sources(collection)
    finally:
        store.close()
    if as_json:
        print_json([s.__dict__ for s in found])
        return
    if not found:
        out.print(
            f"nothing indexed in {where}; add documents with `armature knowledge add PATH...`",
            markup=False,
        )
        return
    from rich.table import Table

    table = Table("collection", "source", "chunks", "embedder", "added")
    for s in found:
        table.add_row(s.collection, s.source, str(s.chunks), s.embedder, s.added_at[:19])
    print_wide(table)


@knowledge_app.command("search")
def search_cmd(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    collection: CollectionOpt = "default",
    k: Annotated[int, typer.Option("-k", min=1, max=100, help="How many chunks.")] = 5,
    mode: Annotated[
        str,
        typer.Option(
            "--mode", help="hybrid (full text and vectors, fused by reciprocal rank), text, vector."
        ),
    ] = "hybrid",
    source: Annotated[
        list[str] | None,
        typer.Option(
            "--source",
            help="Only chunks of sources matching this glob (as `knowledge list` names them; "
            "* also matches /); repeat for any of several.",
            metavar="GLOB",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The chunks of a collection that best answer a query, each with where it comes from
    (knowledge:<source>#<chunk>) and its hash.

    Example: armature knowledge search 'retry policy' --source '*/guides/*' --source '*.rst'
    """
    from armature_temporal.knowledge import search

    if mode not in ("hybrid", "text", "vector"):
        raise fail(f"error: --mode {mode!r}: choose hybrid, text or vector", 2)
    store, _ = open_store()
    try:
        hits = search(store, collection, query, k=k, mode=mode, sources=source)
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json([{**h.__dict__, "ref": h.ref} for h in hits])
        return
    if not hits:
        among = f" among sources matching {source}" if source else ""
        out.print(f"no chunk of {collection!r} matches {query!r}{among}", markup=False)
        return
    for h in hits:
        ranks = ", ".join(f"{name} #{place}" for name, place in h.ranks.items())
        out.print(f"{h.ref}  {h.heading}  [{ranks}]", markup=False, highlight=False)
        snippet = " ".join(h.text.split())
        out.print(f"    {snippet[:300]}{'…' if len(snippet) > 300 else ''}", markup=False)


@knowledge_app.command("remove")
def remove(
    source: Annotated[str, typer.Argument(help="The source, as `knowledge list` shows it.")],
    collection: CollectionOpt = "default",
) -> None:
    """Drop one source and its chunks from a collection."""
    store = _writable()
    try:
        gone = store.remove_document(collection, source)
        known = [s.source for s in store.knowledge_sources(collection)]
    finally:
        store.close()
    if not gone:
        raise fail(
            f"error: collection {collection!r} has no source {source!r}; its sources: {known[:20]}",
            1,
        )
    out.print(f"removed {source} from {collection!r}", markup=False)


@knowledge_app.command("rebuild")
def rebuild(
    collection: CollectionOpt = "default",
    embedder: EmbedderOpt = "auto",
    as_json: JsonFlag = False,
) -> None:
    """Index every source of a collection again from its file, with the embedder this
    machine has now (after installing the embed extra, say). The new index replaces the old
    only once complete: if the rebuild fails or is interrupted, the old one is still searched.
    A source that cannot be read any more is named and left out of the new index."""
    from armature_temporal.knowledge import rebuild as rebuild_collection

    store = _writable()

    def progress(source: str, chunks: int) -> None:
        if not as_json:
            err.print(f"indexed {source} ({chunks} chunks)", markup=False, highlight=False)

    try:
        report = rebuild_collection(
            store, collection, embedder=_embedder(embedder), progress=progress
        )
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json(report.as_json())
        return
    for source, reason in report.unreadable.items():
        err.print(f"error: {source}: {reason} (dropped from the collection)", markup=False)
    out.print(
        f"collection {collection!r} rebuilt: {len(report.indexed)} sources, "
        f"{sum(report.indexed.values())} chunks; embedder {report.embedder}",
        markup=False,
    )
