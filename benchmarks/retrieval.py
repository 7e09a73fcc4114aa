"""Retrieval quality of a knowledge collection: full text only, vectors only and both fused by
reciprocal rank, on the same chunks and questions, for two question sets, in one run.

- ``tuning`` (``retrieval_questions.json``, 30 questions): this repository's README.md and
  specs/migrating.md as they were at commit e85de25, where the questions were written against
  them (read with git; without git, the working tree's, and the report says so — the README
  changes with every feature, and its figures with it). Written before the first
  measurement, but the full-text changes of commit dee45b0 (stop words, stemming) were made
  after its figures were seen, so it is not held out any more.
- ``held-out`` (``retrieval_heldout.json``, 30 questions): the READMEs of two installed
  packages (temporalio and openai: the long description in their dist-info METADATA, pinned
  by sha256; a different text is refused, not measured). Written and committed before any
  search ran on it; nothing is to be tuned on it.

Each corpus is indexed as ``armature knowledge add`` indexes it (default chunking; the local
embedding model where the ``embed`` extra is installed, else the lexical embedder — the report
says which). A chunk is relevant when it comes from the question's file and its heading path
contains the question's section. Reported per set and mode: recall@5 (the share of questions
with a relevant chunk in the top five) and nDCG@10 (binary relevance; the ideal ranking puts
min(relevant, 10) relevant chunks first). The target: hybrid at least as good as the better of
the other two on both, on each set.

``python benchmarks/retrieval.py [--json]``
"""

from __future__ import annotations

import argparse
import hashlib
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
TUNING = Path(__file__).with_name("retrieval_questions.json")
HELD_OUT = Path(__file__).with_name("retrieval_heldout.json")
#: The commit whose README.md and specs/migrating.md the tuning questions were written against.
TUNING_COMMIT = "e85de25"
TUNING_FILES = ("README.md", "specs/migrating.md")
MODES = ("text", "vector", "hybrid")
METRICS = ("recall_at_5", "ndcg_at_10")


def _relevant(source: str, heading: str, label: dict[str, str]) -> bool:
    return source.endswith(label["file"]) and label["section"] in heading


def _ndcg(flags: list[bool], total: int) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, rel in enumerate(flags) if rel)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(total, len(flags))))
    return dcg / ideal if ideal else 0.0


def tuning_files(folder: Path) -> tuple[list[str], str]:
    """The tuning corpus as of :data:`TUNING_COMMIT` written to ``folder`` (or, where git
    cannot read it, the working tree's files), and which of the two it is."""
    import subprocess

    files = []
    for name in TUNING_FILES:
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{TUNING_COMMIT}:{name}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode != 0:
            return [str(REPO / n) for n in TUNING_FILES], "working tree"
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(shown.stdout)
        files.append(str(path))
    return files, TUNING_COMMIT


def held_out_files(folder: Path) -> list[str]:
    """The held-out corpus written to ``folder``: each pinned distribution's long description.

    Raises:
        SystemExit: a distribution is missing, or its text is not the pinned one.
    """
    from importlib import metadata

    files = []
    for entry in json.loads(HELD_OUT.read_text())["corpus"]:
        try:
            dist = metadata.distribution(entry["distribution"])
        except metadata.PackageNotFoundError:
            raise SystemExit(
                f"held-out corpus: {entry['distribution']} {entry['version']} is not installed"
            ) from None
        raw = Path(str(dist.locate_file(entry["metadata_file"]))).read_bytes()
        body = raw.decode().split("\n\n", 1)[1]
        sums = (hashlib.sha256(raw).hexdigest(), hashlib.sha256(body.encode()).hexdigest())
        if sums != (entry["metadata_sha256"], entry["text_sha256"]):
            raise SystemExit(
                f"held-out corpus: {entry['distribution']} {dist.version}'s METADATA is not the "
                f"pinned {entry['version']} ({entry['metadata_file']}, sha256 "
                f"{entry['metadata_sha256']}); install that version to measure the same text"
            )
        path = folder / entry["name"]
        path.write_text(body)
        files.append(str(path))
    return files


def measure(store: Any, collection: str, files: list[str], labels: list[dict[str, str]]) -> Any:
    """Index ``files`` into ``collection`` and score every mode on ``labels``."""
    from sqlalchemy import select

    from armature_temporal.knowledge import index_sources, search
    from armature_temporal.store._base import table_of
    from armature_temporal.store.schema import KnowledgeChunkRow

    report = index_sources(store, collection, files)
    if report.unreadable:
        raise SystemExit(f"unreadable: {report.unreadable}")
    rows = table_of(KnowledgeChunkRow)
    with store.engine.connect() as conn:
        chunks = conn.execute(
            select(rows.c.source, rows.c.heading).where(rows.c.collection == collection)
        ).all()
    totals = [sum(_relevant(s, h, label) for s, h in chunks) for label in labels]
    unlabelled = [lab["section"] for lab, total in zip(labels, totals, strict=True) if not total]
    if unlabelled:
        raise SystemExit(f"{collection}: no chunk has the section of {unlabelled}")
    figures: dict[str, dict[str, float]] = {}
    for mode in MODES:
        hits_at_5 = 0
        ndcg = 0.0
        for label, total in zip(labels, totals, strict=True):
            found = search(store, collection, label["q"], k=10, mode=mode)
            flags = [_relevant(h.source, h.heading, label) for h in found]
            hits_at_5 += any(flags[:5])
            ndcg += _ndcg(flags, total)
        figures[mode] = {
            "recall_at_5": round(hits_at_5 / len(labels), 3),
            "ndcg_at_10": round(ndcg / len(labels), 3),
        }
    best = {m: max(figures["text"][m], figures["vector"][m]) for m in METRICS}
    return report.embedder, {
        "questions": len(labels),
        "documents": len(files),
        "chunks": len(chunks),
        "modes": figures,
        "met": all(figures["hybrid"][m] >= best[m] for m in METRICS),
    }


def main() -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="armature-bench-retrieval-"))
    os.environ["ARMATURE_HOME"] = str(home)
    from armature_temporal.store import TraceStore

    tuning, version = tuning_files(home / "tuning")
    (home / "held-out").mkdir()
    sets = {"tuning": (tuning, TUNING), "held-out": (held_out_files(home / "held-out"), HELD_OUT)}
    result: dict[str, Any] = {"tuning_corpus": version, "sets": {}}
    for name, (files, questions) in sets.items():
        # a store of its own per set: FTS5's BM25 counts every row of its table, so a
        # collection beside another would rank by both corpora's word statistics
        store = TraceStore(f"sqlite:///{home / name}.db")
        try:
            labels = json.loads(questions.read_text())["questions"]
            embedder, figures = measure(store, name, files, labels)
        finally:
            store.close()
        result["embedder"] = embedder
        result["sets"][name] = {"held_out": name == "held-out", **figures}
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    result = main()
    if opts.json:
        print(json.dumps(result))
    else:
        print(f"embedder {result['embedder']}")
        for name, s in result["sets"].items():
            kind = (
                "HELD OUT: never tuned on"
                if s["held_out"]
                else f"seen while tuning; corpus as of {result['tuning_corpus']}"
            )
            print(
                f"{name} set ({kind}): {s['questions']} questions over {s['documents']} "
                f"documents ({s['chunks']} chunks)"
            )
            for mode, f in s["modes"].items():
                print(f"  {mode:7} recall@5 {f['recall_at_5']:.3f}  nDCG@10 {f['ndcg_at_10']:.3f}")
            print(
                "  hybrid at least as good as the better of text and vector on both: "
                + ("met" if s["met"] else "MISSED")
            )
