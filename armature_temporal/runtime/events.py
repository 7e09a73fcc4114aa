"""Pure helpers for run events (:class:`~armature_temporal.runtime.models.RunEvent`), shared
by the interpreter's log and the service's derived events."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FINAL_EVENTS", "OUTPUT_INLINE_MAX", "inline_output"]

#: Outputs whose JSON is longer than this (bytes) travel as ``output_ref`` instead.
OUTPUT_INLINE_MAX = 8 * 1024
#: The event types a run's log ends with.
FINAL_EVENTS: tuple[str, ...] = ("run_complete", "run_failed")


def inline_output(key: str, value: Any, run_id: str) -> dict[str, Any]:
    """``{key: <a JSON copy of value>}`` when its JSON fits :data:`OUTPUT_INLINE_MAX`, else
    ``{"output_ref": "/run/<run_id>"}`` (where ``GET`` shows it whole)."""
    text = json.dumps(value, default=str, sort_keys=True)
    if len(text.encode("utf-8")) <= OUTPUT_INLINE_MAX:
        return {key: json.loads(text)}
    return {"output_ref": f"/run/{run_id}"}
