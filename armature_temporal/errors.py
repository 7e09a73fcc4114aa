"""Armature's exception hierarchy, documented in one place.

Every error Armature raises on purpose derives from :class:`ArmatureError`:

- :class:`SpecError` — a workflow spec is malformed or inconsistent. It carries one
  :class:`SpecIssue` per problem, each with ``file:line:column``, the field path, the
  offending value and how to fix it. ``armature validate`` prints them all.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

__all__ = ["ArmatureError", "SpecError", "SpecIssue", "did_you_mean"]


class ArmatureError(Exception):
    """Root of every error Armature raises deliberately."""


@dataclass(frozen=True)
class SpecIssue:
    """One problem found in a spec.

    Attributes:
        file: The spec file's path as the user gave it (or ``<string>``).
        line: 1-based line of the offending node, or 0 when unknown.
        column: 1-based column, or 0 when unknown.
        path: The field path, e.g. ``stages[2].role.model_tier``; empty for the document.
        message: What is wrong, the value, and how to fix it.
    """

    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class SpecError(ArmatureError):
    """A spec failed to load, validate or compile. ``issues`` lists every problem found."""

    def __init__(self, issues: Sequence[SpecIssue]) -> None:
        self.issues: list[SpecIssue] = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues) or "invalid spec")


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    if not isinstance(value, str):
        return ""
    match = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""
