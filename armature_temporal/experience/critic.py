"""The critic: after a run, each completed LLM stage's output scored 0–10 with evidence.

The critic reads only the stage's task (its role prompt) and its output, with the actor's
self-assessment fields (``confidence``, ``self_score``, …) taken out, on a tier other than
the actor's (``experience.critic_tier``, else the largest tier that is not the actor's). Its
scores split a stage's trajectories into successes and failures for the distiller
(:mod:`.distill`); they never change the run's outcome or its HQS.

On a ``simulate`` tier the score comes from the simulator's ground truth
(:func:`~armature_temporal.runtime.simulate.simulate_critique`: the output's latent quality
plus the critic tier's declared noise); on a real tier it is the model's JSON answer
``{"score": 0..10, "evidence": [quotes]}``, evidence kept only where it quotes the output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.spec.compiler import Plan, ResolvedTier
from armature_temporal.spec.simulation import Pitfall

__all__ = [
    "CRITIC_SCHEMA",
    "SELF_ASSESSMENT_KEYS",
    "CritiqueInput",
    "CritiqueResult",
    "critic_messages",
    "critic_tier",
    "critic_view",
    "output_text",
    "read_critique",
]

#: Output fields in which an actor grades itself; the critic never sees them.
SELF_ASSESSMENT_KEYS = frozenset(
    {"confidence", "self_score", "self_assessment", "self_rating", "certainty", "self_grade"}
)
#: Characters of the output the critic reads.
CRITIC_OUTPUT_CHARS = 6000
CRITIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 10},
        "evidence": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
    "required": ["score", "evidence"],
}
CRITIC_SYSTEM = (
    "You are a strict critic. You are shown a task and the answer another model gave. Score "
    "how well the answer does the task from 0 (useless) to 10 (excellent), and quote up to "
    "five short passages of the answer that justify the score, copied exactly. Reply with "
    'only JSON: {"score": <0-10>, "evidence": ["<quote>", ...]}.'
)


class CritiqueInput(BaseModel):
    """One stage's output for the critic (the ``critique`` activity's input)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    spec_name: str
    stage_id: str
    task: str
    output: Any = None
    tier: ResolvedTier
    seed: str
    latent_quality: float | None = None
    pitfalls: list[Pitfall] = Field(default_factory=list)


class CritiqueResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    score: float  # 0..10
    evidence: list[str] = Field(default_factory=list)
    critic_tier: str
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0


def critic_tier(plan: Plan, actor_tier: str) -> str:
    """The tier that critiques a stage run on ``actor_tier``: the experience section's choice
    (:meth:`~armature_temporal.spec.experience.ExperienceConfig.critic_for`) unless that is
    the actor's own tier, else the largest tier that is not the actor's (the actor's own only
    when the spec has one tier)."""
    config = plan.experience
    chosen = config.critic_for(actor_tier, plan.tier_ladder) if config is not None else None
    if chosen is not None and chosen in plan.tiers and chosen != actor_tier:
        return chosen
    others = [t for t in plan.tier_ladder if t != actor_tier]
    return others[-1] if others else actor_tier


def critic_view(output: Any) -> Any:
    """The output as the critic sees it: every self-assessment field removed, at any depth."""
    if isinstance(output, dict):
        return {
            k: critic_view(v) for k, v in output.items() if k.lower() not in SELF_ASSESSMENT_KEYS
        }
    if isinstance(output, list):
        return [critic_view(v) for v in output]
    return output


def output_text(output: Any) -> str:
    """An output's text as a reader sees it: a string as is, a text stage's ``content``, else
    every string value (self-assessment fields left out) one per line."""
    if isinstance(output, str):
        return output
    parts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(critic_view(output))
    return "\n".join(parts)


def critic_messages(task: str, output: Any) -> list[dict[str, Any]]:
    """The real critic's prompt: the task and the output (self-assessment removed)."""
    shown = critic_view(output)
    text = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, default=str)
    if len(text) > CRITIC_OUTPUT_CHARS:
        text = text[:CRITIC_OUTPUT_CHARS] + "...[truncated]"
    return [
        {"role": "system", "content": CRITIC_SYSTEM},
        {"role": "user", "content": f"Task:\n{task}\n\nAnswer:\n{text}"},
    ]


def read_critique(value: Any, output: Any) -> tuple[float, list[str]] | None:
    """Score (clipped to 0..10) and the evidence that really quotes the output, from a real
    critic's parsed answer; None when the answer has no numeric score."""
    if not isinstance(value, dict):
        return None
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        return None
    haystack = output_text(output)
    raw: Sequence[Any] = value.get("evidence") or []
    evidence = [q for q in raw if isinstance(q, str) and q.strip() and q.strip() in haystack]
    return min(10.0, max(0.0, float(score))), evidence[:5]
