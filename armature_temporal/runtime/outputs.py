"""What a stage's output looks like after the run-level rules: judge scores, truncation
(``output_max_chars``), failed-as-value and skipped markers. Pure functions, used inside the
workflow."""

from __future__ import annotations

import json
from typing import Any

from armature_temporal.runtime.hqs import JUDGE_SCORE_KEYS, judge_score

__all__ = [
    "JUDGE_SCORE_KEYS",
    "SKIPPED",
    "TRUNCATION_MARKER",
    "failed_output",
    "judge_score",
    "truncate_output",
]

TRUNCATION_MARKER = "...[truncated]"
#: The output of a stage that its condition or skip_if skipped.
SKIPPED: dict[str, Any] = {"_skipped": True}


def failed_output(error: str, error_type: str | None) -> dict[str, Any]:
    """The output of a ``fail_as_value`` stage that failed: dependents can branch on it."""
    return {"_failed": True, "error": error, "error_type": error_type}


def truncate_output(output: Any, limit: int) -> Any:
    """``output`` with every text longer than ``limit`` cut and marked; a dict that lost text
    says so with ``_truncated: true``. A list too long as JSON becomes its cut JSON text."""
    if isinstance(output, str):
        return output if len(output) <= limit else output[:limit] + TRUNCATION_MARKER
    if isinstance(output, dict):
        out: dict[str, Any] = {}
        cut = False
        for key, value in output.items():
            new = truncate_output(value, limit) if isinstance(value, str | dict) else value
            cut = cut or new != value
            out[key] = new
        if cut:
            out["_truncated"] = True
        return out
    if isinstance(output, list):
        text = json.dumps(output, ensure_ascii=False, default=str)
        return output if len(text) <= limit else text[:limit] + TRUNCATION_MARKER
    return output
