"""Where tool activities run: their own task queue, served by a worker without provider secrets.

Every tool activity (``tool_call``: shell, files, HTTP, Python tools; ``run_adapter``) goes to
:func:`tools_task_queue` of the queue the run itself runs on, so the workers that call models
(and hold the provider keys) never run a tool, and a tools worker (``armature worker
--tools-only``) holds no key a tool could read. Runs whose tool calls began before this change
keep them on the run's own queue (:data:`TOOLS_ON_OWN_QUEUE` is a ``workflow.patched`` id).
"""

from __future__ import annotations

from temporalio import workflow

from armature_temporal.service.tools_env import tools_task_queue

__all__ = ["TOOLS_ON_OWN_QUEUE", "tool_queue", "tools_task_queue"]

TOOLS_ON_OWN_QUEUE = "tools-on-own-queue"


def tool_queue() -> str | None:
    """The task queue for this run's next tool activity (in workflow code only); None, the
    run's own queue, for a run that replays tool calls made before tools had their own."""
    if not workflow.patched(TOOLS_ON_OWN_QUEUE):
        return None
    return tools_task_queue(workflow.info().task_queue)
