"""Nearest-neighbour search over a semantic-cache partition: :class:`SemanticIndex`.

Exact, in numpy, on float32 unit vectors (cosine = dot product). Two ways, same answer:

- **brute force** (one matrix-vector product) for every lookup below ``prefilter_from``
  entries (default 20,000: a stage's default ``max_entries`` is 10,000, where this takes a
  millisecond or two), and whenever no ``min_score`` is given;
- **bounded prefilter** above it, for ``nearest(v, min_score=t)``: the vectors are kept also
  in a principal-component basis fitted on a sample; the first ``prefix_dims`` coordinates
  give a partial dot product, and Cauchy–Schwarz bounds the rest
  (``|q_rest| * |x_rest|``, exact for unit vectors as ``sqrt(1 - |x_prefix|^2)``). Only rows
  whose bound reaches ``min_score`` (or the best exact score found so far) are scored in
  full, so the answer is still the exact nearest; a quarter of the rows or more as
  candidates falls back to brute force.

An approximate index (IVF, HNSW) would be faster at a million entries, but it can miss the
one entry that would have been a hit and costs a training pass on every rebuild; the cache
rebuilds an index whenever its partition changes, so exact search with no build step fits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from armature_temporal.errors import ArmatureError

__all__ = ["SemanticIndex", "SemanticIndexError"]


class SemanticIndexError(ArmatureError):
    """A vector of the wrong dimension, or ids and vectors that do not match."""


class SemanticIndex:
    """Exact cosine nearest neighbour over ``(id, vector)`` entries (see the module
    docstring). Vectors are normalised on the way in; adding an id again replaces it."""

    def __init__(self, dim: int, *, prefilter_from: int = 20_000, prefix_dims: int = 64) -> None:
        if dim <= 0:
            raise SemanticIndexError(f"SemanticIndex dim must be positive, got {dim}")
        self.dim = dim
        self.prefilter_from = prefilter_from
        self.prefix_dims = min(prefix_dims, dim)
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        self._n = 0
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        self._basis: np.ndarray | None = None  # dim x dim, rows = principal directions
        self._prefix = np.zeros((0, self.prefix_dims), dtype=np.float32)
        self._rest = np.zeros(0, dtype=np.float32)
        self._fitted_at = 0

    def __len__(self) -> int:
        return self._n

    def _as_matrix(self, vectors: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim == 1 and matrix.size == 0:
            matrix = matrix.reshape(0, self.dim)
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise SemanticIndexError(
                f"vectors of shape {matrix.shape} do not fit this index of dimension {self.dim}; "
                "embed them with the model the index was built for"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        unit: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        return unit

    def add(self, ids: Sequence[str], vectors: Sequence[Sequence[float]] | np.ndarray) -> None:
        """Add (or replace) entries; ``ids[i]`` names ``vectors[i]``."""
        matrix = self._as_matrix(vectors)
        if len(ids) != len(matrix):
            raise SemanticIndexError(
                f"{len(ids)} ids for {len(matrix)} vectors; give one id per vector"
            )
        fresh: list[int] = []
        for key, row in zip(ids, matrix, strict=True):
            if key in self._row:
                self._vectors[self._row[key]] = row
                self._project(self._row[key], self._row[key] + 1)
                continue
            if self._n == len(self._vectors):
                grown = np.zeros((max(16, 2 * self._n), self.dim), dtype=np.float32)
                grown[: self._n] = self._vectors[: self._n]
                self._vectors = grown
            self._vectors[self._n] = row
            self._row[key] = self._n
            self._ids.append(key)
            fresh.append(self._n)
            self._n += 1
        if fresh and self._basis is not None:
            self._project(fresh[0], self._n)

    def remove(self, ids: Sequence[str]) -> None:
        """Drop entries; ids not in the index are ignored."""
        for key in ids:
            row = self._row.pop(key, None)
            if row is None:
                continue
            last = self._n - 1
            if row != last:
                moved = self._ids[last]
                self._vectors[row] = self._vectors[last]
                self._ids[row] = moved
                self._row[moved] = row
                if self._basis is not None:
                    self._prefix[row] = self._prefix[last]
                    self._rest[row] = self._rest[last]
            self._ids.pop()
            self._n = last

    def nearest(
        self, vector: Sequence[float] | np.ndarray, *, min_score: float | None = None
    ) -> tuple[str, float] | None:
        """The entry most cosine-similar to ``vector`` and its cosine; None when the index is
        empty, or when ``min_score`` is given and no entry reaches it."""
        if self._n == 0:
            return None
        query = self._as_matrix(np.asarray(vector, dtype=np.float32).reshape(1, -1))[0]
        if min_score is None or self._n < self.prefilter_from:
            scores = self._vectors[: self._n] @ query
            best = int(np.argmax(scores))
            found: tuple[int, float] | None = (best, float(scores[best]))
        else:
            found = self._prefiltered(query, min_score)
        if found is None or (min_score is not None and found[1] < min_score):
            return None
        return self._ids[found[0]], found[1]

    def _prefiltered(self, query: np.ndarray, min_score: float) -> tuple[int, float] | None:
        if self._basis is None or self._n > 4 * self._fitted_at:
            self._fit()
        assert self._basis is not None
        rotated = self._basis @ query
        head, tail = rotated[: self.prefix_dims], float(np.linalg.norm(rotated[self.prefix_dims :]))
        partial = self._prefix[: self._n] @ head
        bound = partial + tail * self._rest[: self._n]
        candidates = np.flatnonzero(bound >= min_score)
        if len(candidates) == 0:
            return None
        if len(candidates) * 4 >= self._n:
            scores = self._vectors[: self._n] @ query
            best = int(np.argmax(scores))
            return best, float(scores[best])
        scores = self._vectors[candidates] @ query
        best = int(np.argmax(scores))
        return int(candidates[best]), float(scores[best])

    def _fit(self) -> None:
        """Principal directions of (a sample of) the vectors, then every row's prefix."""
        rng = np.random.default_rng(0)
        sample = self._vectors[: self._n]
        if self._n > 5000:
            sample = sample[rng.choice(self._n, 5000, replace=False)]
        _, vectors = np.linalg.eigh(sample.T @ sample)
        self._basis = np.ascontiguousarray(vectors[:, ::-1].T, dtype=np.float32)
        self._prefix = np.zeros((len(self._vectors), self.prefix_dims), dtype=np.float32)
        self._rest = np.zeros(len(self._vectors), dtype=np.float32)
        self._fitted_at = self._n
        self._project(0, self._n)

    def _project(self, start: int, stop: int) -> None:
        if self._basis is None:
            return
        if len(self._prefix) < len(self._vectors):
            prefix = np.zeros((len(self._vectors), self.prefix_dims), dtype=np.float32)
            prefix[: len(self._prefix)] = self._prefix
            rest = np.zeros(len(self._vectors), dtype=np.float32)
            rest[: len(self._rest)] = self._rest
            self._prefix, self._rest = prefix, rest
        block = self._vectors[start:stop] @ self._basis[: self.prefix_dims].T
        self._prefix[start:stop] = block
        # the rows are unit vectors, so what the prefix leaves is sqrt(1 - |prefix|^2);
        # a small margin keeps float rounding from making the bound too tight
        self._rest[start:stop] = np.sqrt(np.clip(1.0 - (block * block).sum(1), 0.0, 1.0)) + 1e-4
