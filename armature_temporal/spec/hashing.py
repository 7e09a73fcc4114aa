"""What the spec's hashes leave out: fields newer than most specs, while a spec leaves them
unset or at their default, so that a spec which does not use them keeps its ``spec_hash`` and
policy version when Armature gains them (:func:`unused_newer_fields`, the ``exclude`` of
``Spec.model_dump`` the compiler hashes)."""

from __future__ import annotations

from typing import Any

from armature_temporal.spec.models import Spec

__all__ = ["unused_newer_fields"]

#: Fields newer than most specs, left out of the hashes while unset (None), per model.
_NEWER_ROLE_FIELDS = ("context", "max_tokens_total", "max_cost_usd", "deadline")
_NEWER_TIER_FIELDS = ("context_window",)
#: Newer fields left out of the hashes while at their default, with that default.
_NEWER_STAGE_FIELDS = (("retrieve", None), ("bandit", None), ("reward_cost_per_1k_tokens", 0.0))
_ROLE_REASONING = (("reason_first", False), ("reasoning_tier", None), ("reasoning_prompt", None))
_ARM_REASONING = (("reason_first", None), ("reasoning_tier", None), ("reasoning_prompt", None))
_NEWER_FINETUNE_FIELDS = (
    ("use_dora", False),
    ("continual", False),
    ("orthogonality_weight", 1.0),
    ("method", "sft"),
)


def _unused_si_fields(si: Any) -> dict[str, Any]:
    """self_improvement's fields newer than most specs, left at their defaults."""
    left: dict[str, Any] = {}
    if si.cases is None:
        left["cases"] = True
    if si.search_runs == 0:
        left["search_runs"] = True
    return left


def unused_newer_fields(spec: Spec) -> dict[str, Any]:
    """The ``exclude`` of ``spec.model_dump`` for the hashes: fields newer than most specs
    that this one leaves unset, so that a spec which does not use them keeps its spec_hash."""
    unused: dict[str, Any] = {} if spec.http_safe else {"http_safe": True}
    if spec.context is None:
        unused["context"] = True
    if spec.knowledge is None:
        unused["knowledge"] = True
    si = spec.self_improvement
    if si is not None and (left_si := _unused_si_fields(si)):
        unused["self_improvement"] = left_si

    ft = spec.finetune
    if ft is not None:
        unused_ft = {f: True for f, default in _NEWER_FINETUNE_FIELDS if getattr(ft, f) == default}
        if unused_ft:
            unused["finetune"] = unused_ft
    stages: dict[int, Any] = {}
    for i, stage in enumerate(spec.stages):
        left: dict[str, Any] = {"network": True} if stage.network is None else {}
        for name, default in _NEWER_STAGE_FIELDS:
            if getattr(stage, name) == default:
                left[name] = True
        if stage.role is not None:
            role = {f: True for f in _NEWER_ROLE_FIELDS if getattr(stage.role, f) is None}
            role |= {f: True for f, d in _ROLE_REASONING if getattr(stage.role, f) == d}
            if role:
                left["role"] = role
        arms = {
            k: fields
            for k, arm in enumerate(stage.arms)
            if (fields := {f: True for f, d in _ARM_REASONING if getattr(arm, f) == d})
        }
        if arms:
            left["arms"] = arms
        if stage.cache is not None and stage.cache.decider is None:
            left["cache"] = {"decider": True}
        if left:
            stages[i] = left
    if stages:
        unused["stages"] = stages
    tiers = {
        name: {f: True for f in _NEWER_TIER_FIELDS if getattr(tier, f) is None}
        for name, tier in spec.model_tiers.items()
    }
    if tiers := {name: fields for name, fields in tiers.items() if fields}:
        unused["model_tiers"] = tiers
    return unused
