"""Offline trials: a compiled plan with every model tier on the ``simulate`` provider.

``armature submit --simulate`` and ``armature run --simulate`` run a real spec this way, so that
a user can try it before spending money: no API keys, no network, no cost. Tier names and the
escalation ladder stay as they are, so every stage, arm, judge and escalation step still picks
the tier it would pick; only what answers changes.

A simulated plan is another spec version: its ``spec_hash`` is derived from the original's
(:func:`simulated_hash`), so the traces of an offline trial never mix with the HQS series,
dashboards and improvement-loop evidence of real runs. A plan whose tiers are all ``simulate``
already is returned as it is: its runs would be the same.
"""

from __future__ import annotations

import hashlib

from armature_temporal.spec.compiler import DEFAULT_SIMULATE_TIERS, Plan, ResolvedTier

__all__ = ["SIMULATE", "real_tiers", "simulated", "simulated_hash", "simulated_tier"]

#: Armature's offline provider.
SIMULATE = "simulate"

#: The ladder position a tier with a non-standard name is simulated as.
_CUSTOM_TIER_DEFAULTS = DEFAULT_SIMULATE_TIERS["large"]


def simulated_hash(spec_hash: str) -> str:
    """The ``spec_hash`` of the simulated copy of a plan whose hash is ``spec_hash``.

    Anyone holding the original hash can tell whether a trace came from an offline trial of
    that version: ``trace.spec_hash == simulated_hash(plan.spec_hash)``.
    """
    return hashlib.sha256(f"{spec_hash}+{SIMULATE}".encode()).hexdigest()


def simulated_tier(tier: ResolvedTier) -> ResolvedTier:
    """``tier`` on the simulate provider.

    A ``simulate`` tier is returned unchanged (its ``valid_rate`` and ``quality`` are the
    author's). Any other keeps its name, ``temperature`` and ``max_tokens`` and drops what
    only a real model reads (``model``, ``api_base``, ``api_key_env``, ``params``,
    ``adapter``); its ``valid_rate`` and ``quality`` are the simulate defaults of a standard
    tier of the same name (:data:`~armature_temporal.spec.compiler.DEFAULT_SIMULATE_TIERS`),
    those of ``large`` for any other name.
    """
    if tier.provider == SIMULATE:
        return tier
    knobs = DEFAULT_SIMULATE_TIERS.get(tier.name, _CUSTOM_TIER_DEFAULTS)
    # model_copy keeps any field this module does not know about; the ones set here are the
    # provider-specific ones, which would mean nothing (or, for params, go nowhere) offline.
    return tier.model_copy(
        update={
            "provider": SIMULATE,
            "model": None,
            "api_base": None,
            "api_key_env": None,
            "params": {},
            "adapter": None,
            "valid_rate": knobs["valid_rate"],
            "quality": knobs["quality"],
            "latency_ms": 0.0,
        }
    )


def simulated(plan: Plan) -> Plan:
    """A copy of ``plan`` whose every tier, and every inlined child plan's (recursively), is
    on the simulate provider, with a ``spec_hash`` that says so.

    Returns ``plan`` itself when nothing would change (every tier is ``simulate`` already).
    """
    tiers = {name: simulated_tier(tier) for name, tier in plan.tiers.items()}
    children = {sid: simulated(child) for sid, child in plan.children.items()}
    unchanged = all(tiers[name] is plan.tiers[name] for name in tiers) and all(
        children[sid] is plan.children[sid] for sid in children
    )
    if unchanged:
        return plan
    return plan.model_copy(
        update={
            "tiers": tiers,
            "children": children,
            "spec_hash": simulated_hash(plan.spec_hash),
        }
    )


def real_tiers(plan: Plan) -> list[tuple[str, ResolvedTier]]:
    """Every tier of ``plan`` and its children that is not ``simulate``, as
    ``(plan name, tier)`` pairs, the parent's first (what :func:`simulated` replaces)."""
    found = [(plan.name, t) for t in plan.tiers.values() if t.provider != SIMULATE]
    for child in plan.children.values():
        found += real_tiers(child)
    return found
