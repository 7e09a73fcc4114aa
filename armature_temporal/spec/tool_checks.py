"""Checks of a spec's tools and safety rules: tool names (built-in, ``module:function``,
an MCP server's), rule conditions on fields a tool has, regexes that compile. An MCP tool's
arguments are known only when planning lists the server's tools
(:mod:`armature_temporal.mcp.pinning` checks them then)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.knowledge import RETRIEVE_TOOL_NAME
from armature_temporal.spec.models import Spec
from armature_temporal.spec.references import Problem

__all__ = [
    "BUILTIN_TOOLS",
    "ENGINE_TOOLS",
    "FACT_TOOLS",
    "PY_TOOL",
    "check_tools_and_rules",
    "tool_problem",
]

#: The facts navigation tools (memory.navigation_tools), by every name a role may list.
FACT_TOOLS: frozenset[str] = frozenset(
    {
        "facts_index",
        "facts_entity",
        "facts_get",
        "facts_search",
        "memory.search_records",
        "memory.get_records",
    }
)
#: Tools the engine answers itself (never the tools worker's registry).
ENGINE_TOOLS: frozenset[str] = FACT_TOOLS | {RETRIEVE_TOOL_NAME}

#: Tools that ship with Armature; others are named ``module:function``.
BUILTIN_TOOLS: tuple[str, ...] = ("file_read", "file_write", "file_list", "http_request", "shell")
PY_TOOL = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def tool_problem(name: str) -> str | None:
    """Why ``name`` is not a usable tool name, or None."""
    if name in BUILTIN_TOOLS or name in ENGINE_TOOLS or PY_TOOL.match(name):
        return None
    return (
        f"unknown tool {name!r}; built-in tools: {list(BUILTIN_TOOLS)}, or name a Python "
        f"function as module:function{did_you_mean(name, BUILTIN_TOOLS)}"
    )


def _rule_field_problem(spec: Spec, tool: str, field: str) -> str | None:
    """Why a safety rule's condition field can never match a call of ``tool``, or None."""
    from armature_temporal.runtime.policy import PSEUDO_FIELDS
    from armature_temporal.tools import tool_arg_fields, tool_pseudo_fields

    root = field.split(".", 1)[0]
    if root in PSEUDO_FIELDS:
        if field != root:
            return (
                f"pseudo-field {root!r} is one string, with no parts to index, so this rule "
                f"would never match; use field: {root}"
            )
        if tool == "*":
            return None
        # An adapter is its own tool: it has only _tool_reversibility (always none).
        has = tool_pseudo_fields("" if tool in spec.adapters else tool)
        if root in has:
            return None
        givers = sorted(name for name in BUILTIN_TOOLS if root in tool_pseudo_fields(name))
        return (
            f"tool {tool!r} has no pseudo-field {root!r} (only {givers} do), so this rule "
            f"would never match; its pseudo-fields: {list(has)}"
        )
    if tool == "*" or (spec.mcp_servers and tool_problem(tool) is not None):
        return None  # an MCP tool's arguments are known when planning lists it
    adapter = spec.adapters.get(tool)
    if adapter is not None:
        known: list[str] | None = (
            ["cmd", "argv"] if adapter.type == "script" else ["fn", *adapter.args]
        )
    else:
        known = tool_arg_fields(tool)
    if known is None:
        return None
    if root in known:
        return None
    pseudo = list(tool_pseudo_fields(tool))
    return (
        f"tool {tool!r} has no argument {root!r}, so this rule would never match; its "
        f"arguments: {sorted(known)}, and pseudo-fields: {pseudo}"
        f"{did_you_mean(root, [*sorted(known), *pseudo])}"
    )


def _mcp_server_problem(spec: Spec, name: str) -> str | None:
    """Why an ``mcp:<server>...`` name names no declared server, or None (the server's tools
    are known only when the spec is planned)."""
    from armature_temporal.spec.mcp import split_canonical

    split = split_canonical(name)
    if split is None:
        return None
    declared = [s.name for s in spec.mcp_servers]
    if split[0] in declared and split[1]:
        return None
    if split[0] in declared:
        return f"{name!r} names no tool; write mcp:{split[0]}/<tool> (or mcp:{split[0]}/* for all)"
    return (
        f"{name!r} names MCP server {split[0]!r}, which mcp_servers does not declare; declared: "
        f"{declared}{did_you_mean(split[0], declared)}"
    )


def check_tools_and_rules(spec: Spec) -> Iterator[Problem]:
    for i, stage in enumerate(spec.stages):
        named: list[tuple[tuple[str | int, ...], str]] = (
            []
            if stage.role is None
            else [(("role", "tools", k), t) for k, t in enumerate(stage.role.tools)]
        )
        retrieve = stage.retrieve
        if retrieve is not None and retrieve.collection and "~" in retrieve.collection:
            yield (
                ("stages", i, "retrieve", "collection"),
                f"{retrieve.collection!r} is a trial or staging collection (its name has ~), "
                "which only Armature's own rounds search; name one of yours without ~",
            )
        if stage.tool is not None:
            named.append((("tool", "name"), stage.tool.name))
            if stage.tool.name == RETRIEVE_TOOL_NAME:
                yield (
                    ("stages", i, "tool", "name"),
                    "retrieve is a tool models call; to put passages into a stage's prompt, "
                    "give an LLM stage retrieve: {query: ...}",
                )
        for where, name in named:
            memory = spec.memory
            if name in FACT_TOOLS and (memory is None or not memory.navigation_tools):
                yield (
                    ("stages", i, *where),
                    f"{name} reads the facts kept across runs, which this spec's memory does "
                    "not offer; add memory: {extract_knowledge: true, navigation_tools: true}",
                )
            if name == RETRIEVE_TOOL_NAME and spec.knowledge is None and stage.retrieve is None:
                yield (
                    ("stages", i, *where),
                    "the retrieve tool searches the spec's knowledge, and this spec has none; "
                    "add knowledge: {sources: [docs/]} (or give the stage retrieve: with a "
                    "collection)",
                )
            if msg := _mcp_server_problem(spec, name):
                yield ("stages", i, *where), msg
    for r, rule in enumerate(spec.safety_rules):
        if msg := _mcp_server_problem(spec, rule.tool):
            yield ("safety_rules", r, "tool"), msg
    uses_http = [
        i
        for i, st in enumerate(spec.stages)
        if (st.role is not None and "http_request" in st.role.tools)
        or (st.tool is not None and st.tool.name == "http_request")
    ]
    if uses_http and not spec.http_allow_hosts:
        yield (
            ("stages", uses_http[0]),
            "this stage uses http_request but http_allow_hosts is empty, so every request would "
            "be refused; list the hosts it may reach, e.g. http_allow_hosts: [api.example.com]",
        )
    for r, rule in enumerate(spec.safety_rules):
        cond = rule.condition
        if cond is None:
            continue
        if msg := _rule_field_problem(spec, rule.tool, cond.field):
            yield ("safety_rules", r, "condition", "field"), msg
        if cond.op == "matches_regex":
            if not isinstance(cond.value, str):
                yield (
                    ("safety_rules", r, "condition", "value"),
                    f"matches_regex needs a regex string, got {cond.value!r}",
                )
            else:
                try:
                    re.compile(cond.value)
                except re.error as exc:
                    yield (
                        ("safety_rules", r, "condition", "value"),
                        f"regex {cond.value!r} does not compile: {exc}",
                    )
        elif cond.op != "truthy" and "value" not in cond.model_fields_set:
            yield (
                ("safety_rules", r, "condition"),
                f"op {cond.op!r} compares with a value; add value:",
            )
        if (
            cond.field == "_tool_reversibility"
            and cond.op in ("equals", "not_equals")
            and cond.value not in ("full", "partial", "none")
        ):
            yield (
                ("safety_rules", r, "condition", "value"),
                f"_tool_reversibility is full, partial or none, not {cond.value!r}",
            )
