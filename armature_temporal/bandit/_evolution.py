"""Evolving arms: crossover and mutation within declared bounds, shrunk child priors, retirement.

Pure: functions over params, counts and an injected ``numpy.random.Generator``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from armature_temporal.bandit._config import ChoiceParam, EvolutionConfig, FloatParam, IntParam

__all__ = ["breed", "child_prior", "crossover", "mutate", "to_retire"]

Spec = FloatParam | IntParam | ChoiceParam


def _random_value(spec: Spec, rng: np.random.Generator) -> Any:
    if isinstance(spec, ChoiceParam):
        return spec.choices[int(rng.integers(len(spec.choices)))]
    if isinstance(spec, IntParam):
        return int(rng.integers(spec.low, spec.high + 1))
    return float(rng.uniform(spec.low, spec.high))


def crossover(
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    space: Mapping[str, Spec],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Uniform crossover of the declared params; undeclared params come from ``first``.

    A numeric param blends the parents (a random point between them); a categorical one takes
    either parent's value. A param neither parent has is drawn uniformly from its bounds.
    """
    child = dict(first)
    for key, spec in space.items():
        a, b = first.get(key), second.get(key)
        if a is None and b is None:
            child[key] = _random_value(spec, rng)
        elif a is None or b is None:
            child[key] = a if b is None else b
        elif isinstance(spec, ChoiceParam):
            child[key] = a if rng.random() < 0.5 else b
        else:
            point = float(a) + rng.random() * (float(b) - float(a))
            child[key] = round(point) if isinstance(spec, IntParam) else point
    return child


def mutate(
    params: Mapping[str, Any],
    space: Mapping[str, Spec],
    rng: np.random.Generator,
    rate: float,
    scale: float,
) -> dict[str, Any]:
    """Each declared param mutates with probability ``rate``: numeric ones by a Gaussian step of
    ``scale`` × range, clipped to the bounds; categorical ones to another choice."""
    out = dict(params)
    for key, spec in space.items():
        if key not in out:
            out[key] = _random_value(spec, rng)
            continue
        if rng.random() >= rate:
            continue
        if isinstance(spec, ChoiceParam):
            others = [c for c in spec.choices if c != out[key]]
            if others:
                out[key] = others[int(rng.integers(len(others)))]
            continue
        step = rng.normal(0.0, scale * (spec.high - spec.low))
        value = min(max(float(out[key]) + step, spec.low), spec.high)
        out[key] = round(value) if isinstance(spec, IntParam) else value
    return out


def child_prior(
    parents: Sequence[tuple[float, float]], shrink: float, cap: float, base: tuple[float, float]
) -> tuple[float, float]:
    """A child's Beta prior from its parents' evidence ``(s, f)``, shrunk.

    The child inherits the parents' pooled mean with ``shrink`` × the smaller parent's evidence,
    at most ``cap`` pseudo-observations, on top of the base prior: informed, but easily
    overruled by the child's own rewards.
    """
    s = sum(p[0] for p in parents)
    f = sum(p[1] for p in parents)
    if s + f <= 0:
        return base
    weight = min(cap, shrink * min(ps + pf for ps, pf in parents))
    mean = s / (s + f)
    return base[0] + weight * mean, base[1] + weight * (1.0 - mean)


def breed(
    ranked: Sequence[tuple[str, Mapping[str, Any]]],
    config: EvolutionConfig,
    rng: np.random.Generator,
    existing: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], list[str]] | None:
    """One child from the best arms: ``ranked`` is ``(arm_id, params)`` best first.

    Two parents are drawn from the top ``config.parents`` (one when only one qualifies), crossed
    and mutated; a child identical to an existing arm is redrawn (up to 20 times).
    """
    pool = list(ranked[: config.parents])
    if not pool:
        return None
    for _ in range(20):
        if len(pool) == 1:
            chosen = [pool[0]]
            params = mutate(
                pool[0][1],
                config.params,
                rng,
                max(config.mutation_rate, 0.5),
                config.mutation_scale,
            )
        else:
            i, j = rng.choice(len(pool), size=2, replace=False)
            chosen = [pool[int(i)], pool[int(j)]]
            params = crossover(chosen[0][1], chosen[1][1], config.params, rng)
            params = mutate(params, config.params, rng, config.mutation_rate, config.mutation_scale)
        if all(dict(params) != dict(e) for e in existing):
            return params, [c[0] for c in chosen]
    return None


def to_retire(
    p_best: Mapping[str, float],
    pulls: Mapping[str, int],
    low_rounds: Mapping[str, int],
    config: EvolutionConfig,
) -> tuple[dict[str, int], list[str]]:
    """Which arms retire this round.

    An arm with at least ``min_pulls`` pulls and P(best) below ``retire_below`` counts a low
    round (any other round resets its count); after ``retire_patience`` consecutive low rounds
    it retires, worst first, while more than ``min_active`` arms remain active.

    Returns:
        The new low-round counts and the arms to retire.
    """
    counts = {
        arm: (low_rounds.get(arm, 0) + 1)
        if pulls.get(arm, 0) >= config.min_pulls and p < config.retire_below
        else 0
        for arm, p in p_best.items()
    }
    due = sorted(
        (a for a, c in counts.items() if c >= config.retire_patience), key=lambda a: p_best[a]
    )
    room = max(0, len(p_best) - config.min_active)
    return counts, due[:room]
