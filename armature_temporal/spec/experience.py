"""The ``experience:`` section: the heuristics memory of a spec (lessons learned from earlier
runs, kept in the trace store), how many of them a prompt carries, and how they earn their place.

:class:`Experience` is what a spec writes; :class:`ExperienceConfig` is what the compiler puts
in ``Plan.experience`` (the distiller tier resolved). :func:`experience_problems` holds the checks
that need the spec's tiers (run by :func:`armature_temporal.spec.checks.check_spec`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pydantic import Field

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.fields import _Model

__all__ = ["Experience", "ExperienceConfig", "compile_experience", "experience_problems"]


class Experience(_Model):
    """Heuristics memory: lessons distilled from earlier runs, replay-tested, and compiled into
    later prompts (a "Lessons learned from earlier runs" block in the system message)."""

    enabled: bool = Field(
        True,
        description="false: no lesson is injected, rewarded or learned (the stored ones stay).",
    )
    top_k: int = Field(
        3, ge=1, le=20, description="At most this many promoted lessons in a stage's prompt."
    )
    token_budget: int = Field(
        300,
        ge=10,
        le=8000,
        description="Size limit of the Lessons block in tokens (counted as characters / 4); "
        "lessons that do not fit are left out.",
    )
    schedule: str | None = Field(
        None,
        description="Cron for the Learn schedule (distil + memory CI) that `armature schedule` "
        "creates; none: run `armature learn` yourself.",
    )
    verify_runs: int = Field(
        8,
        ge=2,
        le=100,
        description="Paired replay runs (recent real inputs, with and without the lesson) per "
        "memory-CI test of a quarantined lesson.",
    )
    distiller_tier: str | None = Field(
        None, description="Tier that distils lessons from trajectories (default: the last tier)."
    )
    critic_tier: str | None = Field(
        None,
        description="Tier that scores stage outputs 0-10 with evidence (default: the largest "
        "tier other than the stage's own).",
    )
    embedding_model: str | None = Field(
        None,
        description="Embeddings for relevance: 'lexical', a litellm embedding model, or none "
        "(the local model of the `embed` extra if installed, else lexical).",
    )
    retire_below: float = Field(
        0.3,
        ge=0,
        le=1,
        description="A promoted lesson whose posterior mean utility (the rewards of the stages "
        "it was in) is under this after min_uses uses is retired.",
    )
    min_uses: int = Field(10, ge=1, description="Uses before retire_below applies.")
    reverify_after_days: int = Field(
        30,
        ge=0,
        le=3650,
        description="A promoted lesson last verified (by memory CI or promoted by a person) "
        "longer ago than this is replay-tested again in the next learning round, against the "
        "promoted set without it: it stays promoted only if it still helps, else it is "
        "retired. 0: never re-verify.",
    )


class ExperienceConfig(_Model):
    """``experience:`` as the plan carries it: the spec's values, ``distiller_tier`` resolved
    (``critic_tier`` depends on the stage: :meth:`critic_for`)."""

    enabled: bool = True
    top_k: int = 3
    token_budget: int = 300
    schedule: str | None = None
    verify_runs: int = 8
    distiller_tier: str
    critic_tier: str | None = None
    embedding_model: str | None = None
    retire_below: float = 0.3
    min_uses: int = 10
    reverify_after_days: int = 30

    def critic_for(self, actor_tier: str, ladder: Sequence[str]) -> str:
        """The tier that critiques a stage run on ``actor_tier``: ``critic_tier`` if declared,
        else the largest tier of ``ladder`` other than the actor's (the actor's own when it is
        the only one)."""
        if self.critic_tier is not None:
            return self.critic_tier
        others = [t for t in ladder if t != actor_tier]
        return others[-1] if others else actor_tier


def compile_experience(
    experience: Experience | None, ladder: Sequence[str]
) -> ExperienceConfig | None:
    """The plan's form of ``experience:`` (None without the section)."""
    if experience is None:
        return None
    values = experience.model_dump()
    values["distiller_tier"] = experience.distiller_tier or ladder[-1]
    return ExperienceConfig(**values)


def experience_problems(
    experience: Experience, tiers: Sequence[str]
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """``(path, message)`` for each tier ``experience:`` names that the spec does not define."""
    for field in ("distiller_tier", "critic_tier"):
        tier = getattr(experience, field)
        if tier is not None and tier not in tiers:
            yield (
                ("experience", field),
                f"unknown tier {tier!r}; defined tiers: {list(tiers)}{did_you_mean(tier, tiers)}",
            )
