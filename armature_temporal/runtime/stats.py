"""Small statistics shared by the trace store's queries and the dashboard views.

It imports nothing from the project, so :mod:`armature_temporal.store` and
:mod:`armature_temporal.views` can both use it without importing each other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["percentile"]


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values`` (any order), interpolating linearly
    between closest ranks (PostgreSQL's ``percentile_cont``); ``None`` when there are none."""
    data = sorted(values)
    if not data:
        return None
    rank = (len(data) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return data[low] + (data[high] - data[low]) * (rank - low)
