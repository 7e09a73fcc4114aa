"""``Adapters``: adapter stages (a stage's ``adapter:``), each one ``run_adapter`` activity
under the run's safety policy, with the approval a ``require_approval`` rule asks for."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.exceptions import CancelledError as TemporalCancelledError

from armature_temporal.runtime.models import AdapterCallInput, AdapterCallResult, ToolCallResult
from armature_temporal.runtime.prompts import needed_variables, template_strings
from armature_temporal.spec.compiler import PlanStage
from workflows.interpreter.failures import TOOL_ERROR_TYPES, StageFailure, classify
from workflows.interpreter.gates import Gates
from workflows.interpreter.queues import tool_queue
from workflows.interpreter.retries import HEARTBEAT, INFRA_RETRY, deadline, infra_retries
from workflows.interpreter.state import RunContext
from workflows.interpreter.tools import TOOL_RETRY
from workflows.interpreter.tracing import Tracer

__all__ = ["ADAPTER_GRACE", "Adapters"]

#: Added to the adapter's own timeout for the activity's: starting, policy, output.
ADAPTER_GRACE = timedelta(seconds=30)


class Adapters:
    """Runs adapter stages. Like a tool call, the activity checks the safety policy before it
    runs anything (the tool name is the adapter's); ``require_approval`` waits on a gate named
    after the stage (``stage#n`` for the items of a ``partition_source`` stage), and the call
    runs once a person approves."""

    def __init__(self, run: RunContext, tracer: Tracer, gates: Gates) -> None:
        self.run = run
        self.tracer = tracer
        self.gates = gates

    async def stage(self, stage: PlanStage, variables: dict[str, Any]) -> Any:
        """The adapter's output; or :class:`StageFailure` (``tool_error``, ``timeout``,
        ``policy_blocked``) naming the adapter."""
        adapter = stage.adapter
        assert adapter is not None, "Adapters runs adapter stages only"
        run = self.run
        policy = run.own_policy()
        timeout = timedelta(seconds=max(adapter.timeout_s, stage.timeout_s or 0)) + ADAPTER_GRACE
        # A script gets all of its variables (ARMATURE_CONTEXT); a function only what its
        # args read.
        sent = (
            variables
            if adapter.type == "script"
            else needed_variables(variables, *template_strings(adapter.args))
        )
        approved = False
        infra = infra_retries()
        while True:
            try:
                result: AdapterCallResult = await workflow.execute_activity(
                    "run_adapter",
                    AdapterCallInput(
                        run_id=run.run_id,
                        stage_id=stage.id,
                        spec_name=run.plan.name,
                        adapter=adapter,
                        variables=sent,
                        safety_mode=policy.safety_mode,
                        safety_rules=policy.safety_rules,
                        outer_policies=run.outer_policies,
                        approved=approved,
                        verification=run.verification,
                        network=stage.network,
                        sandbox_env=run.plan.sandbox_env,
                    ),
                    result_type=AdapterCallResult,
                    task_queue=tool_queue(),
                    start_to_close_timeout=timeout,
                    schedule_to_close_timeout=deadline(timeout) if infra else None,
                    heartbeat_timeout=HEARTBEAT,
                    retry_policy=INFRA_RETRY if infra else TOOL_RETRY,
                    summary=f"{stage.id}: adapter {adapter.name} ({adapter.type})",
                )
            except ActivityError as exc:
                if isinstance(exc.cause, TemporalCancelledError):
                    raise
                error_type, message = classify(exc)
                if not message.startswith(f"stage {stage.id!r}"):  # named by the activity already
                    message = f"stage {stage.id!r}: adapter {adapter.name!r}: {message}"
                raise StageFailure(error_type, message) from exc
            self.tracer.tool(stage.id, adapter.name, _as_tool_result(result), approved)
            if result.policy_action != "require_approval" or approved:
                break
            # One call per item (partition_source): each item's approval is a gate of its own.
            gate_id = (
                stage.id
                if stage.partition_source is None
                else f"{stage.id}#{run.next_approval(stage.id)}"
            )
            decision = await self.gates.wait(
                gate_id,
                f"adapter {adapter.name} needs approval: {result.policy_message} — runs: "
                f"{json.dumps(result.seen, default=str)[:500]}",
                None,
                "fail",
            )
            if decision.decision == "reject":
                raise StageFailure(
                    "policy_blocked",
                    f"stage {stage.id!r}: adapter {adapter.name!r} rejected by "
                    f"{decision.by or 'a person'}: {decision.comment or 'no reason given'}",
                )
            approved = True
        run.results[stage.id].attempts = 1
        if not result.ok:
            raise StageFailure(
                TOOL_ERROR_TYPES.get(result.error_type or "", "tool_error"),
                f"stage {stage.id!r}: {result.error}",
            )
        return result.output


def _as_tool_result(result: AdapterCallResult) -> ToolCallResult:
    """The call as the trace keeps tool calls: what ran (``args``) and what came back."""
    value = result.output
    output = value if isinstance(value, dict) else {} if value is None else {"result": value}
    return ToolCallResult(
        ok=result.ok,
        output=output if result.ok else {"args": result.seen, **output},
        error_type=result.error_type,
        error=result.error,
        policy_action=result.policy_action,
        policy_rule=result.policy_rule,
        policy_message=result.policy_message,
    )
