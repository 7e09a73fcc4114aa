"""Knowledge collections in the trace store, on SQLite (FTS5) and PostgreSQL (tsvector):
documents chunked, indexed and found by full text, by vector and by both fused; a source
added again replaces its chunks, or is left alone when its text did not change; an
unreadable file is named with the reason and the rest indexed; a search before any index
says how to build one. Full text reads a query alike on both databases (stop words dropped,
words matched by their stems), and migration 19 re-indexes an older SQLite store so. A search
limited to sources by globs ranks only their chunks. A rebuild swaps the new index in only once
complete: failing midway, it leaves the old one searchable."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from sqlalchemy import text

from armature_temporal.experience.embeddings import LexicalEmbedder
from armature_temporal.knowledge import index_sources, rebuild, search
from armature_temporal.knowledge.chunking import chunk_text, html_text
from armature_temporal.store import TraceStore, migrate
from armature_temporal.store import knowledge as knowledge_store
from armature_temporal.store.engine import make_engine, release_engine
from armature_temporal.store.knowledge import RRF_K, KnowledgeError, query_terms

TIDES = """\
# Tides

## Why tides happen
The Moon's gravity pulls the oceans toward it, making a bulge; a second bulge forms on the
far side. Most coasts see two high tides a day.

## Spring and neap tides
When the Sun and Moon line up their pulls add up: spring tides, the largest range. At
quarter moons they pull at right angles: neap tides, the smallest range.
"""

VOLCANO = """<html><body><h1>Volcanoes</h1><p>Magma rises through cracks in the crust and
erupts as lava, ash and gas.</p><h2>Types</h2><p>Stratovolcanoes are steep and
explosive.</p><script>never indexed</script></body></html>"""


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "tides.md").write_text(TIDES)
    (root / "sub" / "volcano.html").write_text(VOLCANO)
    (root / "bad.txt").write_bytes(b"\xff\xfe not text")
    (root / "ignored.bin").write_bytes(b"\0\0")
    return root


def test_documents_are_indexed_and_found_by_text_vector_and_both(
    store: TraceStore, docs: Path
) -> None:
    with pytest.raises(KnowledgeError) as caught:
        search(store, "handbook", "tides")
    assert "armature knowledge add PATH... --collection handbook" in str(caught.value)

    seen: list[tuple[str, int]] = []
    report = index_sources(
        store,
        "handbook",
        [str(docs)],
        embedder=LexicalEmbedder(),
        progress=lambda s, n: seen.append((Path(s).name, n)),
    )
    assert {Path(s).name: n for s, n in report.indexed.items()} == {
        "tides.md": 2,
        "volcano.html": 2,
    }
    assert sorted(seen) == [("tides.md", 2), ("volcano.html", 2)]
    (bad,) = report.unreadable.items()
    assert bad[0].endswith("bad.txt") and "not UTF-8" in bad[1]

    hits = search(store, "handbook", "why do coasts see two high tides", k=3)
    top = hits[0]
    assert top.heading == "Tides > Why tides happen" and top.ref.endswith("tides.md#0")
    assert set(top.ranks) == {"text", "vector"}
    # reciprocal rank fusion: the score is the sum of 1 / (60 + place) over the rankings
    assert top.score == round(sum(1 / (RRF_K + p) for p in top.ranks.values()), 6)
    text_only = search(store, "handbook", "stratovolcanoes explosive", k=1, mode="text")
    assert text_only[0].heading == "Volcanoes > Types" and set(text_only[0].ranks) == {"text"}
    assert "never indexed" not in " ".join(h.text for h in search(store, "handbook", "never"))
    vector_only = search(store, "handbook", "magma lava ash", k=1, mode="vector")
    assert vector_only[0].source.endswith("volcano.html") and set(vector_only[0].ranks) == {
        "vector"
    }


def test_adding_again_replaces_changed_sources_and_keeps_unchanged_ones(
    store: TraceStore, docs: Path
) -> None:
    lexical = LexicalEmbedder()
    index_sources(store, "c", [str(docs / "tides.md")], embedder=lexical)
    again = index_sources(store, "c", [str(docs / "tides.md")], embedder=lexical)
    assert again.indexed == {} and len(again.unchanged) == 1
    (docs / "tides.md").write_text("# Tides\n\nOnly one short paragraph about the tides now.\n")
    changed = index_sources(store, "c", [str(docs / "tides.md")], embedder=lexical)
    assert list(changed.indexed.values()) == [1]
    (source,) = store.knowledge_sources("c")
    assert source.chunks == 1
    assert [h.text for h in search(store, "c", "paragraph", mode="text")] == [
        "Only one short paragraph about the tides now."
    ]
    assert store.remove_document("c", source.source)
    assert store.knowledge_sources("c") == []
    assert not store.remove_document("c", source.source)


def test_chunks_follow_headings_and_long_sections_overlap() -> None:
    words = " ".join(f"w{i}" for i in range(250))
    chunks = chunk_text(f"# A\n\nshort one\n\n## B\n\n{words}\n", size=100, overlap=20)
    assert [c.heading for c in chunks] == ["A", "A > B", "A > B", "A > B"]
    windows = [c.text.split() for c in chunks[1:]]
    assert windows[0][-20:] == windows[1][:20]  # neighbours share the overlap
    assert windows[2][-1] == "w249"  # nothing lost at the end
    assert html_text("<h2>T</h2><p>a <b>b</b></p><style>x</style>") == "## T\n\na b"
    fenced = chunk_text("# Run\n\n```bash\n# start it\narmature dev\n```\n\nafter\n")
    assert [c.heading for c in fenced] == ["Run"]  # "# start it" is a comment in code
    with pytest.raises(ValueError):
        chunk_text("x", size=10, overlap=10)


def test_the_local_model_finds_a_chunk_by_meaning_where_no_word_matches(
    store: TraceStore, docs: Path
) -> None:
    from armature_temporal.experience.embeddings import LocalEmbedder

    report = index_sources(store, "meaning", [str(docs / "tides.md")], embedder=LocalEmbedder())
    assert report.embedder == "all-MiniLM-L6-v2"
    query = "lunar attraction seawater"  # no word of it is in the documents
    assert search(store, "meaning", query, mode="text") == []
    (hit,) = search(store, "meaning", query, k=1, mode="vector")
    assert hit.heading == "Tides > Why tides happen"
    with pytest.raises(KnowledgeError) as caught:  # one embedder per collection
        index_sources(store, "meaning", [str(docs / "sub")], embedder=LexicalEmbedder())
    assert "knowledge rebuild --collection meaning" in str(caught.value)


def _matched(store: TraceStore, query: str) -> set[str]:
    """What a text search finds, as ``file#chunk``."""
    return {f"{Path(h.source).name}#{h.ord}" for h in search(store, "c", query, k=20, mode="text")}


# The same expectations on SQLite and PostgreSQL (the test runs on each): both read a query alike.
@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("the tides of the Moon", {"tides.md#0", "tides.md#1"}),
        ("pulled", {"tides.md#0", "tides.md#1"}),  # a stem: "pulls", "pull"
        ("erupting", {"volcano.html#0"}),  # "erupts"
        ("largest ranges", {"tides.md#1"}),
        ("explosive_stratovolcanoes", {"volcano.html#1"}),  # "_" splits words, as indexed
        ("Why is it that they were there?", set()),  # stop words only
        ("glaciers", set()),
    ],
)
def test_text_search_drops_stop_words_and_matches_stems_alike_on_both_databases(
    store: TraceStore, docs: Path, query: str, found: set[str]
) -> None:
    index_sources(store, "c", [str(docs)], embedder=LexicalEmbedder())
    assert _matched(store, query) == found


def test_a_query_of_stop_words_ranks_by_vector_alone(store: TraceStore, docs: Path) -> None:
    assert query_terms("How does it work, and why?") == ["work"]
    assert query_terms("What is it that they were doing there?") == []
    index_sources(store, "c", [str(docs)], embedder=LexicalEmbedder())
    query = "what is it that they were doing there"
    hybrid = search(store, "c", query, k=4)
    vector = search(store, "c", query, k=4, mode="vector")
    assert [h.ref for h in hybrid] == [h.ref for h in vector] and len(hybrid) == 4
    assert all(set(h.ranks) == {"vector"} for h in hybrid)
    assert search(store, "c", query, mode="text") == []


def test_migration_19_reindexes_an_older_sqlite_store_with_stems(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    engine = make_engine(url)
    assert migrate(engine, upto=18)[-1] == 18
    with engine.begin() as conn:  # a chunk indexed at version 18: FTS5 without stemming
        conn.execute(
            text(
                "INSERT INTO knowledge_sources VALUES "
                "('c', 'tides.md', 'x', 1, 'lexical', '2025-01-01T00:00:00+00:00')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO knowledge_chunks (id, collection, source, ord, heading, text, "
                "sha256, vector) VALUES (7, 'c', 'tides.md', 0, 'Tides', "
                "'The Moon pulls the oceans', 'y', '[1.0]')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO knowledge_fts (text, heading, chunk_id, collection) "
                "VALUES ('The Moon pulls the oceans', 'Tides', 7, 'c')"
            )
        )
        old = "SELECT chunk_id FROM knowledge_fts WHERE knowledge_fts MATCH 'pulling'"
        assert conn.execute(text(old)).all() == []
    assert migrate(engine, upto=19) == [19]
    release_engine(engine)
    store = TraceStore(url)
    try:
        (hit,) = search(store, "c", "pulling", mode="text")
        assert (hit.source, hit.ord, hit.text) == ("tides.md", 0, "The Moon pulls the oceans")
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["text", "vector", "hybrid"])
def test_a_source_filter_ranks_only_the_chunks_of_matching_sources(
    store: TraceStore, docs: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_sources(store, "c", [str(docs)], embedder=LexicalEmbedder())
    query = "why do the tides happen twice a day, and magma"
    (best,) = search(store, "c", query, k=1, mode=mode)
    assert best.source.endswith("tides.md")
    # each ranking reads one candidate: a filter applied after ranking would find nothing
    monkeypatch.setattr(knowledge_store, "CANDIDATES", 1)
    (hit,) = search(store, "c", query, k=1, mode=mode, sources=["*.html"])
    assert hit.source.endswith("volcano.html") and hit.heading == "Volcanoes"
    both = search(store, "c", "tides magma", k=5, mode=mode, sources=["*/sub/*", "*/tides.*"])
    assert {Path(h.source).name for h in both} <= {"tides.md", "volcano.html"}
    assert search(store, "c", query, mode=mode, sources=["*.pdf"]) == []
    assert search(store, "c", query, mode=mode, sources=["TIDES.MD"]) == []  # case counts


class FakeEmbedder(LexicalEmbedder):
    """The lexical embedder, calling ``during`` before each batch after the first, and
    failing at batch ``fail_at`` (counted from 1) when given."""

    def __init__(self, during: Callable[[], None], fail_at: int | None = None) -> None:
        super().__init__()
        self.during, self.fail_at, self.calls = during, fail_at, 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls > 1:
            self.during()
        if self.calls == self.fail_at:
            raise RuntimeError("the model server went away")
        return super().embed(texts)


def test_a_rebuild_swaps_the_new_index_in_only_when_complete(store: TraceStore, docs: Path) -> None:
    index_sources(store, "c", [str(docs)], embedder=LexicalEmbedder())
    before = sorted((h.ref, h.text) for h in search(store, "c", "tides magma", k=10))
    assert len(before) == 4

    def old_index_is_searched() -> None:  # while the rebuild is under way
        # the same chunks (their order may differ: FTS5's BM25 counts the whole table,
        # the staging collection too)
        assert sorted((h.ref, h.text) for h in search(store, "c", "tides magma", k=10)) == before
        assert [s.collection for s in store.knowledge_sources("c")] == ["c", "c"]

    (docs / "tides.md").write_text("# Tides\n\nRewritten: the tides are a wave.\n")
    failing = FakeEmbedder(old_index_is_searched, fail_at=2)
    with pytest.raises(RuntimeError, match="went away"):
        rebuild(store, "c", embedder=failing)
    assert failing.calls == 2
    old_index_is_searched()
    assert {s.collection for s in store.knowledge_sources()} == {"c"}  # no staging left

    (docs / "sub" / "volcano.html").unlink()
    checked = FakeEmbedder(old_index_is_searched)
    report = rebuild(store, "c", embedder=checked)
    assert checked.calls == 1  # tides.md only; volcano.html is gone
    assert report.collection == "c" and list(report.unreadable) == [
        str(docs / "sub" / "volcano.html")
    ]
    (source,) = store.knowledge_sources()
    assert (source.collection, Path(source.source).name, source.chunks) == ("c", "tides.md", 1)
    (hit,) = search(store, "c", "tides magma", k=10)
    assert hit.text == "Rewritten: the tides are a wave." and set(hit.ranks) == {"text", "vector"}

    (docs / "tides.md").unlink()  # nothing readable: the index is kept
    with pytest.raises(KnowledgeError, match="none of its 1 sources could be read"):
        rebuild(store, "c", embedder=LexicalEmbedder())
    assert [h.text for h in search(store, "c", "tides")] == ["Rewritten: the tides are a wave."]
    assert {s.collection for s in store.knowledge_sources()} == {"c"}


def test_a_copied_collection_searches_alike_and_changes_apart(
    store: TraceStore, docs: Path
) -> None:
    index_sources(store, "live", [str(docs)], embedder=LexicalEmbedder())
    store.copy_collection("live", "live~trial")
    for mode in ("text", "vector", "hybrid"):
        here = [
            (h.source, h.ord, h.sha256) for h in search(store, "live", "spring tides", mode=mode)
        ]
        there = search(store, "live~trial", "spring tides", mode=mode)
        assert [(h.source, h.ord, h.sha256) for h in there] == here, mode
    extra = docs.parent / "moon.md"
    extra.write_text("# Moon\n\nThe Moon's phases follow its orbit: spring tides at full moon.\n")
    index_sources(store, "live~trial", [str(extra)], embedder=LexicalEmbedder())
    assert str(extra) in {s.source for s in store.knowledge_sources("live~trial")}
    assert str(extra) not in {s.source for s in store.knowledge_sources("live")}
    store.drop_collection("live~trial")
    assert store.knowledge_sources("live~trial") == [] and search(store, "live", "tides")
