"""How a stage fails: the exceptions the interpreter raises, and the failure taxonomy that
activity and child-run failures are classified into."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

__all__ = ["TOOL_ERROR_TYPES", "GateRejected", "StageFailure", "classify"]

#: Tool failure kinds mapped onto the failure taxonomy (the trace keeps the tool's own kind).
TOOL_ERROR_TYPES = {"timeout": "timeout", "policy_blocked": "policy_blocked"}


class StageFailure(Exception):
    """A stage failed for a reason the failure taxonomy names."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


class GateRejected(Exception):
    """A person rejected the stage at its gate."""


def classify(exc: ActivityError | ChildWorkflowError) -> tuple[str, str]:
    """(error_type, message) from an activity or child failure."""
    cause = exc.cause
    if isinstance(cause, TemporalCancelledError):
        return "cancelled", "cancelled (a sibling stage failed or the run was cancelled)"
    if isinstance(cause, TemporalTimeoutError):
        return "timeout", f"timed out ({cause.type.name if cause.type else 'timeout'})"
    if isinstance(cause, ApplicationError):
        kind = cause.type or ""
        if kind.startswith("provider_error"):
            return "provider_error", cause.message
        if kind == "RunFailed":
            return "dependency_failed", f"child run failed: {cause.message}"
        if kind == "template_error":
            return "template_error", cause.message
        if kind in ("policy_blocked", "payload_too_large"):
            return "policy_blocked" if kind == "policy_blocked" else "tool_error", cause.message
        return "tool_error", cause.message
    return "provider_error", str(cause or exc)
