"""``armature cache eval PAIRS.csv``: the semantic cache's own rule scored on labelled pairs.

The command function :func:`cache_eval` is mounted as ``eval`` on the ``armature cache``
group (commands/cache.py). It embeds both texts of every pair with the cache's embedder
(the local all-MiniLM-L6-v2, else ``lexical``), applies :func:`~armature_temporal.cache.
semantic.is_hit` (cosine threshold plus the lexical guard) and prints precision, recall and
false-hit rate with 95% Wilson intervals, then the precision-recall curve; and the same
figures for the pair classifier (``decider: classifier``, :mod:`armature_temporal.cache.pairs`,
its own threshold), whose cosine input is the same embedder's (it was trained on
all-MiniLM-L6-v2 cosines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import JsonFlag, fail, out, print_json

__all__ = ["cache_eval"]

PairsArg = Annotated[
    Path,
    typer.Argument(
        help="A CSV of labelled pairs: columns text_a,text_b,label (1 = same question, 0 = not).",
        show_default=False,
        metavar="PAIRS.csv",
    ),
]
ThresholdOpt = Annotated[
    float | None,
    typer.Option(
        "--threshold",
        help="Cosine threshold to score at (default: the cache's DEFAULT_THRESHOLD).",
        min=-1.0,
        max=1.0,
    ),
]
EmbedderOpt = Annotated[
    str | None,
    typer.Option(
        "--embedding-model",
        help="Embedder: lexical, local, or a litellm model (default: the cache's own).",
    ),
]


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def cache_eval(
    pairs: PairsArg,
    threshold: ThresholdOpt = None,
    embedding_model: EmbedderOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Score the semantic cache's decision rule on labelled pairs: precision, recall and
    false-hit rate (false hits / non-paraphrase pairs) with 95% Wilson intervals, and the
    precision-recall curve."""
    from armature_temporal.cache.evaluate import (
        PairFileError,
        load_pairs,
        pr_curve,
        score,
        score_hits,
        vetoes,
    )
    from armature_temporal.cache.pairs import load_pair_model
    from armature_temporal.cache.semantic import DEFAULT_THRESHOLD, pair_decisions
    from armature_temporal.errors import ArmatureError
    from armature_temporal.experience.embeddings import get_embedder

    at = DEFAULT_THRESHOLD if threshold is None else threshold
    try:
        rows = load_pairs(pairs)
    except PairFileError as exc:
        raise fail(f"error: {exc}", 2) from None
    try:
        embedder = get_embedder(embedding_model)
        decided = pair_decisions([(a, b) for a, b, _ in rows], embedder=embedder, threshold=at)
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    sims = [s for s, _ in decided]
    vetoed = vetoes([(a, b) for a, b, _ in rows])
    labels = [y for _, _, y in rows]
    result = score(sims, vetoed, labels, at)
    try:
        model = load_pair_model()
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    classified = [model.decide(a, b, s)[0] for (a, b, _), s in zip(rows, sims, strict=True)]
    classifier = score_hits(classified, labels, model.threshold).as_dict()
    curve = pr_curve(sims, vetoed, labels)
    false_hits = [
        {"text_a": a, "text_b": b, "similarity": round(s, 4)}
        for (a, b, y), (s, hit) in zip(rows, decided, strict=True)
        if hit and y == 0
    ]
    if as_json:
        print_json(
            {
                "file": str(pairs),
                "embedder": embedder.name,
                "default_threshold": DEFAULT_THRESHOLD,
                **result.as_dict(),
                "false_hit_examples": false_hits[:20],
                "classifier": classifier,
                "curve": [
                    {
                        "threshold": p.threshold,
                        "precision": p.precision,
                        "recall": p.recall,
                        "false_hit_rate": p.false_hit_rate,
                        "hits": p.hits,
                    }
                    for p in curve
                ],
            }
        )
        return
    _print(pairs, embedder.name, result.as_dict(), curve, false_hits)
    c = classifier
    out.print(
        f"\nclassifier (pair_model.json, probability ≥ {c['threshold']:.4g}): precision "
        f"{_pct(c['precision'])} ({c['true_hits']}/{c['hits']} hits), recall "
        f"{_pct(c['recall'])}, false-hit rate {_pct(c['false_hit_rate'])} "
        f"({c['false_hits']}/{c['negatives']})",
        markup=False,
    )


def _print(
    pairs: Path, embedder: str, r: dict[str, Any], curve: list[Any], false_hits: list[Any]
) -> None:
    def ci(key: str) -> str:
        lo, hi = r[key + "_ci"]
        return f"{_pct(r[key])} [{_pct(lo)}, {_pct(hi)}]"

    out.print(
        f"{pairs}: {r['pairs']} pairs ({r['positives']} same, {r['negatives']} different); "
        f"embedder {embedder}; threshold {r['threshold']:.4g} plus the lexical guard",
        markup=False,
    )
    out.print(
        f"precision       {ci('precision')}  ({r['true_hits']}/{r['hits']} hits)", markup=False
    )
    out.print(f"recall          {ci('recall')}  ({r['true_hits']}/{r['positives']})", markup=False)
    out.print(
        f"false-hit rate  {ci('false_hit_rate')}  ({r['false_hits']}/{r['negatives']} "
        f"different pairs; {_pct(r['false_hits_per_lookup'])} of all pairs)",
        markup=False,
    )
    out.print("\nthreshold  precision  recall  false-hit rate  hits", markup=False)
    for p in curve:
        out.print(
            f"{p.threshold:9.2f}  {_pct(p.precision):>9}  {_pct(p.recall):>6}  "
            f"{_pct(p.false_hit_rate):>14}  {p.hits:>4}",
            markup=False,
        )
    if false_hits:
        out.print(f"\nfalse hits at {r['threshold']:.4g} (first 10):", markup=False)
        for f in false_hits[:10]:
            out.print(f"  {f['similarity']:.3f}  {f['text_a']!r} / {f['text_b']!r}", markup=False)
