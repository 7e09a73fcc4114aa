"""A Pareto frontier over a spec's cases, in the manner of GEPA (Agrawal et al. 2025,
"GEPA: Reflective Prompt Evolution Can Outperform Reinforcement Learning"). Pure: no I/O,
randomness from the ``rng`` given.

A :class:`Member` is a version of the spec (the current one, or a set of changes to it) with
its pass rate on each case. The frontier keeps every member that is best on at least one case
(ties: every member at the best rate wins it), not only the best on average, and drops a member
that another kept member dominates (at least as good on every case, better on one). The next
parent is drawn from the frontier with weight = the number of cases it wins
(:func:`sample_parent`), so a version that alone solves one hard case keeps being refined.
:func:`merge` is GEPA's system-aware merge: two frontier members that win different cases are
combined surface by surface (a stage's description, tier, ...): a surface only one of them
changed comes from that one, a surface both changed comes from the one that wins more cases.

The search's budget is in case runs; :data:`SearchStopReason` says why a search ended.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from armature_temporal.improve.models import SearchMember as Member
from armature_temporal.improve.models import SearchReport, SearchStopReason, SpecChange

__all__ = [
    "Member",
    "SearchReport",
    "SearchStopReason",
    "changes_key",
    "dominates",
    "frontier",
    "merge",
    "merge_pair",
    "sample_parent",
    "solved",
    "wins",
]


def _s(value: float | None) -> float:
    return value or 0.0


def dominates(a: Member, b: Member) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every case and better on one."""
    pairs = list(zip(a.scores, b.scores, strict=True))
    return all(_s(x) >= _s(y) for x, y in pairs) and any(_s(x) > _s(y) for x, y in pairs)


def wins(members: Sequence[Member]) -> dict[str, list[int]]:
    """The cases (indices) each member is best on, ties included; a case nobody passes
    (best rate 0) is won by nobody."""
    out: dict[str, list[int]] = {m.id: [] for m in members}
    if not members:
        return out
    for case in range(len(members[0].scores)):
        best = max(_s(m.scores[case]) for m in members)
        if best <= 0:
            continue
        for m in members:
            if _s(m.scores[case]) == best:
                out[m.id].append(case)
    return out


def frontier(members: Sequence[Member]) -> list[Member]:
    """The members best on at least one case, less any another of them dominates (equal
    score vectors: the first one seen stays). With no case won by anyone, the best mean."""
    won = wins(members)
    kept = [m for m in members if won[m.id]]
    if not kept:
        return [max(members, key=lambda m: m.mean)] if members else []
    out: list[Member] = []
    for m in kept:
        if any(dominates(o, m) for o in kept if o.id != m.id):
            continue
        if any(o.scores == m.scores for o in out):
            continue
        out.append(m)
    return out


def solved(members: Sequence[Member]) -> bool:
    """Whether one member passes every case on every repeat (nothing left to improve on)."""
    return any(m.scores and all(_s(x) >= 1.0 for x in m.scores) for m in members)


def sample_parent(front: Sequence[Member], rng: random.Random) -> Member:
    """A parent drawn from the frontier, weighted by the number of cases each wins (GEPA's
    frequency weighting); a frontier that wins nothing is drawn uniformly.

    Raises:
        ValueError: an empty frontier.
    """
    if not front:
        raise ValueError("sample_parent needs a frontier with at least one member")
    won = wins(front)
    weights = [len(won[m.id]) for m in front]
    if not any(weights):
        weights = [1] * len(front)
    return rng.choices(list(front), weights=weights, k=1)[0]


def _surfaces(m: Member) -> dict[str, SpecChange]:
    return {c.surface: c for c in m.changes}


def merge(a: Member, b: Member, won: dict[str, list[int]]) -> list[SpecChange]:
    """``a`` and ``b`` combined surface by surface: a surface one of them changed comes from
    it; one both changed comes from the one that wins more cases (``won``; tie: ``a``)."""
    mine, theirs = _surfaces(a), _surfaces(b)
    a_first = len(won.get(a.id, [])) >= len(won.get(b.id, []))
    out: list[SpecChange] = []
    for surface in dict.fromkeys([*mine, *theirs]):
        if surface in mine and surface in theirs:
            out.append(mine[surface] if a_first else theirs[surface])
        else:
            out.append(mine.get(surface) or theirs[surface])
    return out


def merge_pair(
    front: Sequence[Member], rng: random.Random, tried: set[str]
) -> tuple[Member, Member] | None:
    """Two frontier members that win different cases and whose merge is new (its changes
    differ from both and from every set in ``tried``, keys from :func:`changes_key`); drawn
    at random among such pairs. None: no complementary pair."""
    won = wins(front)
    pairs: list[tuple[Member, Member]] = []
    for i, a in enumerate(front):
        for b in front[i + 1 :]:
            wa, wb = set(won[a.id]), set(won[b.id])
            if not (wa - wb and wb - wa) or not a.changes or not b.changes:
                continue
            merged = changes_key(merge(a, b, won))
            if merged in tried or merged in (changes_key(a.changes), changes_key(b.changes)):
                continue
            pairs.append((a, b))
    return rng.choice(pairs) if pairs else None


def changes_key(changes: Sequence[SpecChange]) -> str:
    """A set of changes as a key: which surfaces end up with which values."""
    import json

    return json.dumps(sorted([c.surface, c.new] for c in changes), default=str)
