"""Which lessons may enter one prompt: the last check between the memory and a model.

:func:`prompt_lessons` takes the lessons a stage execution asked for (the prompt compiler's
choice among promoted ones, or the ids a run was given) and keeps only those that may enter
its prompt:

- a **judge stage's** prompt carries none: memory CI measures a lesson with the spec's judges,
  so a lesson in a judge's prompt would move the measure of itself;
- a **promoted** lesson may;
- a **quarantined** one only in a verification run (memory CI's replay of it, which never
  acts): quarantine is not admission;
- a **rejected**, **retired** or unscreened (``candidate``) one never;
- and none whose text today's immune scan flags, whatever its status: a lesson admitted before
  the scanner learnt a form stays out of prompts from the day it does.

Pure; the activity that loads lessons (``load_lessons``) calls it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from armature_temporal.experience.immune import screen
from armature_temporal.experience.models import Heuristic

__all__ = ["Refusal", "prompt_lessons"]


class Refusal(BaseModel):
    """A lesson kept out of a prompt, and why."""

    model_config = ConfigDict(frozen=True)

    heuristic_id: str
    reason: str


def prompt_lessons(
    asked: Sequence[Heuristic], *, verification: bool, judge: bool
) -> tuple[list[Heuristic], list[Refusal]]:
    """The lessons of ``asked`` that may enter the prompt (in order), and the refused ones.

    Args:
        asked: The lessons the stage execution asked for.
        verification: The run is a verification run (memory CI's replays are).
        judge: The stage is a judge stage.
    """
    kept: list[Heuristic] = []
    refused: list[Refusal] = []
    for h in asked:
        why = _refusal(h, verification=verification, judge=judge)
        if why is None:
            kept.append(h)
        else:
            refused.append(Refusal(heuristic_id=h.id, reason=why))
    return kept, refused


def _refusal(h: Heuristic, *, verification: bool, judge: bool) -> str | None:
    if judge:
        return "a judge stage's prompt carries no lessons (memory CI measures lessons with it)"
    if h.status == "quarantined" and not verification:
        return "quarantined: only memory CI's verification replays carry it until promoted"
    if h.status not in ("promoted", "quarantined"):
        return f"{h.status}: never put in a prompt"
    findings = screen(h.text)
    if findings:
        kinds = ", ".join(sorted({f"{f.category} ({f.rule})" for f in findings}))
        return f"today's immune scan flags it: {kinds}"
    return None
