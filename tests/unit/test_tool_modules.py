"""armature-agents 0.7.0 tool modules (``tools: [{module}]``): loaded once per registry, their
tools callable by name with 0.7.0's meaning, under the same safety policy as built-ins."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.tools import tool_call
from armature_temporal.runtime.models import ToolCallInput, ToolCallResult
from armature_temporal.tools import (
    ToolContext,
    ToolError,
    ToolRegistry,
    call_tool,
    get_tool_spec,
    load_tool_modules,
    tool_reversibility,
)
from tests.tool_modules import legacy_search

MODULE = "tests.tool_modules.legacy_search"


@pytest.fixture
def registry() -> ToolRegistry:
    fresh = ToolRegistry()
    load_tool_modules([MODULE], registry=fresh)
    return fresh


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, timeout_s=5, output_cap_bytes=1000)


def test_a_module_registers_once_per_registry() -> None:
    fresh = ToolRegistry()
    before = len(legacy_search.REGISTER_CALLS)
    load_tool_modules([MODULE, MODULE], registry=fresh)
    load_tool_modules([MODULE], registry=fresh)
    assert len(legacy_search.REGISTER_CALLS) == before + 1
    assert fresh.modules() == {MODULE: ["search", "mail.send", "weather", "wipe"]}
    assert "search" not in ToolRegistry().names()  # another registry is untouched


async def test_registered_tools_are_called_with_their_args_as_given(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    result = await call_tool("search", {"query": "tide", "limit": 3}, ctx, registry=registry)
    assert result.ok, result.error
    assert result.output == {"results": ["tide #0", "tide #1", "tide #2"]}
    # 0.7.0 passed args to handlers unchecked; so does Armature for these tools.
    loose = await call_tool(
        "search", {"query": "x", "limit": "1", "extra": 1}, ctx, registry=registry
    )
    assert loose.ok and loose.output == {"results": ["x #0"]}


async def test_a_failing_handler_is_a_tool_error(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call_tool("search", {}, ctx, registry=registry)
    assert result.error_type == "tool_error" and "KeyError" in (result.error or "")


async def test_sync_handler_non_mapping_output_and_postcondition(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    sent = await call_tool("mail.send", {"to": "a@b.example"}, ctx, registry=registry)
    assert sent.ok and sent.output == {"result": "sent to a@b.example"}
    refused = await call_tool("mail.send", {"to": "nobody"}, ctx, registry=registry)
    assert refused.error_type == "postcondition_failed"


def test_the_model_sees_parameters_as_an_object_schema(registry: ToolRegistry) -> None:
    spec = get_tool_spec("search", registry=registry)
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Search query"},
            "limit": {"type": "integer"},  # "optional" is 0.7.0's marker, not JSON Schema
        },
        "required": ["query"],
    }
    assert spec.description == "Search the knowledge base"
    assert spec.permission == "read_only"
    assert registry.get("search") == spec and registry.get("nope") is None
    assert {"name": "search", "description": spec.description, "parameters": spec.parameters} in (
        registry.descriptors()
    )


def test_reversibility_is_as_declared_with_0_7_0s_default(registry: ToolRegistry) -> None:
    assert tool_reversibility("search", {}, registry=registry) == "full"
    assert tool_reversibility("weather", {}, registry=registry) == "full"  # 0.7.0 default
    assert tool_reversibility("mail.send", {}, registry=registry) == "none"


async def test_a_0_7_0_packages_descriptor_is_read_by_attribute(ctx: ToolContext) -> None:
    class Level:  # an Enum member of another package: only .value matters
        value = "network"

    async def ping(args: dict[str, Any]) -> dict[str, Any]:
        return {"pong": args.get("n", 0)}

    fresh = ToolRegistry()
    fresh.register(
        SimpleNamespace(
            name="ping",
            description="Ping",
            permission=Level(),
            handler=ping,
            parameters={},
            reversibility=SimpleNamespace(value="partial"),
            postcondition=None,
        )
    )
    assert get_tool_spec("ping", registry=fresh).permission == "network"
    assert tool_reversibility("ping", {}, registry=fresh) == "partial"
    assert (await call_tool("ping", {"n": 2}, ctx, registry=fresh)).output == {"pong": 2}


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("tests.tool_modules.no_register", "has no register(registry) function"),
        ("tests.tool_modules.bad_register", "'shell' is a built-in tool's"),
        ("tests.tool_modules.not_there", "cannot be imported"),
    ],
)
def test_a_module_that_cannot_register_says_why_and_how_to_fix(module: str, message: str) -> None:
    fresh = ToolRegistry()
    with pytest.raises(ToolError) as info:
        load_tool_modules([module], registry=fresh)
    assert message in str(info.value) and repr(module) in str(info.value)
    assert fresh.modules() == {}  # not marked loaded: the next call tries again


def test_a_module_with_its_0_7_0_imports_loads_unchanged() -> None:
    import importlib.util
    import sys

    from armature_temporal.tools import compat

    aliased = sys.modules.get("armature") is compat
    if not aliased and importlib.util.find_spec("armature") is not None:  # pragma: no cover
        pytest.skip("armature-agents is installed here, so its own modules answer the imports")
    fresh = ToolRegistry()
    assert load_tool_modules(["tests.tool_modules.old_imports"], registry=fresh) is None
    assert fresh.modules() == {"tests.tool_modules.old_imports": ["old_echo"]}
    assert get_tool_spec("old_echo", registry=fresh).name == "old_echo"


def test_a_name_taken_by_another_handler_is_refused(registry: ToolRegistry) -> None:
    async def other(args: dict[str, Any]) -> dict[str, Any]:
        return {}

    with pytest.raises(ToolError, match="already registered"):
        registry.register(
            SimpleNamespace(name="search", description="", permission="read_only", handler=other)
        )


@pytest.mark.parametrize(
    ("descriptor", "message"),
    [
        ("search", "takes a ToolDescriptor"),
        (SimpleNamespace(name="t", handler=print, permission="admin"), "permission 'admin'"),
        (
            SimpleNamespace(name="t", handler=print, permission="network", reversibility="maybe"),
            "reversibility 'maybe'",
        ),
        (
            SimpleNamespace(name="t", handler=print, permission="network", parameters=["q"]),
            "parameters must be a mapping",
        ),
        (
            SimpleNamespace(
                name="t", handler=print, permission="network", parameters={"q": {"type": 5}}
            ),
            "not a valid JSON Schema",
        ),
    ],
)
def test_descriptors_0_7_0_would_not_accept_are_refused(descriptor: Any, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        ToolRegistry().register(descriptor)


def test_an_unknown_name_lists_the_tools_and_the_fix(registry: ToolRegistry) -> None:
    with pytest.raises(ToolError) as info:
        get_tool_spec("serach", registry=registry)
    message = str(info.value)
    assert "'search'" in message and "'file_read'" in message  # the known tools, module's too
    assert f"tool modules loaded: [{MODULE!r}]" in message
    assert "tools: [{module: ...}]" in message and "module:function" in message
    assert "did you mean 'search'" in message


# --- through the tool_call activity: the same policy as built-ins --------------------------------


async def call(tool: str, args: dict[str, Any], **fields: Any) -> ToolCallResult:
    result: ToolCallResult = await ActivityEnvironment().run(
        tool_call,
        ToolCallInput(
            run_id="r1",
            stage_id="s",
            tool=tool,
            args=args,
            spec_name="legacy",
            **{"tool_modules": [MODULE], **fields},
        ),
    )
    return result


async def test_activity_loads_the_plans_modules_and_runs_their_tools() -> None:
    result = await call("search", {"query": "{{ inputs.q }}"}, variables={"inputs": {"q": "ebb"}})
    assert result.ok, result.error
    assert result.output == {"results": ["ebb #0", "ebb #1"]}
    assert get_tool_spec("search").name == "search"  # the worker's registry has it now


async def test_activity_unknown_tool_fails_with_the_known_tools() -> None:
    result = await call("serach", {})
    assert result.error_type == "unknown_tool"
    assert "'search'" in (result.error or "") and "did you mean" in (result.error or "")


async def test_activity_module_that_cannot_load_fails_the_call() -> None:
    result = await call("search", {}, tool_modules=["tests.tool_modules.no_register"])
    assert result.error_type == "unknown_tool" and "register(registry)" in (result.error or "")


async def test_safety_rules_apply_to_module_tools() -> None:
    block = {
        "tool": "search",
        "condition": {"field": "query", "op": "contains", "value": "secret"},
        "action": "block",
    }
    blocked = await call("search", {"query": "the secret plan"}, safety_rules=[block])
    assert blocked.error_type == "policy_blocked" and blocked.policy_rule == 0
    strict = await call("search", {"query": "x"}, safety_mode="strict")
    assert strict.error_type == "policy_blocked" and "strict" in strict.policy_message
    irreversible = {
        "tool": "*",
        "condition": {"field": "_tool_reversibility", "op": "equals", "value": "none"},
        "action": "require_approval",
    }
    waits = await call("mail.send", {"to": "a@b.example"}, safety_rules=[irreversible])
    assert waits.policy_action == "require_approval" and not waits.ok
    approved = await call(
        "mail.send", {"to": "a@b.example"}, safety_rules=[irreversible], approved=True
    )
    assert approved.ok and approved.output == {"result": "sent to a@b.example"}


async def test_destructive_tools_wait_for_a_person_even_when_a_rule_allows() -> None:
    allow = {"tool": "wipe", "action": "allow"}
    waits = await call("wipe", {"target": "cache"}, safety_rules=[allow])
    assert waits.policy_action == "require_approval" and waits.error == "waiting for approval"
    assert "permission 'destructive'" in waits.policy_message
    block = {"tool": "wipe", "action": "block"}
    assert (await call("wipe", {}, safety_rules=[block])).policy_action == "block"
    approved = await call("wipe", {"target": "cache"}, safety_rules=[allow], approved=True)
    assert approved.ok and approved.output == {"wiped": "cache"}


async def test_verification_runs_call_only_read_only_module_tools() -> None:
    assert (await call("search", {"query": "x"}, verification=True)).ok
    network = await call("weather", {"city": "Oslo"}, verification=True)
    assert network.error_type == "policy_blocked"
    assert "permission 'network'" in (network.error or "")
    assert (await call("weather", {"city": "Oslo"})).ok  # an ordinary run may
