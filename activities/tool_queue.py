"""Which activities are tools (served only on the tools queue), and what the main queue does
with a tool call that an old run still schedules there."""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

__all__ = ["TOOL_ACTIVITIES", "activity_name", "refuse_on_main_queue"]

#: The activities that run tools: served only on the tools queue, by the tools worker.
TOOL_ACTIVITIES = frozenset({"tool_call", "run_adapter"})


def activity_name(fn: Any) -> str:
    """The name ``fn`` is registered under (its ``@activity.defn``)."""
    defn = activity._Definition.from_callable(fn)
    if defn is None or defn.name is None:
        raise TypeError(f"{fn!r} is not a named @activity.defn")
    return defn.name


def refuse_on_main_queue(name: str) -> Any:
    """An activity ``name`` for the main queue that refuses to run the tool there: only a run
    that made tool calls before they had their own queue schedules one on it."""

    @activity.defn(name=name)
    async def refuse(inp: Any) -> Any:
        raise ApplicationError(
            f"{name}: this run made its first tool calls before tool activities moved to their "
            f"own task queue, so it schedules them on {activity.info().task_queue!r}, where "
            "the workers hold provider secrets and do not run tools; start the run again "
            "(new runs send tools to the tools queue)",
            type="tool_queue_moved",
            non_retryable=True,
        )

    return refuse
