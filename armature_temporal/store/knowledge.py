"""The TraceStore's knowledge collections: documents chunked and indexed for hybrid search.

Each chunk is kept with its text, sha256 and vector in ``knowledge_chunks`` and in a full-text
index (SQLite: the FTS5 table ``knowledge_fts`` with the ``porter`` tokenizer, ranked by BM25;
PostgreSQL: a GIN index over ``to_tsvector('english', ...)``, ranked by ``ts_rank``).
:meth:`KnowledgeStore.search_chunks` ranks by full text, by vector (cosine, with numpy over the
collection's vectors: this Python's sqlite3 loads no extensions, and pgvector is not assumed),
or both fused by reciprocal rank (RRF, ``k`` = 60: a chunk's score is the sum over the
rankings of 1 / (60 + rank); a ranking that found nothing adds nothing).

Both databases read a query alike (:func:`query_terms`): its words (runs of letters and
digits), lower-cased, without the English stop words PostgreSQL's ``english`` configuration
drops (:data:`STOPWORDS`), any of them matching, each matched by its stem (SQLite's Porter
stemmer, PostgreSQL's Snowball English one). A query of stop words only finds nothing by text.

A search may be limited to sources matching globs (``fnmatch``: ``*``, ``?``, ``[seq]``, with
``*`` matching ``/`` too; case-sensitive): only their chunks are ranked, by text and by vector.

Adding a source again replaces its chunks (the sha256 says whether anything changed). A
collection is rebuilt into a staging collection that :meth:`KnowledgeStore.replace_collection`
swaps in, in one transaction, once it is complete.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any, Literal

from sqlalchemy import bindparam, delete, insert, select, text, update

from armature_temporal.errors import ArmatureError
from armature_temporal.store._base import StoreBase, table_of
from armature_temporal.store.schema import KnowledgeChunkRow, KnowledgeSourceRow

__all__ = [
    "RRF_K",
    "STOPWORDS",
    "KnowledgeError",
    "KnowledgeHit",
    "KnowledgeSource",
    "KnowledgeStore",
    "query_terms",
]

RRF_K = 60
#: The stop words of PostgreSQL's ``english`` text-search configuration (the Snowball English
#: list, ``tsearch_data/english.stop``, 127 words): words too common to say what a query is
#: about. SQLite's FTS5 has no stop words, so the store drops them from every query itself.
#: (Written as words split, as PostgreSQL ships them, rather than 127 quoted strings.)
STOPWORDS = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing a an the and but if or because as until while of at by for with about against
    between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more
    most other some such no nor not only own same so than too very s t can will just don
    should now
    """.split()  # noqa: SIM905
)
#: How many of each ranking the fusion reads.
CANDIDATES = 50
SearchMode = Literal["hybrid", "text", "vector"]


class KnowledgeError(ArmatureError):
    """A knowledge operation that cannot be done as asked."""


@dataclass(frozen=True)
class KnowledgeSource:
    collection: str
    source: str
    sha256: str
    chunks: int
    embedder: str
    added_at: str


@dataclass
class KnowledgeHit:
    """A chunk a search found: where it is from (``knowledge:<source>#<ord>``), its text and
    sha256, and how it ranked (``ranks``: its place in each ranking that found it)."""

    collection: str
    source: str
    ord: int
    heading: str
    text: str
    sha256: str
    score: float
    ranks: dict[str, int] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"knowledge:{self.source}#{self.ord}"


def query_terms(query: str) -> list[str]:
    """The words of a free-text query that a full-text search looks for: runs of letters and
    digits (an underscore, hyphen or dot separates two, as both full-text indexes split
    them), lower-cased, stop words dropped, each once, in order."""
    words = re.findall(r"[^\W_]+", query.lower())
    return list(dict.fromkeys(w for w in words if w not in STOPWORDS))


class KnowledgeStore(StoreBase):
    """Knowledge collections in the trace store."""

    def add_document(
        self,
        collection: str,
        source: str,
        sha256: str,
        chunks: Sequence[Any],
        vectors: Sequence[Sequence[float]],
        embedder: str,
    ) -> None:
        """Index ``chunks`` (objects with ``ord``, ``heading``, ``text``, ``hash``) of
        ``source``, replacing what it had; one transaction."""
        if len(chunks) != len(vectors):
            raise KnowledgeError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        sources, rows = table_of(KnowledgeSourceRow), table_of(KnowledgeChunkRow)
        with self.engine.begin() as conn:
            self._drop(conn, collection, source)
            ids = []
            for chunk, vector in zip(chunks, vectors, strict=True):
                ids.append(
                    conn.execute(
                        insert(rows)
                        .values(
                            collection=collection,
                            source=source,
                            ord=chunk.ord,
                            heading=chunk.heading,
                            text=chunk.text,
                            sha256=chunk.hash,
                            vector=[round(float(x), 6) for x in vector],
                        )
                        .returning(rows.c.id)
                    ).scalar_one()
                )
            if conn.dialect.name == "sqlite":
                for chunk_id, chunk in zip(ids, chunks, strict=True):
                    conn.execute(
                        text(
                            "INSERT INTO knowledge_fts (text, heading, chunk_id, collection) "
                            "VALUES (:text, :heading, :id, :collection)"
                        ),
                        {
                            "text": chunk.text,
                            "heading": chunk.heading,
                            "id": chunk_id,
                            "collection": collection,
                        },
                    )
            conn.execute(
                insert(sources).values(
                    collection=collection,
                    source=source,
                    sha256=sha256,
                    chunks=len(chunks),
                    embedder=embedder,
                    added_at=datetime.now(UTC).isoformat(),
                )
            )

    def _drop(self, conn: Any, collection: str, source: str) -> int:
        sources, rows = table_of(KnowledgeSourceRow), table_of(KnowledgeChunkRow)
        if conn.dialect.name == "sqlite":
            conn.execute(
                text(
                    "DELETE FROM knowledge_fts WHERE chunk_id IN (SELECT id FROM "
                    "knowledge_chunks WHERE collection = :c AND source = :s)"
                ),
                {"c": collection, "s": source},
            )
        conn.execute(delete(rows).where(rows.c.collection == collection, rows.c.source == source))
        gone = conn.execute(
            delete(sources).where(sources.c.collection == collection, sources.c.source == source)
        )
        return int(gone.rowcount or 0)

    def _drop_collection(self, conn: Any, collection: str) -> None:
        sources, rows = table_of(KnowledgeSourceRow), table_of(KnowledgeChunkRow)
        if conn.dialect.name == "sqlite":
            conn.execute(text("DELETE FROM knowledge_fts WHERE collection = :c"), {"c": collection})
        conn.execute(delete(rows).where(rows.c.collection == collection))
        conn.execute(delete(sources).where(sources.c.collection == collection))

    def drop_collection(self, collection: str) -> None:
        """Drop every source and chunk of a collection (none: nothing happens)."""
        with self.engine.begin() as conn:
            self._drop_collection(conn, collection)

    def copy_collection(self, collection: str, into: str) -> None:
        """Make ``into`` a copy of ``collection`` (its sources, chunks, vectors and full-text
        rows), replacing what ``into`` held; one transaction. Enrichment tries an addition on
        a copy of the live index, so the only difference it measures is the addition."""
        with self.engine.begin() as conn:
            self._drop_collection(conn, into)
            params = {"c": collection, "into": into}
            conn.execute(
                text(
                    "INSERT INTO knowledge_chunks (collection, source, ord, heading, text, "
                    "sha256, vector) SELECT :into, source, ord, heading, text, sha256, vector "
                    "FROM knowledge_chunks WHERE collection = :c ORDER BY id"
                ),
                params,
            )
            conn.execute(
                text(
                    "INSERT INTO knowledge_sources (collection, source, sha256, chunks, embedder, "
                    "added_at) SELECT :into, source, sha256, chunks, embedder, added_at "
                    "FROM knowledge_sources WHERE collection = :c"
                ),
                params,
            )
            if conn.dialect.name == "sqlite":
                conn.execute(
                    text(
                        "INSERT INTO knowledge_fts (text, heading, chunk_id, collection) "
                        "SELECT text, heading, id, collection FROM knowledge_chunks "
                        "WHERE collection = :into ORDER BY id"
                    ),
                    params,
                )

    def replace_collection(self, staging: str, collection: str) -> None:
        """Make ``staging`` (a complete index) ``collection``, dropping what ``collection``
        held; one transaction, so a search sees the old index or the new, never a mix."""
        sources, rows = table_of(KnowledgeSourceRow), table_of(KnowledgeChunkRow)
        with self.engine.begin() as conn:
            self._drop_collection(conn, collection)
            for table in (rows, sources):
                conn.execute(
                    update(table).where(table.c.collection == staging).values(collection=collection)
                )
            if conn.dialect.name == "sqlite":
                conn.execute(
                    text("UPDATE knowledge_fts SET collection = :c WHERE collection = :s"),
                    {"c": collection, "s": staging},
                )

    def remove_document(self, collection: str, source: str) -> bool:
        """Drop a source and its chunks; False when the collection has no such source."""
        with self.engine.begin() as conn:
            return self._drop(conn, collection, source) > 0

    def knowledge_sources(self, collection: str | None = None) -> list[KnowledgeSource]:
        table = table_of(KnowledgeSourceRow)
        query = select(table).order_by(table.c.collection, table.c.source)
        if collection is not None:
            query = query.where(table.c.collection == collection)
        with self.engine.connect() as conn:
            return [KnowledgeSource(**dict(row._mapping)) for row in conn.execute(query)]

    def _text_ranking(
        self, conn: Any, collection: str, query: str, sources: list[str] | None
    ) -> list[int]:
        """Chunk ids by full-text rank: any of the query's terms (:func:`query_terms`), among
        the chunks of ``sources`` when given."""
        terms = query_terms(query)
        if not terms:
            return []
        params: dict[str, Any] = {"c": collection, "n": CANDIDATES}
        if conn.dialect.name == "sqlite":
            # each term quoted (letters and digits only): FTS5 stems it as it stemmed the text
            params["q"] = " OR ".join(f'"{t}"' for t in terms)
            among = (
                " AND chunk_id IN (SELECT id FROM knowledge_chunks WHERE collection = :c "
                "AND source IN :sources)"
            )
            sql = (
                "SELECT chunk_id FROM knowledge_fts WHERE knowledge_fts MATCH :q AND "
                "collection = :c{among} ORDER BY bm25(knowledge_fts) LIMIT :n"
            )
        else:
            params["q"] = " | ".join(terms)
            among = " AND source IN :sources"
            sql = (
                "SELECT id FROM knowledge_chunks, to_tsquery('english', :q) AS q "
                "WHERE collection = :c AND "
                "to_tsvector('english', heading || ' ' || text) @@ q{among} "
                "ORDER BY ts_rank(to_tsvector('english', heading || ' ' || text), q) DESC, id "
                "LIMIT :n"
            )
        statement = text(sql.format(among=among if sources is not None else ""))
        if sources is not None:
            statement = statement.bindparams(bindparam("sources", expanding=True))
            params["sources"] = sources
        return [int(r[0]) for r in conn.execute(statement, params)]

    def search_chunks(
        self,
        collection: str,
        query: str,
        query_vector: Sequence[float] | None,
        *,
        k: int = 5,
        mode: SearchMode = "hybrid",
        sources: Sequence[str] | None = None,
    ) -> list[KnowledgeHit]:
        """The ``k`` best chunks of ``collection`` for ``query``; with ``sources`` (globs over
        the source names, any of them), the best among the chunks of matching sources only
        (none matching: no hits).

        Raises:
            KnowledgeError: the collection has nothing indexed (the message says how to add
                documents), or a vector search was asked without a query vector.
        """
        import numpy as np

        known = self.knowledge_sources(collection)
        if not known:
            raise KnowledgeError(
                f"knowledge collection {collection!r} has nothing indexed yet; add documents "
                f"with `armature knowledge add PATH... --collection {collection}`"
            )
        among = None
        if sources is not None:
            globs = list(sources)
            among = [s.source for s in known if any(fnmatchcase(s.source, g) for g in globs)]
            if not among:
                return []
        rows = table_of(KnowledgeChunkRow)
        rankings: dict[str, list[int]] = {}
        with self.engine.connect() as conn:
            if mode in ("hybrid", "text"):
                rankings["text"] = self._text_ranking(conn, collection, query, among)
            if mode in ("hybrid", "vector"):
                if query_vector is None:
                    raise KnowledgeError("a vector search needs the query's vector")
                candidates = select(rows.c.id, rows.c.vector).where(rows.c.collection == collection)
                if among is not None:
                    candidates = candidates.where(rows.c.source.in_(among))
                found = conn.execute(candidates).all()
                if found:
                    matrix = np.asarray([r[1] for r in found], dtype=np.float32)
                    scores = matrix @ np.asarray(query_vector, dtype=np.float32)
                    best = np.argsort(-scores, kind="stable")[:CANDIDATES]
                    rankings["vector"] = [int(found[i][0]) for i in best]
            fused: dict[int, float] = {}
            places: dict[int, dict[str, int]] = {}
            # a ranking that found nothing (a query of stop words, no word in common) adds
            # nothing: the hybrid order is then the other ranking's own
            for name, ranked in rankings.items():
                for place, chunk_id in enumerate(ranked, start=1):
                    fused[chunk_id] = fused.get(chunk_id, 0.0) + 1.0 / (RRF_K + place)
                    places.setdefault(chunk_id, {})[name] = place
            chosen = sorted(fused, key=lambda i: (-fused[i], i))[:k]
            if not chosen:
                return []
            details = {
                r.id: r
                for r in conn.execute(
                    select(
                        rows.c.id,
                        rows.c.source,
                        rows.c.ord,
                        rows.c.heading,
                        rows.c.text,
                        rows.c.sha256,
                    ).where(rows.c.id.in_(chosen))
                )
            }
        return [
            KnowledgeHit(
                collection=collection,
                source=details[i].source,
                ord=details[i].ord,
                heading=details[i].heading,
                text=details[i].text,
                sha256=details[i].sha256,
                score=round(fused[i], 6),
                ranks=places[i],
            )
            for i in chosen
        ]
