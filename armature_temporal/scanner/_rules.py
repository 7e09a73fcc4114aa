"""A rule: a named regular expression for one category, with a fixed score and a check."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from armature_temporal.scanner._models import MASKED_CATEGORIES, Category, Finding, mask

__all__ = ["Rule", "run_rules"]


@dataclass(frozen=True)
class Rule:
    """One detector.

    Attributes:
        name: Stable identifier, reported as :attr:`Finding.rule`.
        category: The category its findings get.
        pattern: What to look for.
        score: The score of a match that passes ``check``.
        group: The group of ``pattern`` that is the finding's span (0: the whole match).
        check: Optional: given the match, return False to drop it, or a float to use as
            the score instead of ``score`` (below 0.5 also drops it).
    """

    name: str
    category: Category
    pattern: re.Pattern[str]
    score: float
    group: int | str = 0
    check: Callable[[re.Match[str]], bool | float] | None = None


def run_rules(text: str, rules: Iterable[Rule]) -> list[Finding]:
    """Every finding of ``rules`` in ``text`` (a rule may match many times)."""
    out: list[Finding] = []
    for rule in rules:
        for m in rule.pattern.finditer(text):
            start, end = m.span(rule.group)
            if start < 0 or start == end:
                continue
            score = rule.score
            if rule.check is not None:
                verdict = rule.check(m)
                if verdict is False:
                    continue
                if not isinstance(verdict, bool):
                    score = float(verdict)
            if score < 0.5:
                continue
            value = text[start:end]
            out.append(
                Finding(
                    category=rule.category,
                    span=(start, end),
                    text=mask(value) if rule.category in MASKED_CATEGORIES else value,
                    score=round(min(score, 1.0), 4),
                    rule=rule.name,
                )
            )
    return out
