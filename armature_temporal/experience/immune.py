"""The experience memory's immune scan: a lesson is text that will enter prompts, so it is
screened like any prompt input before it is kept, with the scanner's stricter lesson profile
(:mod:`armature_temporal.scanner`, ``profile="lesson"``).

What a finding does to a lesson — every finding rejects it, none quarantines it:

- **Rejected outright, for good**: any finding of the :data:`SCREENED` categories. Among them
  the two forms a lesson is most often used for as an attack: *judge-forcing*
  (``score_manipulation``: text addressed to a judge, grader, evaluator, scorer or reward
  model, a stated score or verdict, a claim that the answer was already verified) and
  *system-prompt forms* (``prompt_injection``: a role header such as ``System:`` or
  ``Developer message:``, role tags, "new instructions", a claim to outrank or replace the
  system prompt, text that declares the model's instructions void). A lesson has one
  legitimate form — advice to the model doing the stage — so none of these has a benign
  reading worth the risk: a lesson goes into every prompt of its stage.
- **Quarantined** (memory CI decides): only a lesson with no finding. Quarantine is not
  admission: a quarantined lesson enters no prompt but memory CI's own verification replays
  (which never act), and it is screened again before each replay and each prompt, so a
  scanner that has learnt a new form since it was admitted keeps it out
  (:func:`~armature_temporal.experience.gate.prompt_lessons`).

The ambiguous case — a lesson that *mentions* a judge, a score or the system without
addressing or impersonating them ("The judge stage rewards concise answers; keep replies
short.") — has no finding and goes to memory CI, whose measure such a lesson cannot move
unless the output gets better: in the simulator's declared world a judge reads only the
latent quality of what it judges, and no lesson ever enters a judge's prompt.
"""

from __future__ import annotations

import functools

from armature_temporal.scanner import Category, Finding, scan

__all__ = ["SCREENED", "screen"]

#: The scanner categories that keep a lesson out of memory: every one the scanner has.
SCREENED: frozenset[Category] = frozenset(
    {
        "prompt_injection",
        "score_manipulation",
        "secret",
        "tool_misuse",
        "scope_overreach",
        "personal_data",
    }
)


def screen(text: str) -> list[Finding]:
    """The scanner's findings in ``text`` of the :data:`SCREENED` categories, with the lesson
    profile (empty: clean). Pure; the same text is scanned once per process."""
    return list(_screened(text))


@functools.lru_cache(maxsize=4096)
def _screened(text: str) -> tuple[Finding, ...]:
    return tuple(f for f in scan(text, profile="lesson").findings if f.category in SCREENED)
