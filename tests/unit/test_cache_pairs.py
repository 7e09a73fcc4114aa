"""The semantic cache's pair classifier (armature_temporal/cache/pairs.py): the shipped model
file and its trainer, the word-order veto, a fixed paraphrase served and a swapped pair not,
the cache's is_hit with decider="classifier", and a missing or corrupt model file's error."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from armature_temporal.cache import train_pairs
from armature_temporal.cache.pairs import (
    FEATURES,
    PairModelError,
    load_pair_model,
    pair_features,
    read_pair_model,
)
from armature_temporal.cache.semantic import guard_veto, is_hit, order_veto
from armature_temporal.scanner.train import ENV_VAR

MODEL = Path(train_pairs.__file__).with_name("pair_model.json")
QQP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "paraphrase"


def test_shipped_model_names_its_features_data_and_figures() -> None:
    model = load_pair_model()
    assert tuple(model.meta["features"]) == FEATURES and len(model.weights) == len(FEATURES)
    assert 0.5 < model.threshold < 1.0 and 0.0 < model.floor < 1.0
    training = model.meta["training"]
    assert training["pairs"] == 4000 and training["embedder"] == "all-MiniLM-L6-v2"
    assert training["rebuild"] == "python -m armature_temporal.cache.train_pairs"
    cv = model.meta["cross_validated"]
    assert cv["hits"] == cv["true_hits"] + cv["false_hits"] and len(cv["fold_thresholds"]) == 5
    # The file is exactly what the trainer renders from its own content (stable form).
    assert MODEL.read_text(encoding="utf-8") == train_pairs.render(json.loads(MODEL.read_text()))


def test_shipped_model_was_trained_on_the_shared_pairs() -> None:
    import os

    data = Path(os.environ.get(ENV_VAR) or QQP.parent) / "paraphrase" / "qqp-train.csv"
    if not data.is_file():
        pytest.skip(f"{data} is not here (the shared data folder)")
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    assert load_pair_model().meta["training"]["data_sha256"] == digest


def _toy() -> tuple[list[tuple[str, str, int]], list[float]]:
    rng = np.random.default_rng(3)
    rows: list[tuple[str, str, int]] = []
    cosines: list[float] = []
    words = ["chess", "piano", "french", "physics", "poetry", "welding", "rowing", "baking"]
    for i in range(400):
        label = i % 2
        w, v = words[i % 8], words[(i // 8) % 8]
        rows.append((f"How do I learn {w} well?", f"What helps with {v} and {w}?", label))
        cosines.append(float(np.clip(0.86 + 0.08 * label + rng.normal(0, 0.03), 0, 1)))
    return rows, cosines


def test_training_is_deterministic_and_separates_a_toy_problem() -> None:
    rows, cosines = _toy()
    one = train_pairs.render(train_pairs.train(rows, cosines, data_sha256="x", embedder="toy"))
    two = train_pairs.render(train_pairs.train(rows, cosines, data_sha256="x", embedder="toy"))
    assert one == two  # byte for byte
    got = json.loads(one)
    assert got["weights"][FEATURES.index("cosine")] > 0  # higher cosine, more likely the same
    assert got["cross_validated"]["precision"] >= 0.9 and got["threshold"] < 1.0


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I get from Paris to Rome?", "How do I get from Rome to Paris?"),
        ("Is Python faster than Java?", "Is Java faster than Python?"),
        ("Can a citizen of India work in the US?", "Can a citizen of the US work in India?"),
        ("Should I learn Rust before Go?", "Should I learn Go before Rust?"),
        ("Does stress cause insomnia?", "Does insomnia cause stress?"),
        (
            "Can I work in India after a law degree from abroad?",
            "Can I work abroad after a law degree from India?",
        ),
    ],
)
def test_a_swapped_pair_is_not_a_hit(a: str, b: str) -> None:
    assert order_veto(a, b) is not None and "word order" in (guard_veto(a, b) or "")
    assert not is_hit(0.999, query=a, source=b)
    assert not is_hit(0.999, query=a, source=b, decider="classifier")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            "What is the difference between TCP and UDP?",
            "What is the difference between UDP and TCP?",
        ),
        ("In India, how do I open a bank account?", "How do I open a bank account in India?"),
        (
            "What is the best diet for muscle building?",
            "What is the best diet for building muscle?",
        ),
    ],
)
def test_a_meaning_keeping_reorder_is_not_vetoed(a: str, b: str) -> None:
    assert order_veto(a, b) is None


def test_a_fixed_paraphrase_is_a_hit_and_a_near_miss_is_not() -> None:
    # 0.9734: the cosine all-MiniLM-L6-v2 gives this pair (the shipped model's input).
    a, b = "What are the symptoms of diabetes?", "What are the signs of diabetes?"
    assert is_hit(0.9734, query=a, source=b, decider="classifier")
    assert not is_hit(0.79, query=a, source=b, decider="classifier")  # below the floor
    # the same question again, case aside: a hit whatever the model scores
    assert is_hit(1.0, query="How tall is Mount Everest?", source="how tall is mount everest")
    assert is_hit(
        1.0,
        query="How tall is Mount Everest?",
        source="how tall is mount everest",
        decider="classifier",
    )
    # one number apart: vetoed before the model is asked
    assert not is_hit(
        0.99, query="Fill address line 1?", source="Fill address line 2?", decider="classifier"
    )
    # a name in one text missing from the other: the model never reaches its threshold
    utah, arizona = (
        "What do people in Utah think of guns?",
        "What do people in Arizona think of guns?",
    )
    assert not is_hit(0.999, query=utah, source=arizona, decider="classifier")
    with pytest.raises(ValueError, match="needs query= and source="):
        is_hit(0.99, decider="classifier")


def test_features_are_symmetric_and_named() -> None:
    a, b = "How can I lose weight fast?", "What is the fastest way to lose weight?"
    assert len(pair_features(a, b, 0.87)) == len(FEATURES)
    assert pair_features(a, b, 0.87) == pair_features(b, a, 0.87)


def test_a_missing_or_corrupt_model_file_names_the_file_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "pair_model.json"
    with pytest.raises(PairModelError, match="no such pair model file") as info:
        read_pair_model(missing)
    assert str(missing) in str(info.value) and "train_pairs" in str(info.value)
    missing.write_text("{not json", encoding="utf-8")
    with pytest.raises(PairModelError, match=r"not valid JSON.*train_pairs"):
        read_pair_model(missing)
    data = json.loads(MODEL.read_text())
    data["features"] = data["features"][:-1]
    missing.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PairModelError, match="do not match this code"):
        read_pair_model(missing)
    del data["weights"]
    missing.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PairModelError, match="not a pair model file"):
        read_pair_model(missing)


def test_the_shipped_file_is_the_trainers_output_on_the_shared_pairs() -> None:
    # The full rebuild (`train_pairs --check`) needs the Quora texts' embeddings; it runs
    # where benchmarks/cache.py or the trainer has cached them, else it is skipped.
    import os
    import tempfile

    data = Path(os.environ.get(ENV_VAR) or QQP.parent)
    path = data / "paraphrase" / "qqp-train.csv"
    cache = Path(tempfile.gettempdir()) / "armature-bench-cache"
    if not path.is_file() or not any(cache.glob("qqp-*-all-MiniLM-L6-v2.npz")):
        pytest.skip(
            "no cached Quora embeddings; run python -m armature_temporal.cache.train_pairs --check"
        )
    rebuilt = train_pairs.render(train_pairs.build(data, cache))
    assert rebuilt == MODEL.read_text(encoding="utf-8")
