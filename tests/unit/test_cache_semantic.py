"""The semantic cache's decision rule (cosine threshold plus the lexical guard), its exact
nearest-neighbour index (brute force and the bounded prefilter agree with an argmax), and
the pair-file scoring shared by ``armature cache eval`` and benchmarks/cache.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from armature_temporal.cache.evaluate import (
    PairFileError,
    load_pairs,
    score,
    tune_threshold,
    wilson,
)
from armature_temporal.cache.index import SemanticIndex, SemanticIndexError
from armature_temporal.cache.semantic import (
    DEFAULT_THRESHOLD,
    guard_veto,
    is_hit,
    pair_decisions,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cache"


# --- the rule ---------------------------------------------------------------------------


def test_threshold_is_a_cosine_tuned_high() -> None:
    assert 0.9 < DEFAULT_THRESHOLD < 1.0
    assert is_hit(DEFAULT_THRESHOLD)
    assert not is_hit(DEFAULT_THRESHOLD - 1e-6)
    assert is_hit(0.5, threshold=0.5) and not is_hit(0.49, threshold=0.5)


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ("How do I fill address line 1?", "How do I fill address line 2?", "numbers differ"),
        ("Why does my code not compile?", "Why does my code compile?", "negated"),
        ("Why can't I sleep?", "Why can I sleep?", "negated"),
        (
            "What do people in Utah think of guns?",
            "What do people in Arizona think of guns?",
            "names differ",
        ),
        (
            "Can I work in India after a law degree from abroad?",
            "Can I work abroad after a law degree from India?",
            "word order",
        ),
    ],
)
def test_guard_vetoes_a_near_twin_that_asks_something_else(a: str, b: str, why: str) -> None:
    reason = guard_veto(a, b)
    assert reason is not None and why in reason
    assert not is_hit(0.999, query=a, source=b)
    assert is_hit(0.999)  # without the texts only the cosine is checked


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I learn Python quickly?", "What is the fastest way to learn Python?"),
        ("What do Pakistanis think of Indians?", "What Pakistani think about Indians?"),
        (
            "Do you believe everything happens for a reason?",
            "Do you believe everything happens for a reason? Why or why not?",
        ),
        ("What is the 2017 budget of India?", "What was the budget of India in 2017?"),
        ("How tall is Mount Everest?", "how tall is mount everest"),
    ],
)
def test_guard_lets_paraphrases_through(a: str, b: str) -> None:
    assert guard_veto(a, b) is None
    assert is_hit(0.99, query=a, source=b)


class fake_embedder:  # the house name for offline fakes
    """Every text the same vector: cosine 1.0 for every pair, so only the guard decides."""

    name = "fake"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


def test_pair_decisions_apply_the_guard() -> None:
    pairs = [("address line 1", "address line 2"), ("Reset my password", "reset my password")]
    assert pair_decisions(pairs, embedder=fake_embedder(), threshold=0.9) == [
        (1.0, False),
        (1.0, True),
    ]
    assert pair_decisions([], embedder=fake_embedder(), threshold=0.9) == []


# --- the index --------------------------------------------------------------------------


def _unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("prefilter_from", [10**9, 1])
def test_nearest_is_the_brute_force_argmax(prefilter_from: int) -> None:
    rng = np.random.default_rng(3)
    base = _unit_rows(rng, 40, 32)
    entries = np.repeat(base, 10, axis=0) + 0.2 * rng.standard_normal((400, 32)).astype(np.float32)
    entries /= np.linalg.norm(entries, axis=1, keepdims=True)
    index = SemanticIndex(32, prefilter_from=prefilter_from, prefix_dims=8)
    index.add([f"e{i}" for i in range(len(entries))], entries.tolist())
    assert len(index) == 400
    queries = base + 0.1 * rng.standard_normal(base.shape).astype(np.float32)
    for min_score in (None, 0.5, 0.9):
        for q in queries:
            q = q / np.linalg.norm(q)
            scores = entries @ q
            best = int(np.argmax(scores))
            found = index.nearest(q.tolist(), min_score=min_score)
            if min_score is not None and scores[best] < min_score:
                assert found is None
            else:
                assert found is not None
                assert found[0] == f"e{best}"
                assert found[1] == pytest.approx(float(scores[best]), abs=1e-5)


def test_remove_replace_and_empty() -> None:
    index = SemanticIndex(3)
    assert index.nearest([1.0, 0.0, 0.0]) is None
    index.add(["x", "y", "z"], [[1, 0, 0], [0, 1, 0], [0, 0, 2]])  # z is normalised
    assert index.nearest([0, 0, 1]) == ("z", pytest.approx(1.0))
    index.remove(["x", "missing"])
    assert len(index) == 2
    assert index.nearest([1, 0.1, 0])[0] == "y"  # x is gone; the moved row still answers
    assert index.nearest([0, 0, 1]) == ("z", pytest.approx(1.0))
    index.add(["y"], [[0, 0, -1]])  # the same id again replaces its vector
    assert len(index) == 2
    assert index.nearest([0, 1, 0])[1] == pytest.approx(0.0, abs=1e-6)
    index.remove(["y", "z"])
    assert len(index) == 0 and index.nearest([0, 0, 1]) is None


def test_remove_after_the_prefilter_is_built_keeps_it_exact() -> None:
    rng = np.random.default_rng(5)
    entries = _unit_rows(rng, 300, 16)
    index = SemanticIndex(16, prefilter_from=1, prefix_dims=4)
    index.add([str(i) for i in range(300)], entries)
    assert index.nearest(entries[7], min_score=0.99) == ("7", pytest.approx(1.0))
    index.remove([str(i) for i in range(0, 300, 2)])
    index.add(["new"], [entries[8] * -1])
    kept = {str(i): entries[i] for i in range(1, 300, 2)} | {"new": -entries[8]}
    for i in (3, 8, 11, 250):
        q = entries[i]
        want = max(kept, key=lambda k: float(kept[k] @ q))
        found = index.nearest(q, min_score=-1.0)
        assert found is not None and found[0] == want
    assert index.nearest(entries[8], min_score=0.999) is None  # 8 was removed


def test_a_vector_of_the_wrong_dimension_is_refused_by_name() -> None:
    index = SemanticIndex(4)
    with pytest.raises(SemanticIndexError, match="dimension 4"):
        index.add(["a"], [[1.0, 0.0]])
    with pytest.raises(SemanticIndexError, match="2 ids for 1 vectors"):
        index.add(["a", "b"], [[1.0, 0.0, 0.0, 0.0]])
    index.add(["a"], [[1.0, 0.0, 0.0, 0.0]])
    with pytest.raises(SemanticIndexError, match="dimension 4"):
        index.nearest([1.0, 0.0, 0.0])


# --- scoring ----------------------------------------------------------------------------


def test_wilson_interval() -> None:
    lo, hi = wilson(95, 100)
    assert lo == pytest.approx(0.8883, abs=1e-3) and hi == pytest.approx(0.9785, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)


def test_score_counts_false_hits_against_the_different_pairs() -> None:
    s = score([0.99, 0.99, 0.99, 0.5], [False, True, False, False], [1, 0, 0, 1], 0.9)
    assert (s.hits, s.true_hits, s.false_hits) == (2, 1, 1)  # the vetoed pair is no hit
    assert s.precision == 0.5 and s.recall == 0.5 and s.false_hit_rate == 0.5
    assert s.as_dict()["false_hits_per_lookup"] == 0.25


def test_tune_threshold_takes_the_lowest_precise_cut_off() -> None:
    sims = [1 - i / 1000 for i in range(300)]
    labels = [1] * 150 + [1, 0] * 75  # precise down to rank 150, then half wrong
    t = tune_threshold(sims, [False] * 300, labels, target=0.95, min_hits=20)
    assert t == pytest.approx(sims[166])  # rank 167: 159/167 = 0.952; rank 168: 0.946
    assert tune_threshold(sims, [False] * 300, [0] * 300, target=0.95) == 1.0


def test_pair_file_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(PairFileError, match="not found"):
        load_pairs(tmp_path / "nope.csv")
    with pytest.raises(PairFileError, match=r"missing column.*label.*score"):
        load_pairs(FIXTURES / "wrong-columns.csv")
    with pytest.raises(PairFileError, match="line 3: label 'maybe'"):
        load_pairs(FIXTURES / "bad-label.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("text_a,text_b,label\n")
    with pytest.raises(PairFileError, match="no pairs"):
        load_pairs(empty)
    assert load_pairs(FIXTURES / "pairs.csv")[0] == (
        "How do I learn Python quickly?",
        "How do I learn Python quickly?",
        1,
    )
