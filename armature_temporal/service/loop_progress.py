"""A long tool loop's live progress: the AgentLoop child running it answers a ``progress``
query (workflows/agent_loop.py); the run itself hears only at the end of each of the child's
executions. ``show_run`` (so ``runs show`` and ``submit --wait``) reads the child's."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.service import RPCError

from armature_temporal.runtime.models import StageResult

__all__ = ["live_loops"]


async def live_loops(client: Client, stages: dict[str, StageResult]) -> dict[str, StageResult]:
    """``stages``, each tool loop that runs in an AgentLoop child now with the child's own
    progress (the run hears it only at the end of each of the child's executions); a child
    that does not answer leaves the run's figures."""
    out = dict(stages)
    for sid, result in stages.items():
        loop = result.loop or {}
        child = loop.get("child")
        if not isinstance(child, str):
            continue
        try:
            live = await client.get_workflow_handle(child).query("progress")
        except RPCError:
            continue
        ahead = isinstance(live, dict) and isinstance(live.get("turn"), int)
        if ahead and live["turn"] >= int(loop.get("turn") or 0):  # never behind the run's
            out[sid] = result.model_copy(update={"loop": {**live, "child": child}})
    return out
