"""The bandit's pure core: posteriors, change detection, context seeding, P(best), intervals,
evolution and configuration. No database, no Temporal; randomness from seeded generators."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from armature_temporal.bandit import BanditConfig, BanditConfigError
from armature_temporal.bandit._config import (
    ChoiceParam,
    EvolutionConfig,
    FloatParam,
    IntParam,
    context_key,
    param_problem,
    parse_config,
)
from armature_temporal.bandit._evolution import breed, child_prior, crossover, mutate, to_retire
from armature_temporal.bandit._math import (
    ArmState,
    Dynamics,
    beta_interval,
    beta_ppf,
    betainc,
    kl_bernoulli,
    lai_robbins_constant,
    observe,
    observe_one,
    p_best,
    seeded_posterior,
    thompson,
)

ZERO = (0.0, 0.0, 0.0, 0.0, 0.0)


def run_one(rewards: list[float], dyn: Dynamics, a0: float = 1.0, b0: float = 1.0) -> Any:
    state, alarms = ZERO, []
    for i, r in enumerate(rewards):
        state, alarm = observe_one(state, r, a0, b0, dyn)
        if alarm:
            alarms.append(i)
    return state, alarms


# --- posteriors -------------------------------------------------------------------------------


def test_fractional_reward_adds_r_to_alpha_and_one_minus_r_to_beta() -> None:
    (s, f, _, _, n), alarm = observe_one(ZERO, 0.25, 1.0, 1.0, Dynamics())
    assert (s, f, n, alarm) == (0.25, 0.75, 1.0, False)
    state, _ = run_one([1.0, 0.0, 0.5, 0.8], Dynamics())
    assert state[0] == pytest.approx(2.3)
    assert state[1] == pytest.approx(1.7)


def test_discount_multiplies_the_arms_evidence_before_each_reward() -> None:
    state, _ = run_one([1.0, 1.0, 0.0], Dynamics(discount=0.5, detect=False))
    # s: 1 -> 0.5 + 1 = 1.5 -> 0.75 + 0 ; f: 0 -> 0 -> 0 + 1
    assert state[0] == pytest.approx(0.75)
    assert state[1] == pytest.approx(1.0)


def test_window_caps_evidence_and_keeps_the_mean() -> None:
    state, _ = run_one([1.0, 0.0] * 100, Dynamics(window=10.0, detect=False))
    assert state[0] + state[1] == pytest.approx(10.0)
    assert state[0] / (state[0] + state[1]) == pytest.approx(0.5, abs=0.06)


def test_no_detection_keeps_all_evidence() -> None:
    state, alarms = run_one([1.0] * 500 + [0.0] * 500, Dynamics(detect=False))
    assert alarms == []
    assert (state[0], state[1]) == (500.0, 500.0)


# --- change detection -------------------------------------------------------------------------


def bernoulli(rng: np.random.Generator, p: float, n: int) -> list[float]:
    return (rng.random(n) < p).astype(float).tolist()


def test_a_drop_from_0_7_to_0_3_is_detected_within_80_rewards_and_the_arm_reset() -> None:
    delays = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        rewards = bernoulli(rng, 0.7, 2000) + bernoulli(rng, 0.3, 300)
        _, alarms = run_one(rewards, Dynamics())
        after = [a for a in alarms if a >= 2000]
        assert after, f"seed {seed}: drop not detected"
        delays.append(after[0] - 2000)
    assert float(np.median(delays)) <= 60
    assert max(delays) <= 120


def test_a_rise_is_detected_too() -> None:
    rng = np.random.default_rng(1)
    _, alarms = run_one(bernoulli(rng, 0.2, 1000) + bernoulli(rng, 0.8, 200), Dynamics())
    assert any(1000 <= a < 1100 for a in alarms)


def test_stationary_streams_rarely_raise_false_alarms() -> None:
    false = 0
    for seed in range(30):
        rng = np.random.default_rng(100 + seed)
        _, alarms = run_one(bernoulli(rng, [0.3, 0.5, 0.7][seed % 3], 5000), Dynamics())
        false += len(alarms)
    assert false <= 2  # 150,000 rewards


def test_after_an_alarm_the_state_is_zero() -> None:
    rng = np.random.default_rng(2)
    rewards = bernoulli(rng, 0.9, 500) + [0.0] * 40
    state = ZERO
    for r in rewards:
        state, alarm = observe_one(state, r, 1.0, 1.0, Dynamics())
        if alarm:
            assert state == ZERO
            return
    pytest.fail("no alarm on a run of 40 failures after 0.9")


def test_warmup_silences_the_test_for_the_first_rewards_after_a_reset() -> None:
    rewards = [1.0] * 5 + [0.0] * 80
    _, alarms = run_one(rewards, Dynamics(threshold=2.0))
    _, late = run_one(rewards, Dynamics(threshold=2.0, warmup=20))
    assert alarms and alarms[0] < 20
    assert all(a >= 20 for a in late)


@settings(max_examples=60, deadline=None)
@given(
    rewards=st.lists(
        st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4).map(tuple), min_size=1, max_size=60
    ),
    discount=st.sampled_from([1.0, 0.97]),
    window=st.sampled_from([None, 12.0]),
    threshold=st.sampled_from([8.6, 1.5]),
    reset=st.sampled_from(["context", "arm"]),
    priors=st.tuples(st.floats(0.5, 5.0), st.floats(0.5, 5.0)),
)
def test_vectorised_observe_matches_observe_one(
    rewards: list[tuple[float, ...]],
    discount: float,
    window: float | None,
    threshold: float,
    reset: str,
    priors: tuple[float, float],
) -> None:
    """The benchmark's vectorised update and the runtime's scalar one are the same function."""
    dyn = Dynamics(discount=discount, window=window, threshold=threshold, reset=reset)  # type: ignore[arg-type]
    k = 3
    a0, b0 = np.full(k, priors[0]), np.full(k, priors[1])
    batch = ArmState.zeros((1, k))
    scalar = [ZERO] * k
    for step, group in enumerate(rewards):
        for j, r in enumerate(group):
            arm = (step + j) % k
            alarm = observe(batch, np.array([arm]), np.array([r]), a0, b0, dyn)
            scalar[arm], alarm_one = observe_one(scalar[arm], r, priors[0], priors[1], dyn)
            assert bool(alarm[0]) == alarm_one
            if alarm_one and reset == "context":
                scalar = [ZERO] * k
    for arm in range(k):
        got = tuple(float(getattr(batch, f)[0, arm]) for f in ("s", "f", "up", "down", "n"))
        assert got == pytest.approx(scalar[arm], abs=1e-9)


# --- contexts ---------------------------------------------------------------------------------


def test_a_context_without_evidence_falls_back_to_the_global_mean() -> None:
    ones = np.ones(2)
    gs, gf = np.array([80.0, 20.0]), np.array([20.0, 80.0])
    zero = np.zeros(2)
    alpha, beta = seeded_posterior(ones, ones, gs, gf, zero, zero, strength=10.0)
    assert alpha + beta == pytest.approx(2 + 10.0)  # the seed weighs `strength` observations
    assert ((alpha - 1) / (alpha + beta - 2)) == pytest.approx([0.8, 0.2])


def test_the_seed_fades_as_the_context_gathers_its_own_evidence() -> None:
    ones = np.ones(1)
    g = (np.array([90.0]), np.array([10.0]))
    weights = []
    for n in (0.0, 1.0, 3.0, 9.0):
        a, b = seeded_posterior(ones, ones, *g, np.array([0.0]), np.array([n]), strength=4.0)
        weights.append(float(a[0] + b[0]) - 2.0 - n)
    assert weights == pytest.approx([4.0, 2.0, 1.0, 0.4])


def test_the_seed_never_exceeds_the_global_evidence_and_zero_strength_is_independent() -> None:
    ones, zero = np.ones(1), np.zeros(1)
    a, b = seeded_posterior(ones, ones, np.array([1.0]), np.array([0.0]), zero, zero, 10.0)
    assert (float(a[0]), float(b[0])) == (2.0, 1.0)
    a, b = seeded_posterior(ones, ones, np.array([50.0]), np.array([50.0]), zero + 3, zero, 0.0)
    assert (float(a[0]), float(b[0])) == (4.0, 1.0)


# --- selection and reports --------------------------------------------------------------------


def test_thompson_picks_a_clearly_better_arm_and_explores_an_uncertain_one() -> None:
    rng = np.random.default_rng(0)
    alpha, beta = np.array([900.0, 100.0]), np.array([100.0, 900.0])
    assert all(int(thompson(alpha, beta, rng)) == 0 for _ in range(200))
    alpha, beta = np.array([60.0, 1.0]), np.array([40.0, 1.0])  # 0.6 known vs unknown
    picks = [int(thompson(alpha, beta, rng)) for _ in range(2000)]
    assert 0.2 < sum(picks) / len(picks) < 0.6


def test_optimistic_sampling_never_undershoots_the_posterior_mean() -> None:
    # Arm 0 is known at 0.5; arm 1 has mean 0.49 but wide: plain draws fall below 0.5 half
    # the time and lose; optimistic draws of arm 0 are floored at 0.5 too, so arm 1 wins only
    # when its draw beats 0.5 and arm 0's draw.
    alpha, beta = np.array([5000.0, 4.9]), np.array([5000.0, 5.1])
    rng = np.random.default_rng(1)
    plain = np.mean([int(thompson(alpha, beta, rng, optimistic=False)) for _ in range(4000)])
    rng = np.random.default_rng(1)
    optimistic = np.mean([int(thompson(alpha, beta, rng)) for _ in range(4000)])
    assert optimistic < plain


def test_scalar_fast_path_draws_exactly_like_the_vectorised_path() -> None:
    alpha, beta = np.array([3.0, 50.0, 400.0]), np.array([5.0, 40.0, 100.0])
    fast = [int(thompson(alpha, beta, np.random.default_rng(s))) for s in range(200)]
    batch = [
        int(thompson(alpha[None, :], beta[None, :], np.random.default_rng(s))[0])
        for s in range(200)
    ]
    assert fast == batch


def test_p_best_sums_to_one_and_ranks_arms() -> None:
    rng = np.random.default_rng(3)
    probs = p_best(np.array([30.0, 20.0, 10.0]), np.array([10.0, 20.0, 30.0]), rng, 20_000)
    assert probs.sum() == pytest.approx(1.0)
    assert probs[0] > 0.95 and probs[2] < 0.01
    equal = p_best(np.array([5.0, 5.0]), np.array([5.0, 5.0]), rng, 20_000)
    assert equal == pytest.approx([0.5, 0.5], abs=0.02)


@pytest.mark.parametrize("q", [0.025, 0.3, 0.5, 0.9, 0.975])
def test_beta_quantiles_match_closed_forms(q: float) -> None:
    assert beta_ppf(q, 1.0, 1.0) == pytest.approx(q, abs=1e-9)
    assert beta_ppf(q, 2.0, 1.0) == pytest.approx(math.sqrt(q), abs=1e-9)  # CDF x^2
    assert beta_ppf(q, 1.0, 3.0) == pytest.approx(1 - (1 - q) ** (1 / 3), abs=1e-9)


def test_beta_interval_covers_95_percent_of_draws() -> None:
    a, b = 30.0, 70.0
    low, high = beta_interval(a, b)
    draws = np.random.default_rng(4).beta(a, b, 200_000)
    assert np.mean((draws >= low) & (draws <= high)) == pytest.approx(0.95, abs=0.003)
    assert betainc(a, b, low) == pytest.approx(0.025, abs=1e-9)
    big_low, big_high = beta_interval(30_000.0, 70_000.0)
    assert big_low < 0.3 < big_high and big_high - big_low < 0.006


def test_lai_robbins_constant_of_the_benchmark_problems() -> None:
    assert kl_bernoulli(0.5, 0.5) == 0.0
    assert kl_bernoulli(0.5, 0.7) == pytest.approx(0.0872, abs=1e-4)
    assert lai_robbins_constant([0.3, 0.5, 0.7]) == pytest.approx(3.47, abs=0.01)
    assert lai_robbins_constant([i / 10 for i in range(1, 10)]) == pytest.approx(7.52, abs=0.01)


def test_thompson_with_change_detection_learns_and_recovers_from_a_swap() -> None:
    """A small end-to-end run of the math (the full figures are in benchmarks/bandit.py)."""
    rng = np.random.default_rng(5)
    seeds, horizon, swap_at = 100, 3000, 1500
    mu = np.tile([0.3, 0.5, 0.7], (seeds, 1))
    state, ones, rows = ArmState.zeros((seeds, 3)), np.ones(3), np.arange(seeds)
    regret = np.zeros((seeds, horizon))
    for t in range(horizon):
        if t == swap_at:
            mu = mu[:, ::-1]
        arm = thompson(1 + state.s, 1 + state.f, rng)
        reward = (rng.random(seeds) < mu[rows, arm]).astype(float)
        regret[:, t] = mu.max(axis=1) - mu[rows, arm]
        observe(state, arm, reward, ones, ones, Dynamics())
    assert regret[:, :swap_at].sum(axis=1).mean() < 25  # uniform play would cost 300
    assert regret[:, swap_at:].sum(axis=1).mean() < 60  # without detection: ≈ 500
    assert regret[:, -500:].sum(axis=1).mean() < 5


# --- evolution --------------------------------------------------------------------------------

SPACE: dict[str, Any] = {
    "temperature": FloatParam(type="float", low=0.0, high=1.5),
    "max_tokens": IntParam(type="int", low=64, high=1024),
    "style": ChoiceParam(type="choice", choices=["terse", "plain", "rich"]),
}


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    t1=st.floats(0.0, 1.5),
    t2=st.floats(0.0, 1.5),
    m1=st.integers(64, 1024),
    m2=st.integers(64, 1024),
    s1=st.sampled_from(["terse", "plain", "rich"]),
    s2=st.sampled_from(["terse", "plain", "rich"]),
    rate=st.floats(0.0, 1.0),
    scale=st.floats(0.01, 1.0),
)
def test_crossover_and_mutation_stay_within_declared_bounds(
    seed: int, t1: float, t2: float, m1: int, m2: int, s1: str, s2: str, rate: float, scale: float
) -> None:
    rng = np.random.default_rng(seed)
    first = {"temperature": t1, "max_tokens": m1, "style": s1, "model": "small"}
    second = {"temperature": t2, "max_tokens": m2, "style": s2, "model": "large"}
    child = mutate(crossover(first, second, SPACE, rng), SPACE, rng, rate, scale)
    for key, spec in SPACE.items():
        assert param_problem(spec, child[key]) == "", (key, child[key])
    assert isinstance(child["max_tokens"], int)
    assert (
        min(t1, t2) - 1e-9
        <= crossover(first, second, SPACE, rng)["temperature"]
        <= max(t1, t2) + 1e-9
    )
    assert child["model"] == "small"  # undeclared params come from the first parent


def test_mutation_fills_a_missing_declared_param_from_its_bounds() -> None:
    child = mutate({}, SPACE, np.random.default_rng(0), rate=0.0, scale=0.1)
    assert set(child) == set(SPACE)


def test_child_prior_is_the_parents_mean_with_shrunk_capped_weight() -> None:
    a, b = child_prior([(80.0, 20.0), (60.0, 40.0)], shrink=0.5, cap=20.0, base=(1.0, 1.0))
    assert (a - 1) / (a + b - 2) == pytest.approx(0.7)
    assert a + b - 2 == pytest.approx(20.0)  # 0.5 × min(100, 100) = 50, capped at 20
    a, b = child_prior([(6.0, 4.0), (60.0, 40.0)], shrink=0.5, cap=20.0, base=(1.0, 1.0))
    assert a + b - 2 == pytest.approx(5.0)  # the weaker parent bounds the weight
    assert child_prior([(0.0, 0.0)], 0.5, 20.0, (1.0, 1.0)) == (1.0, 1.0)


def test_breed_crosses_top_arms_and_never_duplicates_an_existing_arm() -> None:
    evo = EvolutionConfig(params=SPACE, parents=2, mutation_rate=0.0)
    ranked = [
        ("a", {"temperature": 0.2, "max_tokens": 100, "style": "terse"}),
        ("b", {"temperature": 1.0, "max_tokens": 900, "style": "rich"}),
        ("c", {"temperature": 0.7, "max_tokens": 500, "style": "plain"}),
    ]
    out = breed(ranked, evo, np.random.default_rng(1), [p for _, p in ranked])
    assert out is not None
    params, parents = out
    assert sorted(parents) == ["a", "b"]
    assert params not in [p for _, p in ranked]
    assert 0.2 <= params["temperature"] <= 1.0 and 100 <= params["max_tokens"] <= 900


def test_retirement_needs_pulls_patience_and_keeps_min_active() -> None:
    evo = EvolutionConfig(
        params=SPACE, min_pulls=100, retire_below=0.05, retire_patience=2, min_active=2
    )
    p = {"a": 0.9, "b": 0.06, "c": 0.01, "d": 0.001, "e": 0.0}
    pulls = {"a": 900, "b": 500, "c": 500, "d": 500, "e": 50}
    counts, due = to_retire(p, pulls, {}, evo)
    assert counts == {"a": 0, "b": 0, "c": 1, "d": 1, "e": 0} and due == []
    counts, due = to_retire(p, pulls, counts, evo)
    assert due == ["d", "c"]
    _, due = to_retire({"a": 0.99, "b": 0.01}, {"a": 500, "b": 500}, {"b": 5}, evo)
    assert due == []  # min_active = 2


# --- configuration ----------------------------------------------------------------------------


def test_config_errors_name_the_field_the_value_and_the_fix() -> None:
    with pytest.raises(BanditConfigError) as err:
        parse_config("agent", {"arms": [{"arm_id": "bad id"}], "discount": 1.5})
    message = str(err.value)
    assert "bandit 'agent'" in message
    assert "config.arms[0].arm_id" in message and "'bad id'" in message
    assert "config.discount" in message and "1.5" in message
    assert "fix" in message


def test_config_rejects_duplicate_arms_and_out_of_bounds_params() -> None:
    with pytest.raises(BanditConfigError, match="duplicate arm_id 'a'"):
        parse_config("x", {"arms": [{"arm_id": "a"}, {"arm_id": "a"}]})
    with pytest.raises(BanditConfigError, match=r"param 'temperature': 3\.0 is outside"):
        parse_config(
            "x",
            {
                "arms": [{"arm_id": "a", "params": {"temperature": 3.0}}],
                "evolution": {"params": {"temperature": {"type": "float", "low": 0, "high": 2}}},
            },
        )
    with pytest.raises(BanditConfigError, match="does not fit backend 'postgres'"):
        parse_config(
            "x",
            {
                "arms": [{"arm_id": "a"}],
                "storage": {"backend": "postgres", "url": "sqlite:///x.db"},
            },
        )


def test_config_maps_to_dynamics_and_selection_rule() -> None:
    config = BanditConfig.model_validate(
        {
            "arms": [{"arm_id": "a"}],
            "discount": 0.99,
            "window": 500,
            "sampling": "thompson",
            "change_detection": {"method": "none", "reset": "arm"},
            "contexts": {"seed_strength": 3.0},
        }
    )
    dyn = config.dynamics()
    assert (dyn.discount, dyn.window, dyn.detect, dyn.reset) == (0.99, 500.0, False, "arm")
    rule = config.selection_rule()
    assert (rule.optimistic, rule.seed_strength) == (False, 3.0)
    off = BanditConfig.model_validate({"arms": [{"arm_id": "a"}], "contexts": {"enabled": False}})
    assert off.selection_rule().seed_strength == 0.0


def test_context_keys_are_canonical_restricted_and_bounded() -> None:
    assert context_key(None) == ""
    assert context_key({"task": "triage", "lang": "en"}) == "lang=en;task=triage"
    assert context_key({"lang": "en", "task": "triage"}) == context_key(
        {"task": "triage", "lang": "en"}
    )
    assert context_key({"task": "triage", "user": "u1"}, keys=["task"]) == "task=triage"
    assert context_key({"n": 3, "flag": True}) == "flag=true;n=3"
    long = context_key({"k": "x" * 500})
    assert long.startswith("sha256:") and len(long) == 71
