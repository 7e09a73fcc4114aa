"""The money: the share of model cost the answer cache saves on a workload of repeated and
paraphrased questions, and the wrong answers it serves doing so.

**Workload** (seeded; ``--topics``, ``--near-misses``, ``--requests``, ``--zipf``,
``--seed``): ``--topics`` duplicate pairs ``(q, q')`` drawn at random from
``paraphrase/qqp-train.csv`` (label 1) are the topics; each request picks a topic with Zipf
popularity (weight ``1 / rank ** zipf``) and asks ``q`` or ``q'`` (even odds), so later
requests of a topic are verbatim repeats or its paraphrase. ``--near-misses`` non-duplicate
pairs ``(n, n')`` (label 0: related questions, often one word apart) are added: each of their
texts is asked twice at random places in the stream — a cache that answers ``n'`` with
``n``'s answer serves a wrong answer. The **repeat share** (requests whose topic was asked
before) is the ceiling of what any cache can save; the figure below scales with it, so it is
printed beside the saving. The default (300 topics, 3,000 requests, Zipf 1.0) has a repeat
share near 0.85.

**The code path** is the cache's own: every request renders a one-stage spec's call
(``cache: {semantic: true, exact: true}``), :func:`activities.cache._lookup` (exact key,
then the semantic index and the decider) on a real SQLite store under a temporary
``ARMATURE_HOME``; a miss is "answered" (no model is called: the answer records the topic it
was asked for) and kept with :func:`activities.cache._keep`, then settled servable, as a
completed run's entries are. Embeddings are all-MiniLM-L6-v2's, memoised from the Quora
file's embedding cache (the one ``benchmarks/cache.py`` writes) so the benchmark runs in
seconds; texts not in it are embedded by the model.

**Cost**: every model call is priced as tokens × a stated price (``--input-price``,
``--output-price`` in USD per million tokens, default 3 and 15; prompt tokens = characters /
4, ``--answer-tokens`` 300 completion tokens each): served answers cost nothing. **Wrong
answers** are hits whose source question is neither the same text nor labelled its
duplicate in the file (Quora's labels are noisy: some "wrong" hits may be right, and some
"right" ones wrong).

**Compared in one run, same stream**: no cache, exact only, the rule (``decider: rule``,
default threshold) and the pair classifier (``decider: classifier``). The bandit document
claims 70–80% of API cost saved; the rows say what this workload gives and on what repeat
share.

Run ``python benchmarks/cache_savings.py [--requests 3000] [--topics 300] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

CLAIM = (0.70, 0.80)


def build_workload(
    rows: list[tuple[str, str, int]],
    *,
    topics: int,
    near_misses: int,
    requests: int,
    zipf: float,
    seed: int,
) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """The request stream as ``(text, topic)`` and each text's topic (near-miss texts get a
    topic of their own each)."""
    rng = np.random.default_rng(seed)
    dups = [(a, b) for a, b, y in rows if y == 1 and a != b]
    nons = [(a, b) for a, b, y in rows if y == 0 and a != b]
    chosen = [dups[i] for i in rng.choice(len(dups), topics, replace=False)]
    weights = 1.0 / np.arange(1, topics + 1) ** zipf
    picks = rng.choice(topics, requests, p=weights / weights.sum())
    stream = [(chosen[t][int(rng.integers(2))], int(t)) for t in picks]
    topic_of = {text: t for t, pair in enumerate(chosen) for text in pair}
    for j, i in enumerate(rng.choice(len(nons), near_misses, replace=False)):
        for k, text in enumerate(nons[i]):
            topic_of.setdefault(text, topics + 2 * j + k)
            for _ in range(2):
                stream.insert(int(rng.integers(len(stream) + 1)), (text, topic_of[text]))
    return stream, topic_of


class _MemoEmbedder:
    """all-MiniLM-L6-v2, memoised: vectors from the Quora embedding cache, others embedded."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, known: dict[str, Any]) -> None:
        from armature_temporal.experience.embeddings import get_embedder

        self.known = known
        self.model = get_embedder("local")

    def embed(self, texts: Any) -> list[list[float]]:
        missing = [t for t in texts if t not in self.known]
        if missing:
            self.known.update(zip(missing, self.model.embed(missing), strict=True))
        return [list(map(float, self.known[t])) for t in texts]


def run_stream(
    stream: list[tuple[str, int]], duplicates: set[frozenset[str]], mode: str, args: Any
) -> dict[str, Any]:
    """Send the stream through the cache in ``mode`` (none, exact, rule, classifier)."""
    from activities.cache import _INDEXES, _keep, _lookup
    from activities.traces import store_for
    from armature_temporal.cache.models import CacheKeep, CacheLookup
    from armature_temporal.runtime.models import LLMCallInput
    from armature_temporal.spec.caching import StageCache
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from armature_temporal.store.engine import database_url

    _INDEXES.clear()
    decider = "classifier" if mode == "classifier" else "rule"
    spec = (
        f"name: savings-{mode}\nstages:\n  - id: answer\n"
        '    role: {description: "{{ inputs.q }}"}\n'
        f"    cache: {{exact: true, semantic: true, decider: {decider}}}\n"
    )
    plan = compile_spec(load_spec_text(spec, f"savings-{mode}.yaml"))
    stage = plan.stage("answer")
    assert stage.role is not None
    tier = plan.tiers[stage.role.model_tier]
    config = stage.cache or StageCache()
    store = store_for(database_url())
    full = spent = 0.0
    hits = wrong = semantic_hits = 0
    examples: list[tuple[str, str]] = []
    lookup_ms: list[float] = []
    for n, (text, topic) in enumerate(stream):
        cost = (len(text) / 4 * args.input_price + args.answer_tokens * args.output_price) / 1e6
        full += cost
        if mode == "none":
            spent += cost
            continue
        call = LLMCallInput(
            run_id=f"{mode}-{n}",
            stage=stage,
            tier=tier,
            prompt_template=stage.role.prompt,
            variables={"inputs": {"q": text}},
            params={"temperature": 0},
            spec_name=plan.name,
        )
        lookup = CacheLookup(
            call=call, config=config, spec_hash="h", exact=True, semantic=mode != "exact"
        )
        started = time.perf_counter()
        probe = _lookup(lookup, None, started)
        lookup_ms.append(probe.latency_ms)
        if probe.hit is not None:
            hits += 1
            semantic_hits += probe.hit.kind == "semantic"
            source = probe.hit.source_task
            if source != text and frozenset((source, text)) not in duplicates:
                wrong += 1
                if (text, source) not in examples:
                    examples.append((text, source))
            continue
        spent += cost
        keep = CacheKeep(
            probe=probe,
            config=config,
            semantic=mode != "exact",
            spec_name=plan.name,
            spec_hash="h",
            stage_id="answer",
            tier=stage.role.model_tier,
            run_id=f"{mode}-{n}",
            attempt=1,
            output={"topic": topic},
            text=f"answer for topic {topic}",
            cost_usd=cost,
        )
        _keep(keep)
        store.settle_cache(f"{mode}-{n}", reason=None)
    from armature_temporal.cache.evaluate import wilson

    lookup_ms.sort()
    return {
        "mode": mode,
        "requests": len(stream),
        "hits": hits,
        "semantic_hits": semantic_hits,
        "hit_rate": hits / len(stream),
        "cost_full_usd": round(full, 4),
        "cost_spent_usd": round(spent, 4),
        "saved_share": 1 - spent / full if full else 0.0,
        "wrong_answers": wrong,
        "wrong_per_hit": wrong / hits if hits else 0.0,
        "wrong_per_hit_ci": wilson(wrong, hits),
        "wrong_per_semantic_hit": wrong / semantic_hits if semantic_hits else 0.0,
        "wrong_per_semantic_hit_ci": wilson(wrong, semantic_hits),
        "lookup_median_ms": round(lookup_ms[len(lookup_ms) // 2], 2) if lookup_ms else None,
        "wrong_examples": [{"asked": a, "served_from": b} for a, b in examples[:20]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="the shared data folder")
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--near-misses", type=int, default=100)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--input-price", type=float, default=3.0)
    parser.add_argument("--output-price", type=float, default=15.0)
    parser.add_argument("--answer-tokens", type=int, default=300)
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "armature-bench-cache"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from armature_temporal.cache.evaluate import load_pairs
    from armature_temporal.cache.train_pairs import embed_texts
    from armature_temporal.scanner.train import shared_data_dir

    path = shared_data_dir(args.data) / "paraphrase" / "qqp-train.csv"
    rows = load_pairs(path)
    duplicates = {frozenset((a, b)) for a, b, y in rows if y == 1}
    stream, _ = build_workload(
        rows,
        topics=args.topics,
        near_misses=args.near_misses,
        requests=args.requests,
        zipf=args.zipf,
        seed=args.seed,
    )
    seen: set[int] = set()
    repeats = 0
    for _, topic in stream:
        repeats += topic in seen
        seen.add(topic)
    texts = sorted({t for a, b, _ in rows for t in (a, b)})
    vectors, _ = embed_texts(path, texts, args.cache_dir)
    import activities.cache as cache_activities

    memo = _MemoEmbedder(dict(vectors))
    cache_activities._embedder = lambda: memo  # type: ignore[assignment]
    results = []
    with tempfile.TemporaryDirectory() as home:
        os.environ["ARMATURE_HOME"] = home
        os.environ.pop("ARMATURE_DB_URL", None)
        for mode in ("none", "exact", "rule", "classifier"):
            results.append(run_stream(stream, duplicates, mode, args))
    report = {
        "data": str(path),
        "workload": {
            "requests": len(stream),
            "topics": args.topics,
            "near_miss_pairs": args.near_misses,
            "zipf": args.zipf,
            "seed": args.seed,
            "repeat_share": repeats / len(stream),
            "distinct_texts": len({t for t, _ in stream}),
        },
        "price": {
            "input_usd_per_mtok": args.input_price,
            "output_usd_per_mtok": args.output_price,
            "answer_tokens": args.answer_tokens,
        },
        "claimed_saving": list(CLAIM),
        "results": results,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    w = report["workload"]
    print(
        f"{w['requests']} requests: {w['topics']} duplicate-pair topics (Zipf {w['zipf']}) and "
        f"{w['near_miss_pairs']} near-miss pairs; repeat share {100 * w['repeat_share']:.1f}% "
        "(the ceiling of any cache's saving)"
    )
    print(
        f"{'cache':<11} {'saved':>7} {'hit rate':>9} {'semantic':>9} "
        f"{'wrong answers (per hit, 95% CI)':>34} {'lookup ms':>10}"
    )
    for r in results:
        lo, hi = r["wrong_per_hit_ci"]
        print(
            f"{r['mode']:<11} {100 * r['saved_share']:6.1f}% {100 * r['hit_rate']:8.1f}% "
            f"{r['semantic_hits']:>9} {r['wrong_answers']:>8} ({100 * r['wrong_per_hit']:4.1f}% "
            f"[{100 * lo:4.1f}, {100 * hi:4.1f}]) {r['lookup_median_ms'] or 0:>10}"
        )
    exact = next(r for r in results if r["mode"] == "exact")["saved_share"]
    for r in results:
        if r["mode"] in ("rule", "classifier"):
            lo, hi = r["wrong_per_semantic_hit_ci"]
            print(
                f"{r['mode']}: {100 * (r['saved_share'] - exact):.1f} points saved beyond the "
                f"exact cache; wrong per semantic hit {100 * r['wrong_per_semantic_hit']:.1f}% "
                f"[{100 * lo:.1f}, {100 * hi:.1f}]"
            )
    print(f"claimed: {100 * CLAIM[0]:.0f}–{100 * CLAIM[1]:.0f}% of API cost saved")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
