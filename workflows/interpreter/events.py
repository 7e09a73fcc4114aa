"""``EventLog``: the run's own record of what happened, for followers (``GET /run/{id}/events``,
``armature runs watch``) through the workflow's ``events`` query.

Appending is plain in-memory state: it issues no command, so runs replay as they ran, and a
replay rebuilds the same log with the same ``seq`` numbers (the interpreter appends in the
order its code runs). A worker replaying a closed run answers the query too.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from armature_temporal.runtime.events import FINAL_EVENTS, inline_output
from armature_temporal.runtime.models import (
    GateDecision,
    GateInfo,
    RunEvent,
    RunEventType,
    StageResult,
)

__all__ = ["EventLog"]


class EventLog:
    """The run's events, ``seq`` 1, 2, ... without gaps."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.events: list[RunEvent] = []

    def after(self, seq: int) -> list[RunEvent]:
        """The events with ``seq`` greater than ``seq`` (all of them for 0), oldest first."""
        return self.events[max(seq, 0) :]

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1].type in FINAL_EVENTS

    def append(self, type_: RunEventType, stage: str | None, data: dict[str, Any]) -> None:
        if self.ended:  # nothing follows the run's last event
            return
        self.events.append(
            RunEvent(
                seq=len(self.events) + 1,
                type=type_,
                run_id=self.run_id,
                stage=stage,
                at=workflow.now().isoformat(),
                data=data,
            )
        )

    def stage_start(self, stage_id: str, kind: str) -> None:
        self.append("stage_start", stage_id, {"kind": kind})

    def stage_progress(self, stage_id: str, data: dict[str, Any]) -> None:
        self.append("stage_progress", stage_id, data)

    def stage_complete(self, stage_id: str, result: StageResult) -> None:
        data: dict[str, Any] = {"status": result.status, **self._output("output", result.output)}
        if result.error is not None:
            data["error"] = result.error
            data["error_type"] = result.error_type
        if result.tier is not None:
            data["tier"] = result.tier
        if result.attempts:
            data["attempts"] = result.attempts
        self.append("stage_complete", stage_id, data)

    def gate_waiting(self, info: GateInfo) -> None:
        self.append(
            "gate_waiting",
            info.stage,
            {"message": info.message, "timeout_s": info.timeout_s, "on_timeout": info.on_timeout},
        )

    def gate_decided(self, decision: GateDecision) -> None:
        self.append(
            "gate_decided",
            decision.stage,
            {"decision": decision.decision, "by": decision.by, "comment": decision.comment},
        )

    def run_end(self, state: str, reason: str | None, outputs: dict[str, Any]) -> None:
        """``run_complete`` for a completed run, else ``run_failed`` with the reason."""
        if state == "completed":
            self.append("run_complete", None, {"status": state, **self._output("outputs", outputs)})
        else:
            self.append("run_failed", None, {"status": state, "reason": reason})

    def _output(self, key: str, value: Any) -> dict[str, Any]:
        return inline_output(key, value, self.run_id)
