"""Distillation: lessons read off a stage's recent trajectories by the distiller tier.

A trajectory is one run's output of one LLM stage (not a judge) with the scores it got: the
critic's (``critique`` records, 0–10, read as 0–1) and the judges' that depend on the stage.
Its score is the mean of those; a stage's trajectories below their median, or below 0.5, are
its failures, the rest its successes. The distiller is shown both, with their scores:

- ``simulate`` tier: :func:`~armature_temporal.runtime.simulate.simulate_lessons` over the
  failures and the stage's declared pitfalls (it states a pitfall's lesson only when the
  pitfall's symptom is in a failure it was shown, and sometimes a harmless useless one);
- a real tier: one JSON answer ``{"lessons": [{"text", "kind"}]}``.

Nothing distilled is trusted: every lesson goes through admission (scan, merge, quarantine)
and memory CI's replay test before any prompt carries it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.experience.critic import output_text
from armature_temporal.spec.compiler import Plan, PlanStage, ResolvedTier
from armature_temporal.views.report import RunTrace

__all__ = [
    "DISTILL_SCHEMA",
    "FAILURE_BELOW",
    "MAX_LESSONS",
    "TRAJECTORIES",
    "DistilledLesson",
    "Trajectory",
    "distill_messages",
    "distill_stage",
    "distiller_tier",
    "gather",
    "learnable",
    "split",
]

#: Newest trajectories of a stage the distiller is shown (successes and failures each).
TRAJECTORIES = 20
#: A trajectory scored under this (0..1) is a failure whatever the median.
FAILURE_BELOW = 0.5
#: Lessons kept from one distiller answer per stage.
MAX_LESSONS = 3
#: Longest lesson kept (characters); a longer one is not a short lesson.
MAX_LESSON_CHARS = 400
#: Characters of one trajectory the real distiller is shown.
TRAJECTORY_CHARS = 1500

Kind = Literal["strategic", "procedural", "tool_tip"]
DISTILL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "lessons": {
            "type": "array",
            "maxItems": MAX_LESSONS,
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": MAX_LESSON_CHARS},
                    "kind": {"enum": ["strategic", "procedural", "tool_tip"]},
                },
                "required": ["text", "kind"],
            },
        }
    },
    "required": ["lessons"],
}
DISTILL_SYSTEM = (
    "You study how an AI assistant did one step of a workflow across several runs, each "
    "scored from 0 to 1 by a critic and judges. Find what the low-scored answers did wrong "
    "that the high-scored ones did not, and write at most three short, general, imperative "
    "lessons that would avoid it next time (one sentence each; no run-specific details). "
    "kind: strategic (what to aim for), procedural (how to do it) or tool_tip (how to use a "
    'tool). Reply with only JSON: {"lessons": [{"text": "...", "kind": "procedural"}]}. '
    'Reply {"lessons": []} when the failures show nothing to learn.'
)


class Trajectory(BaseModel):
    """One run's output of one stage, with the scores it got (each 0..1; None: none)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    stage_id: str
    text: str
    critic: float | None = None
    judge: float | None = None

    @property
    def score(self) -> float | None:
        got = [s for s in (self.critic, self.judge) if s is not None]
        return sum(got) / len(got) if got else None


class DistilledLesson(BaseModel):
    """A lesson the distiller stated for a stage, before admission."""

    model_config = ConfigDict(frozen=True)

    stage_id: str
    text: str
    kind: Kind
    provenance: list[str] = Field(default_factory=list)
    pitfall_id: str | None = None


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def distiller_tier(plan: Plan) -> str:
    """``experience.distiller_tier``, else the spec's last (largest) tier."""
    config = plan.experience
    if config is not None and config.distiller_tier in plan.tiers:
        assert config.distiller_tier is not None
        return config.distiller_tier
    return plan.tier_ladder[-1]


def learnable(plan: Plan) -> list[PlanStage]:
    """The stages lessons are learnt for: LLM stages that are not judges."""
    return [
        s for s in plan.stages if s.kind == "llm" and s.role is not None and s.role.type != "judge"
    ]


def gather(plan: Plan, runs: Sequence[RunTrace]) -> dict[str, list[Trajectory]]:
    """Each learnable stage's trajectories in ``runs`` (verification runs left out), newest
    first: the completed stage's output, its critic score and its judges' mean score."""
    judges = {
        s.id: [d for d in s.depends_on]
        for s in plan.stages
        if s.role is not None and s.role.type == "judge"
    }
    wanted = {s.id for s in learnable(plan)}
    found: dict[str, list[Trajectory]] = {sid: [] for sid in wanted}
    for run in sorted(runs, key=lambda r: r.started_at, reverse=True):
        if run.verification:
            continue
        outputs: dict[str, Any] = {}
        critic: dict[str, float] = {}
        judged: dict[str, list[float]] = {}
        for r in run.records:
            if r.stage_id is None:
                continue
            if r.kind == "stage" and r.status == "completed" and r.stage_id in wanted:
                outputs[r.stage_id] = r.output
            elif r.kind == "critique" and isinstance(r.data.get("score"), int | float):
                critic[r.stage_id] = float(r.data["score"]) / 10
            elif r.kind == "stage" and r.stage_id in judges and r.judge_score is not None:
                for target in judges[r.stage_id]:
                    judged.setdefault(target, []).append(r.judge_score)
        for sid, output in outputs.items():
            scores = judged.get(sid)
            found[sid].append(
                Trajectory(
                    run_id=run.run_id,
                    stage_id=sid,
                    text=output_text(output),
                    critic=critic.get(sid),
                    judge=sum(scores) / len(scores) if scores else None,
                )
            )
    return found


def split(trajectories: Sequence[Trajectory]) -> tuple[list[Trajectory], list[Trajectory]]:
    """(successes, failures) among the scored trajectories, newest first, at most
    :data:`TRAJECTORIES` each. A failure scores under the stage's median or under
    :data:`FAILURE_BELOW`; unscored trajectories are left out."""
    scored = [t for t in trajectories if t.score is not None]
    if not scored:
        return [], []
    median = statistics.median(t.score for t in scored if t.score is not None)
    failures = [
        t for t in scored if t.score is not None and (t.score < median or t.score < FAILURE_BELOW)
    ]
    successes = [t for t in scored if t not in failures]
    return successes[:TRAJECTORIES], failures[:TRAJECTORIES]


def distill_messages(
    stage: PlanStage, successes: Sequence[Trajectory], failures: Sequence[Trajectory]
) -> list[dict[str, Any]]:
    """The real distiller's prompt: the step's task, then scored successes and failures."""
    assert stage.role is not None

    def block(title: str, items: Sequence[Trajectory]) -> str:
        shown = [
            f"- score {t.score:.2f}: {json.dumps(t.text[:TRAJECTORY_CHARS], ensure_ascii=False)}"
            for t in items
        ]
        return f"{title}:\n" + ("\n".join(shown) if shown else "(none)")

    user = "\n\n".join(
        [
            f"The step ({stage.id}) is asked:\n{stage.role.prompt}",
            block("Low-scored answers", failures),
            block("High-scored answers", successes),
        ]
    )
    return [{"role": "system", "content": DISTILL_SYSTEM}, {"role": "user", "content": user}]


def _read_lessons(value: Any) -> list[tuple[str, Kind]]:
    if not isinstance(value, dict) or not isinstance(value.get("lessons"), list):
        return []
    kept: list[tuple[str, Kind]] = []
    for item in value["lessons"][:MAX_LESSONS]:
        text = item.get("text") if isinstance(item, dict) else None
        if isinstance(text, str) and text.strip() and len(text) <= MAX_LESSON_CHARS:
            kind = item.get("kind")
            known = kind in ("strategic", "procedural", "tool_tip")
            kept.append((text.strip(), kind if known else "procedural"))
    return kept


async def distill_stage(
    stage: PlanStage,
    tier: ResolvedTier,
    successes: Sequence[Trajectory],
    failures: Sequence[Trajectory],
    *,
    seed: str,
) -> list[DistilledLesson]:
    """The distiller's lessons for one stage (none without failures to learn from). Raises
    ProviderError when a real tier's provider fails."""
    if not failures:
        return []
    provenance = [t.run_id for t in failures]
    if tier.provider == "simulate":
        from armature_temporal.runtime.simulate import simulate_lessons

        pitfalls = list(stage.simulate.pitfalls) if stage.simulate is not None else []
        by_id = {p.id: p for p in pitfalls}
        stated = simulate_lessons(
            seed=seed,
            trajectories=[t.text for t in failures],
            pitfalls=pitfalls,
            distiller_quality=tier.quality,
        )
        lessons = []
        for s in stated:
            pitfall = by_id.get(s.pitfall_id) if s.pitfall_id else None
            runs = (
                [t.run_id for t in failures if _norm(pitfall.symptom) in _norm(t.text)]
                if pitfall is not None
                else provenance
            )
            lessons.append(
                DistilledLesson(
                    stage_id=stage.id,
                    text=s.text,
                    kind=s.kind,
                    provenance=runs or provenance,
                    pitfall_id=s.pitfall_id,
                )
            )
        return lessons
    from armature_temporal.runtime.llm import complete
    from armature_temporal.runtime.parsing import parse_output

    answer = await complete(
        tier,
        distill_messages(stage, successes, failures),
        seed=seed,
        role_type="worker",
        output_mode="json",
        output_schema=DISTILL_SCHEMA,
        temperature=0.2,
    )
    # Schema-invalid answers still count item by item: a malformed lesson is dropped, the
    # well-formed ones beside it kept.
    parsed = parse_output(answer.text, "json", DISTILL_SCHEMA)
    return [
        DistilledLesson(stage_id=stage.id, text=text, kind=kind, provenance=provenance)
        for text, kind in _read_lessons(parsed.value)
    ]
