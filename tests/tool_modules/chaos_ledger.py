"""A tool with a side effect the chaos run can count: each call appends one line to the file
``$ARMATURE_CHAOS_LEDGER`` (run, stage, the worker's pid). Specs name it
``tests.tool_modules.chaos_ledger:chaos_append``."""

from __future__ import annotations

import json
import os

from armature_temporal.tools import register_tool


@register_tool(reversibility="full")
def chaos_append(run_id: str, stage: str) -> dict[str, bool]:
    """Append one line naming the run and stage to the chaos ledger."""
    line = json.dumps({"run_id": run_id, "stage": stage, "pid": os.getpid()}) + "\n"
    with open(os.environ["ARMATURE_CHAOS_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(line)
        ledger.flush()
        os.fsync(ledger.fileno())
    return {"appended": True}
