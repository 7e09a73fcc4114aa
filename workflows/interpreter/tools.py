"""``ToolCalls``: tool activities under the run's safety policy, with the approvals a
``require_approval`` rule asks for."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from armature_temporal.runtime.models import (
    GateDecision,
    ToolApproval,
    ToolCallInput,
    ToolCallResult,
)
from armature_temporal.runtime.prompts import needed_variables, template_strings
from armature_temporal.spec.compiler import PlanStage
from workflows.interpreter import spans
from workflows.interpreter.failures import TOOL_ERROR_TYPES, StageFailure
from workflows.interpreter.gates import Gates
from workflows.interpreter.queues import tool_queue
from workflows.interpreter.retries import HEARTBEAT, INFRA_RETRY, deadline, infra_retries
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["TOOL_RETRY", "TOOL_TIMEOUT", "ToolCalls"]

TOOL_TIMEOUT = timedelta(minutes=2)
#: Runs from before INFRA_RETRIES; newer ones retry a lost worker or a timeout within the
#: call's deadline (a tool's own failures are results, never retried).
TOOL_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


class ToolCalls:
    """Tool stages, and the tool calls a model makes in its tool loop: each call is its own
    activity, which checks the safety policy before it runs anything."""

    def __init__(self, run: RunContext, tracer: Tracer, gates: Gates) -> None:
        self.run = run
        self.tracer = tracer
        self.gates = gates

    async def stage(self, stage: PlanStage, variables: dict[str, Any]) -> Any:
        """A tool stage: one call with the stage's (rendered) args; its output, or a failure."""
        assert stage.tool is not None
        with spans.tool_span(stage.tool.name, None, stage.id, self.run.run_id) as span:
            result = await self.call(
                stage, stage.tool.name, stage.tool.args, variables, render_args=True
            )
            spans.tool_outcome(span, result.ok, result.error_type, result.error)
        self.run.results[stage.id].attempts = 1
        if not result.ok:
            raise StageFailure(
                TOOL_ERROR_TYPES.get(result.error_type or "", "tool_error"),
                f"stage {stage.id!r}: tool {stage.tool.name!r}: {result.error}",
            )
        return result.output

    async def call(
        self,
        stage: PlanStage,
        tool: str,
        args: dict[str, Any],
        variables: dict[str, Any],
        *,
        render_args: bool,
        store_result: bool = False,
        decided: GateDecision | None = None,
    ) -> ToolCallResult:
        """One tool call; if the policy requires approval, wait for it and call again.
        ``decided``: the decision already taken on this call (a tool loop handed back to the
        run for it, workflows/interpreter/tool_loop.py): approved, it runs at once."""
        run = self.run
        if decided is not None and decided.decision == "reject":
            return _rejected(decided)
        approved = decided is not None
        timeout = timedelta(seconds=stage.timeout_s) if stage.timeout_s else TOOL_TIMEOUT
        policy = run.own_policy()
        infra = infra_retries()
        pinned = run.plan.mcp_tool(tool)
        while True:
            result: ToolCallResult = await workflow.execute_activity(
                "tool_call",
                ToolCallInput(
                    run_id=run.run_id,
                    stage_id=stage.id,
                    tool=tool,
                    args=args,
                    variables=needed_variables(variables, *template_strings(args))
                    if render_args
                    else {},
                    render_args=render_args,
                    safety_mode=policy.safety_mode,
                    safety_rules=policy.safety_rules,
                    outer_policies=run.outer_policies,
                    http_allow_hosts=policy.http_allow_hosts,
                    http_safe=policy.http_safe,
                    approved=approved,
                    spec_name=run.plan.name,
                    verification=run.verification,
                    tool_modules=run.plan.tool_modules,
                    network=stage.network,
                    sandbox_env=run.plan.sandbox_env,
                    store_result=store_result,
                    # the connection, not every tool the server listed
                    mcp_server=pinned[0].model_copy(update={"tools": []}) if pinned else None,
                    mcp_tool=pinned[1] if pinned else None,
                ),
                result_type=ToolCallResult,
                task_queue=tool_queue(),
                start_to_close_timeout=timeout,
                schedule_to_close_timeout=deadline(timeout) if infra else None,
                heartbeat_timeout=HEARTBEAT,
                retry_policy=INFRA_RETRY if infra else TOOL_RETRY,
                summary=f"{stage.id}: tool {tool}",
            )
            self.tracer.tool(stage.id, tool, result, approved)
            if result.policy_action != "require_approval" or approved:
                return result
            seq = run.next_approval(stage.id)
            gate_id = stage.id if stage.kind == "tool" else f"{stage.id}#{seq}"
            decision = await self.gates.wait(
                gate_id,
                f"tool {tool} needs approval: {result.policy_message} — args: "
                f"{json.dumps(result.output.get('args', args), default=str)[:500]}",
                None,
                "fail",
                tool_call=_approval(tool, args, result),
            )
            if decision.decision == "reject":
                return _rejected(decision)
            approved = True


def _rejected(decision: GateDecision) -> ToolCallResult:
    """A tool call a person refused: what the model (or the tool stage) gets instead."""
    return ToolCallResult(
        ok=False,
        error_type="policy_blocked",
        error=f"tool call rejected by {decision.by or 'a person'}: "
        f"{decision.comment or 'no reason given'}",
        policy_action="require_approval",
    )


def _approval(tool: str, args: dict[str, Any], result: ToolCallResult) -> ToolApproval:
    """What the approver is asked about: the exact call the activity checked (state only, so
    the status query shows it; no command is issued)."""
    out = result.output
    pre = result.hooks.get("pre_tool") or {}
    rule = out.get("rule")
    return ToolApproval(
        tool=tool,
        args=out.get("args", args),
        reversibility=out.get("reversibility"),
        rule=rule if isinstance(rule, dict) else None,
        rule_index=result.policy_rule,
        reason=result.policy_message,
        hook=pre.get("hook") if pre.get("action") == "require_approval" else None,
    )
