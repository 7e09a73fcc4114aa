"""Retrieval quality of a knowledge collection: full text only, vectors only and both fused by
reciprocal rank, on the same chunks and questions, in one run.

The corpus is this repository's README.md and specs/migrating.md, indexed as ``armature
knowledge add`` indexes them (default chunking; the local embedding model where the ``embed``
extra is installed, else the lexical embedder — the report says which). The questions
(``retrieval_questions.json``, 30) are a newcomer's, each labelled with the section that
answers it; a chunk is relevant when it comes from that file and its heading path contains
the section. They were written before any measurement and tune nothing.

Reported per mode: recall@5 (the share of questions with a relevant chunk in the top five)
and nDCG@10 (binary relevance; the ideal ranking puts min(relevant, 10) relevant chunks
first). The target: hybrid at least as good as the better of the other two on both.

``python benchmarks/retrieval.py [--json]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = Path(__file__).with_name("retrieval_questions.json")
MODES = ("text", "vector", "hybrid")


def _relevant(hit: Any, label: dict[str, str]) -> bool:
    return hit.source.endswith(label["file"]) and label["section"] in hit.heading


def _ndcg(flags: list[bool], total: int) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, rel in enumerate(flags) if rel)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(total, len(flags))))
    return dcg / ideal if ideal else 0.0


def main() -> dict[str, Any]:
    os.environ["ARMATURE_HOME"] = tempfile.mkdtemp(prefix="armature-bench-retrieval-")
    from armature_temporal.knowledge import index_sources, search
    from armature_temporal.store import TraceStore

    store = TraceStore()
    files = [str(REPO / "README.md"), str(REPO / "specs" / "migrating.md")]
    report = index_sources(store, "bench", files)
    chunks = sum(report.indexed.values())
    labels = json.loads(QUESTIONS.read_text())["questions"]
    every = {
        s.source: s for s in store.knowledge_sources("bench")
    }  # for the count of relevant chunks per question
    from sqlalchemy import select

    from armature_temporal.store._base import table_of
    from armature_temporal.store.schema import KnowledgeChunkRow

    rows = table_of(KnowledgeChunkRow)
    with store.engine.connect() as conn:
        all_chunks = conn.execute(select(rows.c.source, rows.c.heading)).all()
    figures: dict[str, dict[str, float]] = {}
    for mode in MODES:
        hits_at_5 = 0
        ndcg = 0.0
        for label in labels:
            total = sum(
                1
                for source, heading in all_chunks
                if source.endswith(label["file"]) and label["section"] in heading
            )
            found = search(store, "bench", label["q"], k=10, mode=mode)
            flags = [_relevant(h, label) for h in found]
            hits_at_5 += any(flags[:5])
            ndcg += _ndcg(flags, total)
        figures[mode] = {
            "recall_at_5": round(hits_at_5 / len(labels), 3),
            "ndcg_at_10": round(ndcg / len(labels), 3),
        }
    store.close()
    best = {
        metric: max(figures["text"][metric], figures["vector"][metric])
        for metric in ("recall_at_5", "ndcg_at_10")
    }
    return {
        "questions": len(labels),
        "documents": len(every),
        "chunks": chunks,
        "embedder": report.embedder,
        "modes": figures,
        "met": all(figures["hybrid"][m] >= best[m] for m in best),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    result = main()
    if opts.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['questions']} questions over {result['documents']} documents "
            f"({result['chunks']} chunks), embedder {result['embedder']}"
        )
        for mode, f in result["modes"].items():
            print(f"  {mode:7} recall@5 {f['recall_at_5']:.3f}  nDCG@10 {f['ndcg_at_10']:.3f}")
        print(
            "hybrid at least as good as the better of text and vector on both: "
            + ("met" if result["met"] else "MISSED")
        )
