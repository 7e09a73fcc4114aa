"""Armature as an MCP server: each served spec is a tool, plus tools to read a run, list the
gates waiting for a person, and decide one.

- ``<spec name>``: its input schema is the spec's inputs; it starts a run and waits up to
  ``wait_s`` for it: the result is the run's outputs, or its id and the gates it waits at, or
  its id while it is still running (read it later with ``run_status``).
- ``run_status(run_id)``: status, state, outputs and waiting gates of a run of a served spec.
- ``list_gates()``: the gates waiting for a decision in runs of the served specs.
- ``decide_gate(run_id, gate, decision, comment)``: approve or reject one (a rejection needs
  a reason), recorded as decided by the caller.

Over stdio the caller is the local user (every scope). Over streamable HTTP every request
carries a run API token (``Authorization: Bearer``; ``armature tokens create``), checked by
the run API's authorizer: listing needs ``read``, starting a run ``run``, reading ``read``,
deciding ``approve`` (``admin`` holds all). On loopback, while no token exists, the server is
open to programs on this machine, as ``armature serve`` is.
"""

from __future__ import annotations

import asyncio
import getpass
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from armature_temporal.service.api.principal import SCOPES, Authorizer, Principal
from armature_temporal.spec.plan import Plan

__all__ = ["FIXED_TOOLS", "ServedSpecs", "build_server", "guarded_app"]

#: Tools every server has, and the scope each needs.
FIXED_TOOLS: dict[str, str] = {"run_status": "read", "list_gates": "read", "decide_gate": "approve"}
#: How often a waiting spec tool looks at its run.
POLL_S = 0.3


@dataclass
class ServedSpecs:
    """What the server acts on: the plans by name, a Temporal client, the queue runs go to,
    how long a spec tool waits for its run, and (over HTTP) the run API's authorizer."""

    plans: dict[str, Plan]
    client: Callable[[], Awaitable[Any]]
    task_queue: str
    wait_s: float = 60.0
    auth: Authorizer | None = None


class Refused(Exception):
    """A call the caller may not make, or with bad arguments: an error result, not a crash."""


def _local() -> Principal:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "local"
    return Principal(f"mcp:{user}", frozenset(SCOPES))


def _principal(served: ServedSpecs, ctx: Any) -> Principal:
    request = getattr(ctx, "request", None)
    if served.auth is None or request is None:
        return _local()
    from armature_temporal.service.api.errors import ApiError

    try:
        return served.auth.authenticate(request)
    except ApiError as exc:
        raise Refused(exc.message) from None


def _schema(plan: Plan) -> dict[str, Any]:
    schema = dict(plan.inputs_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _tools(served: ServedSpecs) -> list[Any]:
    import mcp_types as types

    tools = [
        types.Tool(
            name=name,
            description=(
                f"Run the Armature workflow {name!r}"
                + (f": {' '.join(plan.description.split())}" if plan.description else "")
                + f". Waits up to {served.wait_s:g}s; returns the run's outputs, or its run_id "
                "and the gates it waits at (decide them with decide_gate), or its run_id while "
                "it still runs (read it with run_status)."
            ),
            input_schema=_schema(plan),
        )
        for name, plan in served.plans.items()
    ]
    run_id = {"type": "string", "description": "The run's id (a spec tool returns it)."}
    tools += [
        types.Tool(
            name="run_status",
            description="A run's status, state, outputs and the gates it waits at.",
            input_schema={
                "type": "object",
                "properties": {"run_id": run_id},
                "required": ["run_id"],
            },
        ),
        types.Tool(
            name="list_gates",
            description="The human approval gates waiting for a decision, in runs of the "
            "served workflows.",
            input_schema={"type": "object", "properties": {}},
        ),
        types.Tool(
            name="decide_gate",
            description="Approve or reject a waiting gate (needs the approve scope); a "
            "rejection needs a comment saying why.",
            input_schema={
                "type": "object",
                "properties": {
                    "run_id": run_id,
                    "gate": {"type": "string", "description": "The gate (a stage id)."},
                    "decision": {"type": "string", "enum": ["approve", "reject"]},
                    "comment": {"type": "string", "description": "Why (kept with it)."},
                },
                "required": ["run_id", "gate", "decision"],
            },
        ),
    ]
    return tools


async def _served_run(served: ServedSpecs, client: Any, run_id: str) -> Any:
    """The run's view, if it is a run of a served spec."""
    from armature_temporal.service.client import show_run

    try:
        view = await show_run(client, run_id)
    except Exception as exc:  # not found, or the server is down: say which
        raise Refused(f"run {run_id!r}: {getattr(exc, 'message', None) or exc}") from None
    if view.spec_name not in served.plans:
        raise Refused(f"run {run_id!r} is not a run of a served workflow ({sorted(served.plans)})")
    return view


def _view(view: Any) -> dict[str, Any]:
    return {
        "run_id": view.run_id,
        "spec": view.spec_name,
        "status": view.status,
        "state": view.state,
        "reason": view.reason,
        "outputs": view.outputs,
        "waiting_gates": [
            {"gate": g.stage, "message": g.message, "since": g.since} for g in view.pending_gates
        ],
    }


async def _run_spec(served: ServedSpecs, name: str, args: dict[str, Any]) -> dict[str, Any]:
    from armature_temporal.service.client import (
        InputError,
        prepare_inputs,
        query_status,
        start_run,
    )

    plan = served.plans[name]
    try:
        inputs = prepare_inputs(plan, args, how="give them as the tool's arguments")
    except InputError as exc:
        raise Refused(str(exc)) from None
    client = await served.client()
    handle = await start_run(client, plan, inputs, task_queue=served.task_queue)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + served.wait_s
    while loop.time() < deadline:
        desc = await handle.describe()
        if desc.status is not None and desc.status.name != "RUNNING":
            break
        try:
            status = await query_status(handle, 5.0)
        except Exception:  # no worker answered yet: look again
            status = None
        if status is not None and status.pending_gates:
            break
        await asyncio.sleep(POLL_S)
    view = await _served_run(served, client, handle.id)
    out = _view(view)
    if view.status == "running" and not view.pending_gates:
        out["note"] = f"still running after {served.wait_s:g}s; read it with run_status"
    return out


async def _gates(served: ServedSpecs) -> dict[str, Any]:
    from armature_temporal.service.client import waiting_gates

    client = await served.client()
    listed, unknown = [], []
    for run, found in await waiting_gates(client):
        if run.spec_name not in served.plans:
            continue
        if isinstance(found, str):
            unknown.append({"run_id": run.run_id, "reason": found})
            continue
        listed += [
            {"run_id": run.run_id, "spec": run.spec_name, "gate": g.stage, "message": g.message}
            for g in found
        ]
    return {"gates": listed, "unknown": unknown}


async def _decide(served: ServedSpecs, args: dict[str, Any], who: Principal) -> dict[str, Any]:
    from armature_temporal.service.client import GateError, decide_gate

    decision = args.get("decision")
    if decision not in ("approve", "reject"):
        raise Refused(f"decision must be 'approve' or 'reject', not {decision!r}")
    client = await served.client()
    run_id, gate = str(args.get("run_id", "")), str(args.get("gate", ""))
    await _served_run(served, client, run_id)
    try:
        said = await decide_gate(
            client, run_id, gate, decision, comment=args.get("comment") or None, by=who.name
        )
    except GateError as exc:
        raise Refused(str(exc)) from None
    return {"run_id": run_id, "gate": gate, "decision": decision, "by": who.name, "said": said}


def build_server(served: ServedSpecs) -> Any:
    """The low-level MCP server (``mcp.server.lowlevel.Server``) for ``served``.

    Raises:
        ValueError: a served spec's name is one of :data:`FIXED_TOOLS`.
    """
    import mcp_types as types
    from mcp.server.lowlevel import Server

    clash = sorted(set(served.plans) & set(FIXED_TOOLS))
    if clash:
        raise ValueError(
            f"spec {clash[0]!r} has the name of one of the server's own tools "
            f"({sorted(FIXED_TOOLS)}); rename the spec to serve it"
        )

    def result(payload: dict[str, Any], error: bool = False) -> Any:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload, default=str))],
            structured_content=payload,
            is_error=error,
        )

    async def list_tools(ctx: Any, params: Any) -> Any:
        who = _principal(served, ctx)
        if not who.allows("read"):
            raise PermissionError("listing the tools needs the read scope")
        return types.ListToolsResult(tools=_tools(served))

    async def call_tool(ctx: Any, params: Any) -> Any:
        name, args = params.name, dict(params.arguments or {})
        try:
            who = _principal(served, ctx)
            scope = FIXED_TOOLS.get(name, "run")
            if name not in FIXED_TOOLS and name not in served.plans:
                raise Refused(f"no tool {name!r}; tools: {sorted([*served.plans, *FIXED_TOOLS])}")
            if not who.allows(scope):
                raise Refused(
                    f"{name} needs the {scope} scope, and the token {who.name!r} holds "
                    f"{sorted(who.scopes) or 'none'}; create one with `armature tokens create "
                    f"NAME --scope {scope}`"
                )
            if name == "run_status":
                client = await served.client()
                return result(_view(await _served_run(served, client, str(args.get("run_id")))))
            if name == "list_gates":
                return result(await _gates(served))
            if name == "decide_gate":
                return result(await _decide(served, args, who))
            return result(await _run_spec(served, name, args))
        except Refused as exc:
            return result({"error": str(exc)}, error=True)

    return Server(
        "armature",
        version="1",
        instructions="Run Armature workflows and answer their approval gates.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def guarded_app(app: Any, auth: Authorizer) -> Any:
    """``app`` (the MCP streamable HTTP app) behind the run API's tokens: a request the
    authorizer refuses is answered 401/403 with what to send, before MCP sees it."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    from armature_temporal.service.api.errors import ApiError

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            try:
                auth.authenticate(Request(scope))
            except ApiError as exc:
                body = {"error": {"code": exc.code, "message": exc.message, "fix": exc.fix}}
                await JSONResponse(body, status_code=exc.status)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded
