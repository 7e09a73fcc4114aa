"""Spec arms beyond plain Thompson sampling: context keys, and evolution of a stage's arms.

A spec stage's bandit (``<spec>:<stage>``) is a :class:`~._runtime.BanditRuntime` whose
config arms are the spec's ``arms``. A stage's ``bandit:`` block (:mod:`armature_temporal.spec
.arm_policy`) adds:

- **Context**: the decision is filed under a key of run-input values
  (:meth:`~armature_temporal.spec.arm_policy.ArmContext.features`, in the workflow) and an
  embedding bucket of one input (:func:`bucket_of`, in the selecting activity) — the signs of
  :data:`PROJECTIONS_SEED`-fixed random projections of the text's embedding, so similar tasks
  share a bucket. A context's posterior
  is the global one until it has evidence of its own (``seeded_posterior``).
- **Evolution** (:func:`evolve`): once the bandit has ``evolve.after`` rewarded decisions, each
  maintenance round may retire bred arms that lose (P(best) below ``retire_below`` for
  :data:`RETIRE_ROUNDS` rounds with :data:`RETIRE_PULLS` pulls; two arms stay active; the spec's own
  arms leave only when the spec drops them) and breed one child of
  the two best arms (by posterior mean, ``min_pulls`` each): its tier, prompt and each declared
  param come from either parent (numeric params blended within bounds), or — with
  ``mutate_prompt``, for every other child, the first included — it is the best arm with its
  prompt rewritten by the refiner tier (a crossover when the refiner proposes nothing). A child is
  stored only after the prompt-input scanner finds nothing in its prompt and the spec validator
  accepts the spec with the child added; a refused child counts against ``budget`` and is
  logged (``arm_refused``) with the reason. A bred arm's tier, prompt and params are kept in
  its record under :data:`ARM_KEY`, so every worker can run it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from armature_temporal.bandit._math import p_best
from armature_temporal.bandit._models import ArmRecord, BanditEvent
from armature_temporal.bandit._runtime import BanditRuntime
from armature_temporal.spec.arm_policy import ArmEvolution

__all__ = [
    "ARM_KEY",
    "RETIRE_ROUNDS",
    "EvolutionRound",
    "arm_definition",
    "bucket_of",
    "crossover_arms",
    "evolve",
]

#: Where a bred arm's definition (model_tier, prompt, params) lives in its record's params.
ARM_KEY = "_arm"
#: Seed of the fixed random projections that bucket embeddings (never change: keys would).
PROJECTIONS_SEED = 20_261_204
#: Consecutive maintenance rounds below ``retire_below`` before a bred arm retires.
RETIRE_ROUNDS = 2
#: Pulls a bred arm needs before it may retire (Thompson sampling stops pulling a clear loser
#: early, so waiting for ``min_pulls`` would keep it forever).
RETIRE_PULLS = 3


def bucket_of(vector: Sequence[float], buckets: int) -> int:
    """The bucket (0 … buckets-1) of a unit vector: the sign bits of its dot products with
    ``log2(buckets)`` fixed Gaussian directions (random-hyperplane hashing)."""
    bits = int(buckets).bit_length() - 1
    v = np.asarray(vector, dtype=float)
    planes = np.random.default_rng(PROJECTIONS_SEED).normal(size=(bits, v.size))
    signs = planes @ v > 0
    return int(sum(1 << i for i, s in enumerate(signs) if s))


def arm_definition(
    record: ArmRecord, declared: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """An arm's tier, prompt and params: a bred arm's from its record, a declared one's from
    the compiled spec (``declared``: arm id → its compiled ``PlanArm`` as a dict); ``None``
    for an arm the spec no longer declares."""
    if ARM_KEY in record.params:
        return dict(record.params[ARM_KEY])
    found = declared.get(record.arm_id)
    return None if found is None else dict(found)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def key(arm: Mapping[str, Any]) -> tuple[Any, ...]:
        return (
            arm.get("model_tier"),
            arm.get("prompt"),
            arm.get("params") or {},
            arm.get("reasoning"),
        )

    return key(a) == key(b)


def crossover_arms(
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    space: Mapping[str, Mapping[str, Any]],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """A child of two arm definitions: tier, prompt and reasoning (``reason_first``) each from
    either parent; a declared
    numeric param a random point between the parents' values (from its bounds when neither has
    it), a declared choice either parent's; undeclared params from the parent whose prompt the
    child took."""
    take_tier = first if rng.random() < 0.5 else second
    take_prompt = first if rng.random() < 0.5 else second
    params = dict(take_prompt.get("params") or {})
    for name, bounds in space.items():
        a = (first.get("params") or {}).get(name)
        b = (second.get("params") or {}).get(name)
        if "choices" in bounds:
            options = [v for v in (a, b) if v is not None] or list(bounds["choices"])
            params[name] = options[int(rng.integers(len(options)))]
            continue
        low, high = float(bounds["low"]), float(bounds["high"])
        lo_v = low if a is None else float(a)
        hi_v = high if b is None else float(b)
        point = lo_v + rng.random() * (hi_v - lo_v)
        value = min(max(point, low), high)
        # Whole numbers stay whole when the bounds and the parents' values all are.
        known = [x for x in (bounds["low"], bounds["high"], a, b) if x is not None]
        is_int = all(isinstance(x, int) and not isinstance(x, bool) for x in known)
        params[name] = round(value) if is_int else round(value, 4)
    child: dict[str, Any] = {
        "model_tier": take_tier.get("model_tier"),
        "prompt": take_prompt.get("prompt"),
        "params": params,
    }
    # Reasoning before acting (reason_first) is one more gene: either parent's.
    take_reasoning = first if rng.random() < 0.5 else second
    if take_reasoning.get("reasoning"):
        child["reasoning"] = dict(take_reasoning["reasoning"])
    return child


@dataclass
class EvolutionRound:
    """What one maintenance round did to a stage's arms."""

    name: str
    unlocked: bool
    decisions: int
    retired: list[str] = field(default_factory=list)
    bred: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    note: str = ""


Admit = Callable[[dict[str, Any]], str | None]


def evolve(
    runtime: BanditRuntime,
    policy: ArmEvolution,
    declared: Mapping[str, Mapping[str, Any]],
    admit: Admit,
    *,
    propose_prompt: Callable[[dict[str, Any]], str | None] | None = None,
    at: str | None = None,
) -> EvolutionRound:
    """One round of evolution for a stage's bandit (see the module docstring).

    Args:
        runtime: The stage's bandit.
        policy: The stage's ``bandit.evolve``.
        declared: The compiled spec's arms, arm id → ``PlanArm`` dict.
        admit: The admission check of a child definition: ``None`` to admit, else why not
            (the scanner's and the validator's verdicts).
        propose_prompt: With ``mutate_prompt``: the refiner's rewrite of a parent's prompt
            (``None`` when it has none).
    """
    name = runtime.name
    at = at or runtime._at()
    rng = runtime.rng()
    records = [r for r in runtime.backend.arm_records(name) if r.status == "active"]
    stats = runtime.backend.stats(name, "")
    decisions = sum(s.rewarded for s in stats.values())
    result = EvolutionRound(name=name, unlocked=decisions >= policy.after, decisions=decisions)
    if not result.unlocked:
        result.note = f"{decisions} of {policy.after} rewarded decisions: evolution still locked"
        return result
    reports = {a.arm_id: a for a in runtime.arms()}
    events: list[BanditEvent] = []
    # Retire: P(best) below the bar for RETIRE_ROUNDS rounds, with enough pulls.
    alpha = np.array([reports[r.arm_id].alpha for r in records])
    beta = np.array([reports[r.arm_id].beta for r in records])
    best = p_best(alpha, beta, rng, runtime.config.p_best_draws)
    room = len(records) - 2
    ranked_low = sorted(zip(records, best, strict=True), key=lambda rb: rb[1])
    for record, p in ranked_low:
        if record.origin != "evolved":
            continue  # the spec's own arms leave when the spec drops them
        pulls = reports[record.arm_id].pulls
        low = record.low_rounds + 1 if pulls >= RETIRE_PULLS and p < policy.retire_below else 0
        if low >= RETIRE_ROUNDS and room > 0:
            runtime.backend.set_arm(name, record.arm_id, status="retired", retired_at=at)
            room -= 1
            result.retired.append(record.arm_id)
            events.append(
                BanditEvent(
                    at=at,
                    kind="arm_retired",
                    arm_id=record.arm_id,
                    detail={
                        "reason": f"P(best) below {policy.retire_below} for {RETIRE_ROUNDS} "
                        f"maintenance rounds, after {pulls} pulls",
                        "p_best": float(p),
                        "pulls": pulls,
                    },
                )
            )
        elif low != record.low_rounds:
            runtime.backend.set_arm(name, record.arm_id, low_rounds=low)
    every = runtime.backend.arm_records(name)
    spent = sum(1 for r in every if r.origin == "evolved") + sum(
        1 for e in runtime.events() if e.kind == "arm_refused"
    )
    active = [r for r in records if r.arm_id not in result.retired]
    defined = {r.arm_id: d for r in every if (d := arm_definition(r, declared)) is not None}
    parents = sorted(
        (r for r in active if reports[r.arm_id].pulls >= policy.min_pulls and r.arm_id in defined),
        key=lambda r: -reports[r.arm_id].mean,
    )[:2]
    if spent >= policy.budget:
        result.note = f"budget spent ({spent} of {policy.budget} bred or refused)"
    elif len(active) >= policy.max_arms:
        result.note = f"{len(active)} active arms: max_arms {policy.max_arms} reached"
    elif len(parents) < 2:
        result.note = f"fewer than two arms with {policy.min_pulls} pulls to breed from"
    else:
        defs = [defined[p.arm_id] for p in parents]
        existing = list(defined.values())
        child: dict[str, Any] | None = None
        how = "crossover"
        if policy.mutate_prompt and propose_prompt is not None and spent % 2 == 0:
            rewrite = propose_prompt(defs[0])
            if rewrite:
                child, how = {**defs[0], "prompt": rewrite}, "prompt rewritten by the refiner"
        for _ in range(20 if child is None else 1):
            candidate = child or crossover_arms(defs[0], defs[1], policy.params, rng)
            if not any(_same(candidate, e) for e in existing):
                child = candidate
                break
            child = None
        if child is None:
            result.note = "every child of the best two arms already exists"
        else:
            gen = max(p.generation for p in parents) + 1
            arm_id = f"evo.g{gen}.{int(rng.integers(16**6)):06x}"
            parent_ids = [p.arm_id for p in parents]
            reason = admit(child)
            if reason is not None:
                result.refused.append((arm_id, reason))
                events.append(
                    BanditEvent(
                        at=at,
                        kind="arm_refused",
                        arm_id=arm_id,
                        detail={"parents": parent_ids, "arm": child, "reason": reason, "how": how},
                    )
                )
            else:
                record = ArmRecord(
                    arm_id=arm_id,
                    params={**(child.get("params") or {}), ARM_KEY: child},
                    origin="evolved",
                    parents=parent_ids,
                    generation=gen,
                    position=len(every),
                    created_at=at,
                )
                if runtime.backend.add_arm(name, record):
                    result.bred.append(arm_id)
                    events.append(
                        BanditEvent(
                            at=at,
                            kind="arm_bred",
                            arm_id=arm_id,
                            detail={"parents": parent_ids, "arm": child, "how": how},
                        )
                    )
    runtime.backend.log(name, events)
    return result
