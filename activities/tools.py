"""The ``tool_call`` activity: render args, pass the safety policy, run the tool.

Every tool call in Armature — tool stages and an agent's own calls — goes through here, and so
through :func:`armature_temporal.runtime.policy.evaluate_policy`, the single place that decides.
The policy sees :func:`armature_temporal.tools.policy_args` (what will run: shell's ``cmd`` and
``argv`` both) and the pseudo-fields of :func:`armature_temporal.tools.resolved_fields` (the
resolved ``_executable`` and ``_resolved_path``, which the tool then uses as they were checked);
args a ``pre_tool`` hook modified are checked again before they run; and tools from the plan's
tool modules, loaded here once per worker process, pass the same rules, reversibility checks and
approvals as built-ins.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from jinja2 import TemplateError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.mcp import call_pinned, pinned_spec
from armature_temporal.runtime.hooks import HookContext, run_hooks
from armature_temporal.runtime.message_store import put_text
from armature_temporal.runtime.models import PolicySet, ToolCallInput, ToolCallResult
from armature_temporal.runtime.payloads import MAX_STAGE_OUTPUT
from armature_temporal.runtime.policy import PolicyDecision, evaluate_policy
from armature_temporal.settings import tool_output_cap, workspace_root
from armature_temporal.spec.models import HttpSafe, SafetyRule
from armature_temporal.spec.templating import evaluate, render
from armature_temporal.tools import (
    Reversibility,
    ToolContext,
    ToolError,
    ToolSpec,
    call_tool,
    get_tool_spec,
    load_tool_modules,
    policy_args,
    resolved_fields,
    tool_reversibility,
)

__all__ = ["render_args", "tool_call"]


_SINGLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}\s*$", re.S)


def render_args(value: Any, variables: dict[str, Any]) -> Any:
    """Render every string inside ``value`` (dicts and lists too) as a Jinja template.

    A string that is exactly one ``{{ expression }}`` keeps the expression's type, so
    ``index: "{{ inputs.index }}"`` passes an integer and ``items: "{{ plan.items }}"`` a list.
    """
    if isinstance(value, str):
        single = _SINGLE_EXPRESSION.match(value)
        if single:
            return evaluate(single.group("expr").strip(), variables)
        return render(value, variables) if ("{{" in value or "{%" in value) else value
    if isinstance(value, list):
        return [render_args(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render_args(v, variables) for k, v in value.items()}
    return value


#: How restrictive each action is; across nested policies the most restrictive wins.
_STRICTNESS = {"allow": 0, "log": 1, "warn": 2, "require_approval": 3, "block": 4}


def strictest(decisions: Iterable[PolicyDecision]) -> PolicyDecision:
    """The most restrictive of several policies' decisions (the first on a tie)."""
    ranked = list(decisions)
    return max(ranked, key=lambda d: _STRICTNESS[d.action])


def _outer_host_block(args: dict[str, Any], outer: list[PolicySet]) -> str | None:
    """Why an enclosing run's http_allow_hosts refuses this request's host, or None."""
    import httpx

    from armature_temporal.tools._http import host_allowed

    try:  # the parser the tool itself uses, so both see the same host
        host = httpx.URL(str(args.get("url", ""))).host
    except httpx.InvalidURL:
        host = ""  # no host is allowed: the call is refused here, not sent
    for level in outer:
        if not host_allowed(host, tuple(level.http_allow_hosts)):
            return (
                f"host {host!r} is outside an enclosing run's http_allow_hosts "
                f"{level.http_allow_hosts}; a subagent can only narrow that list"
            )
    return None


def _resolve(
    tool: str, args: dict[str, Any], modules: list[str], ctx: ToolContext
) -> tuple[ToolSpec, Reversibility, dict[str, Any], dict[str, str]]:
    """Load the plan's tool modules, then the tool's spec, this call's reversibility (in
    ``ctx``: the requests the spec marks safe), what the policy sees and the pseudo-fields
    (what will run, resolved in ``ctx``). Blocking (imports, symlinks): run it in a thread."""
    load_tool_modules(modules)
    return (
        get_tool_spec(tool),
        tool_reversibility(tool, args, ctx=ctx),
        policy_args(tool, args),
        resolved_fields(tool, args, ctx),
    )


def _safe_pairs(marks: list[HttpSafe]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((m.host, tuple(m.methods)) for m in marks)


def _outer_unsafe(args: dict[str, Any], outer: list[PolicySet]) -> bool:
    """Whether an enclosing run does not mark this request safe: a subagent's marks can only
    narrow its parents'."""
    from armature_temporal.tools._http import marked_safe

    method, url = str(args.get("method", "GET")), str(args.get("url", ""))
    return any(not marked_safe(method, url, _safe_pairs(level.http_safe)) for level in outer)


class _Checked(NamedTuple):
    """One pass of a call's args through every policy that applies to it."""

    spec: ToolSpec
    reversibility: Reversibility
    resolved: dict[str, str]
    decision: PolicyDecision
    #: The safety rule that decided, as the spec wrote it (None: no rule matched).
    rule: dict[str, Any] | None = None


async def _check(inp: ToolCallInput, args: dict[str, Any], ctx: ToolContext) -> _Checked:
    """The decision on ``args``: the run's rules and every enclosing run's (the strictest
    wins), the enclosing runs' hosts, and the destructive floor.

    Raises:
        ToolError: the tool cannot be resolved.
    """
    resolved: dict[str, str]
    reversibility: Reversibility
    if inp.mcp_tool is not None:  # pinned in the plan: nothing to load or resolve
        spec, reversibility, seen, resolved = pinned_spec(inp), "none", dict(args), {}
    else:
        spec, reversibility, seen, resolved = await asyncio.to_thread(
            _resolve, inp.tool, args, inp.tool_modules, ctx
        )
    full = reversibility == "full"
    if inp.tool == "http_request" and full and _outer_unsafe(args, inp.outer_policies):
        reversibility = "none"
    # A subagent runs under every enclosing run's policy too: it can only tighten them.
    levels = [
        *inp.outer_policies,
        PolicySet(safety_mode=inp.safety_mode, safety_rules=inp.safety_rules),
    ]
    decisions = [
        evaluate_policy(
            rules=[SafetyRule.model_validate(r) for r in level.safety_rules],
            mode=level.safety_mode,
            tool=inp.tool,
            args=seen,
            reversibility=reversibility,
            resolved=resolved,
        )
        for level in levels
    ]
    decision = strictest(decisions)
    deciding = levels[decisions.index(decision)]
    rule = (
        SafetyRule.model_validate(deciding.safety_rules[decision.rule_index]).model_dump(
            mode="json", exclude_none=True
        )
        if decision.rule_index is not None
        else None
    )
    if inp.tool == "http_request":
        narrowed = _outer_host_block(args, inp.outer_policies)
        if narrowed is not None:
            decision = PolicyDecision(action="block", rule_index=None, message=narrowed)
    return _Checked(spec, reversibility, resolved, _destructive_floor(decision, spec), rule)


def _unattended_refusal(inp: ToolCallInput, checked: _Checked) -> str | None:
    """Why a verification run may not make this call, or None."""
    reversibility, permission = checked.reversibility, checked.spec.permission
    if not inp.verification or (reversibility == "full" and permission in (None, "read_only")):
        return None
    # An improvement round's verification run replays a recent input unattended: it may
    # read and compute, never act (send, write, run commands) where it cannot undo it.
    what = (
        f"reversibility {reversibility!r}"
        if reversibility != "full"
        else f"registered with permission {permission!r}"
    )
    return (
        f"not run in a verification run: tool {inp.tool!r} is {what}, and verification runs "
        "only make calls that are fully reversible (and, for tool module tools, read_only)"
    )


def _destructive_floor(decision: PolicyDecision, spec: ToolSpec) -> PolicyDecision:
    """A tool registered with permission ``destructive`` never runs unattended: a call the
    rules let through waits for a person instead (a rule that blocks still blocks)."""
    if spec.permission != "destructive" or not decision.proceeds:
        return decision
    return PolicyDecision(
        action="require_approval",
        rule_index=decision.rule_index,
        message=f"tool {spec.name!r} is registered with permission 'destructive': each call "
        f"needs a person's approval ({decision.message})",
    )


@activity.defn(name="tool_call")
async def tool_call(inp: ToolCallInput) -> ToolCallResult:
    """Run one tool call under the spec's safety policy."""
    try:
        args = render_args(inp.args, inp.variables) if inp.render_args else dict(inp.args)
    except TemplateError as exc:
        raise ApplicationError(
            f"stage {inp.stage_id!r}: tool {inp.tool!r} args failed to render: {exc}",
            type="template_error",
            non_retryable=True,
        ) from exc
    workspace = workspace_root(inp.spec_name or "default")
    workspace.mkdir(parents=True, exist_ok=True)
    ctx = ToolContext(
        workspace=workspace,
        output_cap_bytes=tool_output_cap(),
        http_allow_hosts=tuple(inp.http_allow_hosts),
        http_safe=_safe_pairs(inp.http_safe),
        network=inp.network,
        env=inp.sandbox_env,
    )
    try:
        checked = await _check(inp, args, ctx)
    except ToolError as exc:
        return ToolCallResult(ok=False, error_type="unknown_tool", error=str(exc))
    decision = checked.decision
    policy = ToolCallResult(
        ok=False,
        policy_action=decision.action,
        policy_rule=decision.rule_index,
        policy_message=decision.message,
        output={"args": args},
    )
    if decision.action == "block":
        return policy.model_copy(
            update={
                "error_type": "policy_blocked",
                "error": f"blocked by the safety policy: {decision.message}",
            }
        )
    if (refusal := _unattended_refusal(inp, checked)) is not None:
        return policy.model_copy(
            update={
                "policy_action": "block",
                "policy_message": "verification run",
                "error_type": "policy_blocked",
                "error": refusal,
            }
        )
    hook_ctx = HookContext(
        point="pre_tool",
        run_id=inp.run_id,
        spec_name=inp.spec_name or "",
        stage_id=inp.stage_id,
        tool=inp.tool,
        args=args,
    )
    pre = await run_hooks(hook_ctx)
    hooks = {"pre_tool": pre.model_dump(include={"action", "hook", "reason", "ran", "modified_by"})}
    if pre.action == "block":
        return policy.model_copy(
            update={
                "error_type": "policy_blocked",
                "hooks": hooks,
                "error": f"blocked by hook {pre.hook}: {pre.reason}",
            }
        )
    if pre.args is not None:
        # A hook changed what will run: the policy decides again on the new args.
        args = pre.args
        checked = await _check(inp, args, ctx)  # the tool resolved above: no ToolError
        decision = checked.decision
        policy = policy.model_copy(
            update={
                "policy_action": decision.action,
                "policy_rule": decision.rule_index,
                "policy_message": decision.message,
                "output": {"args": args},
            }
        )
        refusal = (
            f"blocked by the safety policy: {decision.message}"
            if decision.action == "block"
            else _unattended_refusal(inp, checked)
        )
        if refusal is not None:
            return policy.model_copy(
                update={
                    "policy_action": "block",
                    "error_type": "policy_blocked",
                    "hooks": hooks,
                    "error": f"after hook {', '.join(pre.modified_by)} modified the args: "
                    f"{refusal}",
                }
            )
    needs_person = decision.action == "require_approval" or pre.action == "require_approval"
    if needs_person and not inp.approved:
        reason = decision.message if decision.action == "require_approval" else pre.reason
        # The person approves what will run, not only what the args say.
        reason += "".join(f" ({k} {v!r})" for k, v in sorted(checked.resolved.items()))
        return policy.model_copy(
            update={
                "policy_action": "require_approval",
                "policy_message": reason,
                "hooks": hooks,
                "error_type": "policy_blocked",
                "error": "waiting for approval",
                # What the approver sees (GateInfo.tool_call): the call, not only its args.
                "output": {
                    "args": args,
                    "reversibility": checked.reversibility,
                    # the rule that asked (not an allow rule the destructive floor overrode)
                    "rule": checked.rule
                    if (checked.rule or {}).get("action") == "require_approval"
                    else None,
                },
            }
        )
    if decision.action in ("warn", "log"):
        activity.logger.warning(
            "stage %s tool %s: policy %s: %s",
            inp.stage_id,
            inp.tool,
            decision.action,
            decision.message,
        )
    async with heartbeating():  # the tool runs exactly what the policy checked
        if inp.mcp_tool is not None:
            result = await call_pinned(inp, args, workspace, ctx.output_cap_bytes)
        else:
            result = await call_tool(
                inp.tool, args, ctx.model_copy(update={"checked": checked.resolved})
            )
    post = await run_hooks(
        hook_ctx.model_copy(update={"point": "post_tool", "args": args, "output": result.output})
    )
    hooks["post_tool"] = post.model_dump(include={"action", "hook", "reason", "ran", "modified_by"})
    if post.action == "block":
        return policy.model_copy(
            update={
                "error_type": "policy_blocked",
                "hooks": hooks,
                "error": f"result blocked by hook {post.hook}: {post.reason}",
            }
        )
    if post.output is not None and result.ok:
        result = result.model_copy(update={"output": post.output})
    size = len(json.dumps(result.output, default=str))
    if size > MAX_STAGE_OUTPUT:
        raise ApplicationError(
            f"stage {inp.stage_id!r}: tool {inp.tool!r} returned {size:,} bytes, more than the "
            f"{MAX_STAGE_OUTPUT:,} Armature carries; make the tool return less (or a file path)",
            type="payload_too_large",
            non_retryable=True,
        )
    ref = None
    if inp.store_result and result.ok:  # a tool loop's result: stored once, sent by reference
        ref = await asyncio.to_thread(put_text, json.dumps(result.output, default=str))
    return policy.model_copy(
        update={
            "hooks": hooks,
            "ok": result.ok,
            "output": result.output,
            "error_type": result.error_type,
            "error": result.error,
            "content_ref": ref,
        }
    )
