"""The experience memory's immune scan: a lesson is text that will enter prompts, so it is
screened like any prompt input before it is kept (:mod:`armature_temporal.scanner`)."""

from __future__ import annotations

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
    """The scanner's findings in ``text`` of the :data:`SCREENED` categories (empty: clean)."""
    return [f for f in scan(text).findings if f.category in SCREENED]
