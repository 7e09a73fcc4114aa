"""``cache:`` on an LLM stage: reuse of earlier model answers (exact and semantic).

The run path is :mod:`workflows.interpreter.cache`; the entries live in the trace store
(:mod:`armature_temporal.store.cache`). Only answers of runs that completed, with no gate
rejected and no judge scoring the stage below 0.5, are ever served.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from armature_temporal.spec.fields import Seconds, _Model

__all__ = ["CACHE_DESCRIPTION", "StageCache"]

#: The description of ``Stage.cache`` (kept here so the stage model stays short).
CACHE_DESCRIPTION = (
    "Reuse earlier answers of this stage: exact (same provider, model, rendered messages and "
    "sampling params; on by default when the call's temperature is 0) and semantic (opt-in: a "
    "nearest earlier task of the same stage, tier, spec version and output schema that the "
    "pair classifier, or the cosine rule, calls the same question). Hits cost nothing and are "
    "traced as cache hits."
)


class StageCache(_Model):
    """How a stage reuses earlier answers (``armature cache stats|clear`` show and drop them)."""

    exact: bool | None = Field(
        None,
        description="Serve an identical earlier call's answer (key: provider, model, adapter, "
        "rendered messages, output mode and schema, temperature, max_tokens, provider params). "
        "Unset: on only when the call is deterministic by declaration (temperature 0).",
    )
    semantic: bool = Field(
        False,
        description="Serve the answer of the most similar earlier task (the embedded user "
        "message) of the same stage, tier, output schema and spec (version, per scope) when its "
        "cosine similarity is at least threshold.",
    )
    threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Cosine similarity a semantic hit needs under the rule (default: the "
        "cache's precision-tuned DEFAULT_THRESHOLD; `armature cache eval` scores a threshold). "
        "Setting it selects the rule unless decider says otherwise.",
    )
    decider: Literal["rule", "classifier"] | None = Field(
        None,
        description="What decides a semantic hit once the nearest earlier task is found: "
        "classifier (the pair model trained on the Quora pairs, "
        "armature_temporal/cache/pair_model.json: cosine at least its floor, no veto, its "
        "probability at least its threshold; threshold is not used) or rule (cosine at least "
        "threshold and no lexical veto). Unset: the classifier, or the rule when threshold is "
        "set. benchmarks/cache.py measures both on the same folds.",
    )

    @property
    def semantic_decider(self) -> str:
        """The decider in force: ``decider``, else the rule if ``threshold`` is set, else
        the classifier."""
        if self.decider is not None:
            return self.decider
        return "rule" if self.threshold is not None else "classifier"

    ttl: Seconds = Field(
        "7d",  # validated: 604800 seconds
        gt=0,
        validate_default=True,
        description="How long an entry may be served, e.g. '7d' (the default), '12h', '90m'.",
    )
    scope: Literal["spec_version", "spec"] = Field(
        "spec_version",
        description="Semantic hits from this spec version only (spec_version, the default: an "
        "edited spec starts cold) or from any version of the spec (spec).",
    )
    verify_tier: str | None = Field(
        None,
        description="A (cheap) tier asked to confirm each semantic hit before it is reused; a "
        "hit it does not confirm falls through to the model.",
    )
    max_entries: int = Field(
        10000, ge=1, description="Entries kept per stage; the oldest are evicted first."
    )
