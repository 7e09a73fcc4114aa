"""Thompson-sampling math: Beta posteriors, context seeding, change detection, P(best).

Pure: plain functions over numbers and numpy arrays, randomness from an injected
``numpy.random.Generator``. Nothing here does I/O or reads a clock, so the same functions serve
the in-memory runtime, the SQL backends (which mirror :func:`observe_one` in one ``UPDATE``),
the benchmarks (which call :func:`observe` vectorised across seeds) and, later, a workflow's
local activity.

The model, per arm and per context:

* **Posterior.** ``Beta(a0 + s, b0 + f)``, where ``(a0, b0)`` is the arm's prior and ``s``/``f``
  its evidence since the last reset. A reward ``r`` in [0, 1] adds ``r`` to ``s`` and ``1 - r``
  to ``f`` (fractional rewards are Bernoulli trials in expectation).
* **Contexts.** A context's posterior is the prior, plus the global evidence shrunk to
  ``seed_strength / (1 + n)`` pseudo-observations where ``n`` is the context's own evidence on
  the arm (:func:`seeded_posterior`), plus that own evidence. A new context falls back to what
  every context taught; its own evidence takes over within a few pulls.
* **Selection.** Thompson sampling: one draw from each posterior, the largest wins; by default
  each draw is floored at its posterior mean (optimistic sampling, see :func:`thompson`).
* **Change detection.** A two-sided CUSUM (Page's test) on each arm's reward stream against its
  posterior mean: ``down += mean - r - drift`` and ``up += r - mean - drift``, both floored at
  zero. When either exceeds ``threshold`` the arm's distribution changed; the evidence of every
  arm in the context (``reset="context"``) or of that arm alone (``reset="arm"``) is dropped, so
  the new best arm is found by fresh exploration instead of waiting for thousands of stale
  observations to be outweighed. The defaults (drift 0.15, threshold 8.6) keep false alarms
  under about one per 60 runs of 10,000 pulls and find a 0.7 → 0.3 drop in about 35 pulls.
* **Forgetting, optional.** ``discount`` multiplies an arm's evidence by ``γ`` each time it is
  rewarded; ``window`` caps an arm's evidence at that many observations (an exponentially
  weighted stand-in for a sliding window that stays one atomic ``UPDATE``). Both default off:
  change detection, not uniform forgetting, is what keeps stationary regret low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ArmState",
    "Dynamics",
    "SelectionRule",
    "beta_interval",
    "beta_ppf",
    "betainc",
    "kl_bernoulli",
    "lai_robbins_constant",
    "observe",
    "observe_one",
    "p_best",
    "posterior",
    "seeded_posterior",
    "thompson",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
_SCALAR_ARMS = 16


class Dynamics(BaseModel):
    """How evidence accumulates and is forgotten. Derived from a bandit's configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    discount: float = Field(1.0, gt=0.0, le=1.0)
    window: float | None = Field(None, ge=2.0)
    detect: bool = True
    drift: float = Field(0.15, gt=0.0, lt=1.0)
    threshold: float = Field(8.6, gt=0.0)
    warmup: int = Field(0, ge=0)
    reset: Literal["context", "arm"] = "context"


class SelectionRule(BaseModel):
    """How a selection reads the posteriors. Derived from a bandit's configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimistic: bool = True
    seed_strength: float = Field(1.0, ge=0.0)


#: One arm's evidence and detector state: ``(s, f, up, down, n)``.
ArmTuple = tuple[float, float, float, float, float]


def observe_one(
    state: ArmTuple, reward: float, a0: float, b0: float, dyn: Dynamics
) -> tuple[ArmTuple, bool]:
    """One reward for one arm: the reference semantics the SQL ``UPDATE`` reproduces.

    Args:
        state: ``(s, f, up, down, n)`` — evidence, CUSUM statistics, rewards since the reset.
        reward: In [0, 1] (validated by the caller).
        a0: The arm's prior alpha.
        b0: The arm's prior beta.
        dyn: The bandit's dynamics.

    Returns:
        The new state and whether a change was detected. On a change the arm's state is all
        zeros (the reward that revealed the change is not counted as evidence).
    """
    s, f, up, down, n = state
    if dyn.detect and n >= dyn.warmup:
        mean = (a0 + s) / (a0 + b0 + s + f)
        down_raw = down + mean - reward - dyn.drift
        up_raw = up + reward - mean - dyn.drift
        if down_raw > dyn.threshold or up_raw > dyn.threshold:
            return (0.0, 0.0, 0.0, 0.0, 0.0), True
        down = max(0.0, down_raw)
        up = max(0.0, up_raw)
    s = dyn.discount * s + reward
    f = dyn.discount * f + (1.0 - reward)
    if dyn.window is not None:
        total = s + f
        if total > dyn.window:
            scale = dyn.window / total
            s, f = s * scale, f * scale
    return (s, f, up, down, n + 1.0), False


@dataclass
class ArmState:
    """Evidence and detector state of many arms, shape ``(..., K)`` (a batch of bandits)."""

    s: FloatArray
    f: FloatArray
    up: FloatArray
    down: FloatArray
    n: FloatArray

    @classmethod
    def zeros(cls, shape: tuple[int, ...]) -> ArmState:
        return cls(*(np.zeros(shape) for _ in range(5)))

    def copy(self) -> ArmState:
        return ArmState(
            self.s.copy(), self.f.copy(), self.up.copy(), self.down.copy(), self.n.copy()
        )


def observe(
    state: ArmState,
    arm: IntArray,
    reward: FloatArray,
    a0: FloatArray,
    b0: FloatArray,
    dyn: Dynamics,
) -> NDArray[np.bool_]:
    """:func:`observe_one` for a batch of bandits at once, updating ``state`` in place.

    Args:
        state: Shape ``(B, K)``.
        arm: Shape ``(B,)``, the arm rewarded in each bandit.
        reward: Shape ``(B,)``.
        a0: Priors, broadcastable to ``(B, K)``.
        b0: Priors, broadcastable to ``(B, K)``.
        dyn: Shared dynamics.

    Returns:
        Shape ``(B,)``: where a change was detected (and the reset applied).
    """
    rows = np.arange(arm.shape[0])
    a0 = np.broadcast_to(a0, state.s.shape)[rows, arm]
    b0 = np.broadcast_to(b0, state.s.shape)[rows, arm]
    s, f = state.s[rows, arm], state.f[rows, arm]
    alarm = np.zeros(arm.shape[0], dtype=bool)
    if dyn.detect:
        on = state.n[rows, arm] >= dyn.warmup
        mean = (a0 + s) / (a0 + b0 + s + f)
        down_raw = state.down[rows, arm] + mean - reward - dyn.drift
        up_raw = state.up[rows, arm] + reward - mean - dyn.drift
        alarm = on & ((down_raw > dyn.threshold) | (up_raw > dyn.threshold))
        state.down[rows, arm] = np.where(on, np.maximum(0.0, down_raw), state.down[rows, arm])
        state.up[rows, arm] = np.where(on, np.maximum(0.0, up_raw), state.up[rows, arm])
    s = dyn.discount * s + reward
    f = dyn.discount * f + (1.0 - reward)
    if dyn.window is not None:
        total = s + f
        scale = np.where(total > dyn.window, dyn.window / np.maximum(total, 1e-300), 1.0)
        s, f = s * scale, f * scale
    state.s[rows, arm] = s
    state.f[rows, arm] = f
    state.n[rows, arm] += 1.0
    if alarm.any():
        if dyn.reset == "context":
            for field in (state.s, state.f, state.up, state.down, state.n):
                field[alarm] = 0.0
        else:
            hit = rows[alarm], arm[alarm]
            for field in (state.s, state.f, state.up, state.down, state.n):
                field[hit] = 0.0
    return alarm


def posterior(
    a0: FloatArray, b0: FloatArray, s: FloatArray, f: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``Beta(a0 + s, b0 + f)``."""
    return a0 + s, b0 + f


def seeded_posterior(
    a0: FloatArray,
    b0: FloatArray,
    global_s: FloatArray,
    global_f: FloatArray,
    s: FloatArray,
    f: FloatArray,
    strength: float,
) -> tuple[FloatArray, FloatArray]:
    """A context's posterior: prior + a fading share of the global evidence + its own evidence.

    Each arm borrows the global posterior's mean with the weight of ``strength / (1 + n)``
    observations, ``n`` being the arm's own evidence in the context (never more than the global
    evidence itself). With no evidence of its own the arm falls back to the global mean; the
    seed halves with its first own reward and fades from there, so a context whose best arm
    differs from everyone else's pays for the seed only in its first few pulls.
    ``strength=0`` makes contexts independent.
    """
    total = global_s + global_f
    weight = strength / (1.0 + s + f)
    scale = np.where(total > weight, weight / np.maximum(total, 1e-300), 1.0)
    return a0 + global_s * scale + s, b0 + global_f * scale + f


def thompson(
    alpha: FloatArray,
    beta: FloatArray,
    rng: np.random.Generator,
    optimistic: bool = True,
    mean: FloatArray | None = None,
) -> IntArray:
    """One Thompson draw per bandit: the index of the largest posterior sample (last axis).

    ``optimistic`` floors each draw at its posterior mean (optimistic Bayesian sampling, May et
    al. 2012): an arm is never sampled *below* what it is believed to be worth, which trims
    needless exploration of well-known good arms (about 10% less regret at 1,000-10,000 pulls)
    and keeps the asymptotic guarantee of Thompson sampling. ``mean`` may pass the posterior
    means when the caller has them already.
    """
    if alpha.ndim == 1 and alpha.shape[0] <= _SCALAR_ARMS:
        # One small bandit (the runtime's case): scalar draws skip numpy's per-call argument
        # checks, about 4x faster; same distribution.
        best, index = -1.0, 0
        for i, (a, b) in enumerate(zip(alpha.tolist(), beta.tolist(), strict=True)):
            draw = float(rng.beta(a, b))
            if optimistic:
                draw = max(draw, a / (a + b))
            if draw > best:
                best, index = draw, i
        return np.asarray(index, dtype=np.intp)
    draws = rng.beta(alpha, beta)
    if optimistic:
        np.maximum(draws, alpha / (alpha + beta) if mean is None else mean, out=draws)
    return np.asarray(draws.argmax(axis=-1), dtype=np.intp)


def p_best(
    alpha: FloatArray, beta: FloatArray, rng: np.random.Generator, draws: int = 10_000
) -> FloatArray:
    """P(arm is best) for each arm, by Monte Carlo over ``draws`` joint posterior samples."""
    alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    if alpha.size == 0:
        return np.zeros(0)
    samples = rng.beta(alpha, beta, size=(draws, alpha.size))
    wins = np.bincount(samples.argmax(axis=1), minlength=alpha.size)
    return np.asarray(wins / draws, dtype=float)


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)`` (continued fraction, Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return math.exp(log_front) * result / a


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of ``Beta(a, b)``, by bisection on :func:`betainc`."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2.0
        if betainc(a, b, mid) < q:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def beta_interval(a: float, b: float, level: float = 0.95) -> tuple[float, float]:
    """The equal-tailed credible interval of ``Beta(a, b)`` holding ``level`` of the mass."""
    tail = (1.0 - level) / 2.0
    return beta_ppf(tail, a, b), beta_ppf(1.0 - tail, a, b)


def kl_bernoulli(p: float, q: float) -> float:
    """KL(Bernoulli(p) ‖ Bernoulli(q))."""
    eps = 1e-15
    p, q = min(max(p, eps), 1 - eps), min(max(q, eps), 1 - eps)
    return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))


def lai_robbins_constant(means: list[float]) -> float:
    """``Σ Δᵢ / KL(μᵢ, μ*)`` over suboptimal arms: the best achievable regret per ``ln T``."""
    best = max(means)
    return sum((best - m) / kl_bernoulli(m, best) for m in means if m < best)
