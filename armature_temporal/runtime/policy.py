"""The safety policy: the one decision every tool call passes through before it runs.

:func:`evaluate_policy` is pure (no I/O, no clock, no randomness), so a workflow may call it
as well as an activity. Rules are tried in order and the first that matches decides:

- a rule matches when its ``tool`` is ``*``, the tool's name, or ``mcp:<server>/*`` for a
  tool of that MCP server (``mcp:<server>/<tool>``), and its condition (if any) holds;
- ``condition.field`` is a dot path into the call's args (``headers.Authorization``,
  ``argv.0``: numbers index lists), or a pseudo-field (:data:`PSEUDO_FIELDS`): what the call
  will actually touch, worked out by the tool before it runs, never read from the args (an arg
  of the same name cannot forge it):

  - ``_tool_reversibility``: ``full``, ``partial`` or ``none`` (every tool);
  - ``_executable`` (``shell``): the absolute, symlink-free path of the program that will run
    (argv[0] resolved against the working directory when it has a ``/``, else through the
    PATH the tool uses); the tool then runs exactly that file;
  - ``_resolved_path`` (``file_read``, ``file_write``, ``file_list``): ``path`` resolved
    against the workspace, ``..`` and ``//`` collapsed and symlinks followed, relative to the
    workspace (``notes/a.txt``, ``.`` for the workspace itself) when inside it, absolute
    (``/etc/passwd``) when not;

- a field the call does not have (an arg it was not given, ``_executable`` for a program that
  is not found) fails closed: the condition never lets a call through. It is false, except
  that ``not_contains`` and ``not_equals`` hold for a ``block`` or ``require_approval`` rule
  (nothing there can prove the call harmless); so an ``allow``, ``warn`` or ``log`` rule never
  matches on a missing field (as in armature-agents 0.7.0).

Operators (``value`` is the rule's value):

=============== ===========================================================================
contains        string field: ``value`` is a substring. List field: ``value`` is an element,
                or, for a string ``value``, a substring of any string element (so
                ``argv contains "rm"`` matches ``["sh", "-c", "rm -rf /"]``). Object field:
                ``value`` is a key. Any other field: false.
not_contains    the negation of contains.
equals          ``field == value`` (a bool equals only a bool, so ``true`` never equals ``1``).
not_equals      the negation of equals.
matches_regex   ``re.search(value, text)``; text is the string itself, a list's elements
                joined by spaces (argv ``["rm", "-rf", "/"]`` gives ``"rm -rf /"``), or
                ``str(field)`` otherwise. A regex that does not compile blocks the call.
truthy          ``bool(field)``.
=============== ===========================================================================

No rule matched: ``allow`` in permissive mode, ``block`` in strict mode. ``warn`` and ``log``
let the call proceed; the caller records them. ``require_approval`` waits for a person.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.spec.models import Condition, SafetyRule

__all__ = [
    "EXECUTABLE_FIELD",
    "PSEUDO_FIELDS",
    "RESOLVED_PATH_FIELD",
    "REVERSIBILITY_FIELD",
    "PolicyDecision",
    "evaluate_policy",
]

#: The pseudo-field conditions use to test the tool's reversibility for this call.
REVERSIBILITY_FIELD = "_tool_reversibility"
#: The pseudo-field with the absolute, symlink-free path of the program a shell call runs.
EXECUTABLE_FIELD = "_executable"
#: The pseudo-field with a file tool's path resolved against the workspace.
RESOLVED_PATH_FIELD = "_resolved_path"
#: Every pseudo-field: rule fields the policy takes from what the tool resolved, not the args.
PSEUDO_FIELDS: tuple[str, ...] = (REVERSIBILITY_FIELD, EXECUTABLE_FIELD, RESOLVED_PATH_FIELD)

PolicyAction = Literal["allow", "block", "warn", "log", "require_approval"]


class _Missing:
    """The value of a field the args do not have."""


_MISSING = _Missing()


class PolicyDecision(BaseModel):
    """What to do with one tool call, and which rule said so."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: PolicyAction = Field(..., description="allow, block, warn, log or require_approval.")
    rule_index: int | None = Field(
        ..., description="Index in safety_rules of the deciding rule; None when none matched."
    )
    message: str = Field(..., description="Why: the rule's message, or a description.")

    @property
    def proceeds(self) -> bool:
        """Whether the call may run now (allow, warn, log); block and require_approval stop."""
        return self.action in ("allow", "warn", "log")


def evaluate_policy(
    *,
    rules: Sequence[SafetyRule],
    mode: Literal["permissive", "strict"],
    tool: str,
    args: Mapping[str, Any],
    reversibility: str,
    resolved: Mapping[str, str] | None = None,
) -> PolicyDecision:
    """Decide what happens to a call of ``tool`` with ``args``; the first matching rule wins.

    Args:
        rules: The spec's safety_rules, in order.
        mode: ``permissive`` allows a call no rule matches; ``strict`` blocks it.
        tool: The tool's name as the spec writes it (built-in or module:function).
        args: The call's arguments.
        reversibility: The call's reversibility (``tools.tool_reversibility``).
        resolved: The pseudo-fields the tool worked out for this call (``_executable``,
            ``_resolved_path``; ``tools.resolved_fields``); one it lacks is a missing field.

    Returns:
        The decision; ``rule_index`` points at the deciding rule.
    """
    for index, rule in enumerate(rules):
        if rule.tool not in ("*", tool) and not _server_wide(rule.tool, tool):
            continue
        if rule.condition is None:
            return _decided(index, rule, tool)
        try:
            holds = _holds(rule, rule.condition, args, reversibility, resolved or {})
        except re.error as exc:
            return PolicyDecision(
                action="block",
                rule_index=index,
                message=f"safety_rules[{index}]: regex {rule.condition.value!r} does not "
                f"compile ({exc}), so {tool!r} is blocked; fix the rule",
            )
        if holds:
            return _decided(index, rule, tool)
    if mode == "strict":
        saw = "".join(f" ({k} {v!r})" for k, v in sorted((resolved or {}).items()))
        return PolicyDecision(
            action="block",
            rule_index=None,
            message=f"strict safety mode denies tools no rule allows, and no rule matched "
            f"{tool!r}{saw}; to allow it add a rule such as "
            f"{{tool: {tool!r}, action: allow}} to safety_rules (with a condition to allow "
            "only some calls), or set safety_mode: permissive",
        )
    return PolicyDecision(
        action="allow", rule_index=None, message=f"no safety rule matched {tool!r}"
    )


def _decided(index: int, rule: SafetyRule, tool: str) -> PolicyDecision:
    if rule.message:
        message = rule.message
    else:
        when = ""
        if (cond := rule.condition) is not None:
            shown = "" if cond.op == "truthy" else f" {cond.value!r}"
            when = f" when {cond.field} {cond.op}{shown}"
        message = f"safety_rules[{index}]: {rule.action} {tool!r}{when}"
    return PolicyDecision(action=rule.action, rule_index=index, message=message)


def _lookup(
    args: Mapping[str, Any], path: str, reversibility: str, resolved: Mapping[str, str]
) -> Any:
    if path.split(".", 1)[0] in PSEUDO_FIELDS:  # never from the args, so never forged
        if path == REVERSIBILITY_FIELD:
            return reversibility
        return resolved.get(path, _MISSING)
    value: Any = args
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part, _MISSING)
        elif isinstance(value, list | tuple) and part.isdigit():
            value = value[int(part)] if int(part) < len(value) else _MISSING
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _contains(field: Any, value: Any) -> bool:
    if isinstance(field, str):
        return value is not None and str(value) in field
    if isinstance(field, list | tuple):
        if any(_equals(item, value) for item in field):
            return True
        return isinstance(value, str) and any(
            isinstance(item, str) and value in item for item in field
        )
    if isinstance(field, Mapping):
        return isinstance(value, str) and value in field
    return False


def _equals(field: Any, value: Any) -> bool:
    if isinstance(field, bool) or isinstance(value, bool):
        return isinstance(field, bool) and isinstance(value, bool) and field == value
    return bool(field == value)


def _text(field: Any) -> str:
    if isinstance(field, list | tuple):
        return " ".join(str(item) for item in field)
    return str(field)


def _holds(
    rule: SafetyRule,
    cond: Condition,
    args: Mapping[str, Any],
    reversibility: str,
    resolved: Mapping[str, str],
) -> bool:
    field = _lookup(args, cond.field, reversibility, resolved)
    if field is _MISSING:  # fail closed: only a rule that stops the call may match
        return cond.op in ("not_contains", "not_equals") and rule.action in (
            "block",
            "require_approval",
        )
    match cond.op:
        case "contains":
            return _contains(field, cond.value)
        case "not_contains":
            return not _contains(field, cond.value)
        case "equals":
            return _equals(field, cond.value)
        case "not_equals":
            return not _equals(field, cond.value)
        case "matches_regex":
            return re.search(str(cond.value), _text(field)) is not None
        case "truthy":
            return bool(field)


def _server_wide(rule_tool: str, tool: str) -> bool:
    """``mcp:<server>/*`` matches every ``mcp:<server>/<tool>``."""
    return (
        rule_tool.startswith("mcp:")
        and rule_tool.endswith("/*")
        and tool.startswith(rule_tool[:-1])
        and "/" not in rule_tool[4:-2]
    )
