"""Pinning a spec's MCP tools into its plan: list them (:mod:`.discovery`), then turn every
name the spec gives an MCP tool (role tools, a stage's ``tool:``, safety rules) into its
canonical ``mcp:<server>/<tool>`` and check rule conditions against the listed schemas."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from armature_temporal.errors import SpecError, SpecIssue, did_you_mean
from armature_temporal.mcp.names import McpNameError, resolve, resolve_rule_tool
from armature_temporal.spec.mcp import MCP_PREFIX, PlanMcpServer, PlanMcpTool, split_canonical

if TYPE_CHECKING:
    from armature_temporal.spec.loader import LoadedSpec
    from armature_temporal.spec.models import SafetyRule
    from armature_temporal.spec.plan import PlanStage

__all__ = ["pin_mcp"]


def _is_other_tool(name: str) -> bool:
    """A built-in or ``module:function``: never an MCP tool's name."""
    from armature_temporal.spec.knowledge import RETRIEVE_TOOL_NAME
    from armature_temporal.tools._registry import BUILTIN_NAMES, PY_TOOL

    if name.startswith(MCP_PREFIX):  # mcp:<server> is an MCP name, never module:function
        return False
    return name in BUILTIN_NAMES or name == RETRIEVE_TOOL_NAME or bool(PY_TOOL.match(name))


def _tools(
    loaded: LoadedSpec, index: int, names: list[str], issues: list[SpecIssue], servers: Any
) -> list[str]:
    out: list[str] = []
    for k, name in enumerate(names):
        path = ("stages", index, "role", "tools", k)
        if _is_other_tool(name):
            out.append(name)
            continue
        try:
            found = resolve(name, servers, many=True)
        except McpNameError as exc:
            issues.append(loaded.issue(path, str(exc)))
            continue
        if found is None:
            _unknown(loaded, path, name, servers, issues)
            out.append(name)
        else:
            out += [n for n in found if n not in out]
    return out


def _unknown(
    loaded: LoadedSpec, path: tuple[Any, ...], name: str, servers: Any, issues: list[SpecIssue]
) -> None:
    """A name neither built in, nor module:function, nor any server's: an error unless a
    tools: module may register it when the worker loads it."""
    if loaded.spec.tools:
        return
    listed = [t.name for s in servers for t in s.tools]
    issues.append(
        loaded.issue(
            path,
            f"unknown tool {name!r}: not a built-in tool, not module:function, and no MCP server "
            f"lists it (they list {listed}){did_you_mean(name, listed)}",
        )
    )


def _rule_field(rule: SafetyRule, tool: PlanMcpTool) -> str | None:
    """Why a rule's condition field is no argument of the MCP tool it names, or None."""
    from armature_temporal.runtime.policy import PSEUDO_FIELDS, REVERSIBILITY_FIELD

    if rule.condition is None:
        return None
    root = rule.condition.field.split(".", 1)[0]
    if root == REVERSIBILITY_FIELD:
        return None
    if root in PSEUDO_FIELDS:
        return (
            f"MCP tool {tool.canonical!r} has no pseudo-field {root!r} (its only one is "
            f"{REVERSIBILITY_FIELD}), so this rule would never match"
        )
    props = tool.input_schema.get("properties")
    if not isinstance(props, dict) or root in props:
        return None
    return (
        f"MCP tool {tool.canonical!r} has no argument {root!r}, so this rule would never match; "
        f"its arguments: {sorted(props)}{did_you_mean(root, list(props))}"
    )


def pin_mcp(
    loaded: LoadedSpec, stages: list[PlanStage], rules: list[SafetyRule]
) -> tuple[list[PlanMcpServer], list[PlanStage], list[SafetyRule]]:
    """The spec's servers with their tools listed now, and the stages and rules with MCP names
    made canonical.

    Raises:
        SpecError: a server would not start or list its tools, a tool's schema is malformed,
            or a name points at MCP tools wrongly; each issue at its field's line.
    """
    from armature_temporal.mcp.discovery import discover
    from armature_temporal.settings import workspace_root
    from armature_temporal.tools._registry import BUILTIN_NAMES

    spec = loaded.spec
    if not spec.mcp_servers:
        return [], stages, rules
    servers, problems = discover(
        spec.mcp_servers,
        workspace=workspace_root(spec.name),
        sandbox_env=spec.sandbox.env if spec.sandbox is not None else {},
        builtin_names=BUILTIN_NAMES,
    )
    issues = [loaded.issue(("mcp_servers", i), msg) for i, msg in sorted(problems.items())]
    if issues:
        raise SpecError(issues)
    index = {s.id: i for i, s in enumerate(spec.stages)}
    out_stages: list[PlanStage] = []
    for stage in stages:
        i = index[stage.id]
        update: dict[str, Any] = {}
        if stage.role is not None and stage.role.tools:
            tools = _tools(loaded, i, list(stage.role.tools), issues, servers)
            update["role"] = stage.role.model_copy(update={"tools": tools})
        if stage.tool is not None and not _is_other_tool(stage.tool.name):
            path = ("stages", i, "tool", "name")
            try:
                found = resolve(stage.tool.name, servers)
            except McpNameError as exc:
                issues.append(loaded.issue(path, str(exc)))
            else:
                if found:
                    update["tool"] = stage.tool.model_copy(update={"name": found[0]})
                else:
                    _unknown(loaded, path, stage.tool.name, servers, issues)
        out_stages.append(stage.model_copy(update=update) if update else stage)
    out_rules: list[SafetyRule] = []
    by_name = {t.canonical: t for s in servers for t in s.tools}
    for r, rule in enumerate(rules):
        if rule.tool == "*" or _is_other_tool(rule.tool):
            out_rules.append(rule)
            continue
        try:
            tool = resolve_rule_tool(rule.tool, servers)
        except McpNameError as exc:
            issues.append(loaded.issue(("safety_rules", r, "tool"), str(exc)))
            out_rules.append(rule)
            continue
        if tool in by_name and (why := _rule_field(rule, by_name[tool])):
            issues.append(loaded.issue(("safety_rules", r, "condition", "field"), why))
        split = split_canonical(tool)
        if split is not None and split[1] == "*" and rule.condition is not None:
            root = rule.condition.field.split(".", 1)[0]
            for t in next(s for s in servers if s.name == split[0]).tools:
                if not _rule_field(rule, t):
                    break
            else:
                issues.append(
                    loaded.issue(
                        ("safety_rules", r, "condition", "field"),
                        f"no tool of MCP server {split[0]!r} has an argument {root!r}, so this "
                        "rule would never match",
                    )
                )
        out_rules.append(rule.model_copy(update={"tool": tool}) if tool != rule.tool else rule)
    if issues:
        raise SpecError(sorted(issues, key=lambda i: (i.line, i.column)))
    return servers, out_stages, out_rules
