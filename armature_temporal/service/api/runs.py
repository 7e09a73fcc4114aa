"""The run API's routes: health, the served specs, starting, showing and cancelling runs, and
deciding gates (``/run/{id}/events`` is :mod:`~armature_temporal.service.api.events`).

Every route but ``GET /health`` needs a scope (``deps.require``): ``read`` to look, ``run``
to start and cancel, ``approve`` to decide gates. A refusal is the JSON error body of
:mod:`~armature_temporal.service.api.errors`, and a refused request does nothing.

A POST that starts a run and carries ``Idempotency-Key`` starts it under a workflow id derived
from the caller, the spec and the key (:func:`api_run_id`), and Temporal refuses a second start
of that id: a repeat answers 200 with ``"duplicate": true`` and the first run's id, for as long
as Temporal keeps the run (the namespace's retention period).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Body, Depends, Header, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import Client

from armature_temporal.errors import ArmatureError
from armature_temporal.service.api.deps import (
    ServiceState,
    plan_named,
    require,
    state_of,
    temporal,
)
from armature_temporal.service.api.errors import ApiError
from armature_temporal.service.api.principal import Principal
from armature_temporal.service.api.scope import answering, served_run, shown_in_listing
from armature_temporal.spec.compiler import Plan

__all__ = ["DEFAULT_WAIT_S", "MAX_WAIT_S", "GateRequest", "RunRequest", "api_run_id", "router"]

#: How long ``POST /run`` waits for the run to end by default, and at most (``?wait=``).
DEFAULT_WAIT_S = 30.0
MAX_WAIT_S = 300.0
#: How long ``GET /health`` waits for the Temporal server to answer.
HEALTH_TIMEOUT_S = 2.0

router = APIRouter()

State = Annotated[ServiceState, Depends(state_of)]
Temporal = Annotated[Client, Depends(temporal)]
Reader = Annotated[Principal, Depends(require("read"))]
Runner = Annotated[Principal, Depends(require("run"))]
Approver = Annotated[Principal, Depends(require("approve"))]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Retries with the same key (same caller, same spec) start the run once.",
    ),
]
Wait = Annotated[
    float,
    Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for the run to end before 202."),
]


class RunRequest(BaseModel):
    """``POST /run`` and ``POST /run/async``: which served spec, with which inputs."""

    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="The name of a served spec (see GET /workflows).")
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="Run inputs; the spec's defaults fill the rest."
    )


class GateRequest(BaseModel):
    """``POST /run/{id}/gates/{stage}``: the decision on a waiting gate."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject"]
    comment: str | None = Field(default=None, description="Why; kept with the decision.")
    reason: str | None = Field(
        default=None, description="Why it is rejected (a rejection needs reason or comment)."
    )


def api_run_id(plan: Plan, caller: str, key: str) -> str:
    """The workflow id of a run started with an idempotency key: the same caller, spec and key
    give the same id (and so at most one run)."""
    text = f"{caller}\n{plan.name}\n{key}".encode("utf-8", "surrogateescape")
    return f"{plan.name}-api-{hashlib.sha256(text).hexdigest()[:16]}"


def _links(run_id: str) -> dict[str, str]:
    quoted = quote(run_id, safe="")
    return {"self": f"/run/{quoted}", "events": f"/run/{quoted}/events"}


# --- looking -------------------------------------------------------------------------------


@router.get(
    "/health",
    summary="Whether runs can be served: 200 when Temporal answers, else 503 with ok false",
)
async def health(state: State) -> JSONResponse:
    from datetime import timedelta

    from temporalio.service import RPCError

    reachable = False
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            client = await state.client()
            reachable = await client.service_client.check_health(
                timeout=timedelta(seconds=HEALTH_TIMEOUT_S)
            )
    except (TimeoutError, RPCError, RuntimeError, ArmatureError):  # ConnectionFailed is one
        reachable = False
    if reachable:
        return JSONResponse({"ok": True, "specs": len(state.plans), "temporal": "reachable"})
    # Without Temporal no run can start, be read or be decided: not ok (it said ok before).
    return JSONResponse(
        {
            "ok": False,
            "specs": len(state.plans),
            "temporal": "unreachable",
            "fix": "start the Temporal server (or `armature dev`); `armature doctor` checks it",
        },
        status_code=503,
        headers={"Retry-After": "5"},
    )


def _stages(plan: Plan) -> list[dict[str, Any]]:
    return [
        {
            "name": s.id,
            "role": s.role.name if s.role else None,
            "depends_on": list(s.depends_on),
            "gate": s.gate is not None,
        }
        for s in plan.stages
    ]


@router.get("/workflows", summary="The specs this server runs")
async def workflows(_: Reader, state: State) -> dict[str, Any]:
    return {
        "workflows": [
            {
                "name": plan.name,
                "version": plan.version,
                "description": plan.description,
                "inputs": sorted(plan.inputs_schema.get("properties", {})),
                "stages": [s.id for s in plan.stages],
            }
            for plan in sorted(state.plans.values(), key=lambda p: p.name)
        ]
    }


@router.get("/workflows/{name}", summary="One spec: its inputs' JSON schema and its stages")
async def workflow(name: str, _: Reader, state: State) -> dict[str, Any]:
    plan = plan_named(state, name)
    return {
        "name": plan.name,
        "version": plan.version,
        "description": plan.description,
        "inputs_schema": plan.inputs_schema,
        "stages": _stages(plan),
    }


@router.get("/run/{run_id}", summary="A run: status, stages, outputs, pending gates")
async def show(run_id: str, _: Reader, state: State, client: Temporal) -> dict[str, Any]:
    from armature_temporal.service.client import show_run

    with answering(state, run_id):
        await served_run(state, client, run_id)
        view = await show_run(client, run_id)
    return view.model_dump(mode="json")


@router.get("/gates", summary="Every gate waiting for a decision")
async def gates(_: Reader, state: State, client: Temporal) -> dict[str, Any]:
    """The gates waiting in runs of the served specs (every run's, with ``--all-runs``)."""
    from armature_temporal.service.client import waiting_gates

    with answering(state):
        waiting = [
            (run, found)
            for run, found in await waiting_gates(client)
            if await shown_in_listing(state, client, run.run_id, run.spec_name)
        ]
    listed: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    for run, found in waiting:
        if isinstance(found, str):
            unknown.append({"run_id": run.run_id, "reason": found})
            continue
        for gate in found:
            listed.append(
                {
                    "run_id": run.run_id,
                    "spec": run.spec_name,
                    "stage": gate.stage,
                    "message": gate.message,
                    "since": gate.since,
                    "timeout_s": gate.timeout_s,
                    "on_timeout": gate.on_timeout,
                }
            )
    return {"gates": listed, "unknown": unknown}


# --- starting and stopping -----------------------------------------------------------------


async def _start(
    state: ServiceState,
    client: Client,
    plan: Plan,
    given: dict[str, Any],
    caller: Principal,
    key: str | None,
) -> tuple[str, bool]:
    """Start a run of ``plan``; returns its id and whether it is a duplicate (an earlier
    request with the same key started it)."""
    from temporalio.common import WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from armature_temporal.service.client import InputError, prepare_inputs, start_run

    try:
        inputs = prepare_inputs(plan, given, how="send them as the object `inputs`")
    except InputError as exc:
        raise ApiError(
            422,
            "invalid_inputs",
            str(exc),
            f"fix the inputs named; GET /workflows/{plan.name} has their JSON schema",
        ) from None
    key = (key or "").strip() or None
    try:
        with answering(state):
            handle = await start_run(
                client,
                plan,
                inputs,
                task_queue=state.task_queue,
                run_id=api_run_id(plan, caller.name, key) if key else None,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE if key else None,
            )
    except WorkflowAlreadyStartedError as exc:
        return exc.workflow_id, True
    return handle.id, False


async def _status_of(state: ServiceState, client: Client, run_id: str) -> str:
    from armature_temporal.service.client import run_status

    with answering(state, run_id):
        desc = await client.get_workflow_handle(run_id).describe()
    return run_status(desc.status)


def _accepted(run_id: str) -> JSONResponse:
    return JSONResponse(
        {"run_id": run_id, "status": "running", "links": _links(run_id)}, status_code=202
    )


async def _duplicate(state: ServiceState, client: Client, run_id: str) -> JSONResponse:
    return JSONResponse(
        {
            "run_id": run_id,
            "status": await _status_of(state, client, run_id),
            "duplicate": True,
            "links": _links(run_id),
        },
        status_code=200,
    )


async def _run_and_wait(
    state: ServiceState,
    client: Client,
    plan: Plan,
    inputs: dict[str, Any],
    caller: Principal,
    key: str | None,
    wait: float,
) -> JSONResponse:
    from temporalio.client import WorkflowFailureError

    from armature_temporal.service.client import show_run

    run_id, duplicate = await _start(state, client, plan, inputs, caller, key)
    if duplicate:
        return await _duplicate(state, client, run_id)
    handle = client.get_workflow_handle(run_id)
    try:
        async with asyncio.timeout(wait):
            await handle.result()
    except TimeoutError:
        return _accepted(run_id)
    except WorkflowFailureError:
        pass  # failed, rejected, cancelled: the view below says which and why
    with answering(state, run_id):
        view = await show_run(client, run_id)
    return JSONResponse(
        {
            "run_id": run_id,
            "status": view.status,
            "state": view.state,
            "reason": view.reason,
            "outputs": view.outputs,
            "stages": {k: v.model_dump(mode="json") for k, v in view.stages.items()},
        },
        status_code=200,
    )


async def _run_async(
    state: ServiceState,
    client: Client,
    plan: Plan,
    inputs: dict[str, Any],
    caller: Principal,
    key: str | None,
) -> JSONResponse:
    run_id, duplicate = await _start(state, client, plan, inputs, caller, key)
    if duplicate:
        return await _duplicate(state, client, run_id)
    return _accepted(run_id)


_RUN_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"description": "The run ended within `wait` (or: a duplicate of an earlier request)"},
    202: {"description": "Still running: follow `links.self` or `links.events`"},
}
_ASYNC_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"description": "A duplicate of an earlier request with the same Idempotency-Key"},
    202: {"description": "Started: follow `links.self` or `links.events`"},
}


@router.post("/run", summary="Start a run and wait for it to end", responses=_RUN_ANSWERS)
async def run(
    caller: Runner,
    body: RunRequest,
    state: State,
    client: Temporal,
    key: IdempotencyKey = None,
    wait: Wait = DEFAULT_WAIT_S,
) -> JSONResponse:
    plan = plan_named(state, body.spec)
    return await _run_and_wait(state, client, plan, body.inputs, caller, key, wait)


@router.post("/run/async", summary="Start a run", status_code=202, responses=_ASYNC_ANSWERS)
async def run_async(
    caller: Runner, body: RunRequest, state: State, client: Temporal, key: IdempotencyKey = None
) -> JSONResponse:
    plan = plan_named(state, body.spec)
    return await _run_async(state, client, plan, body.inputs, caller, key)


InputsBody = Annotated[
    dict[str, Any], Body(default_factory=dict, description="The run inputs object.")
]


@router.post(
    "/workflows/{name}/run", summary="Start a run of NAME and wait", responses=_RUN_ANSWERS
)
async def run_named(
    name: str,
    caller: Runner,
    state: State,
    client: Temporal,
    inputs: InputsBody,
    key: IdempotencyKey = None,
    wait: Wait = DEFAULT_WAIT_S,
) -> JSONResponse:
    plan = plan_named(state, name)
    return await _run_and_wait(state, client, plan, inputs, caller, key, wait)


@router.post(
    "/workflows/{name}/run/async",
    summary="Start a run of NAME",
    status_code=202,
    responses=_ASYNC_ANSWERS,
)
async def run_named_async(
    name: str,
    caller: Runner,
    state: State,
    client: Temporal,
    inputs: InputsBody,
    key: IdempotencyKey = None,
) -> JSONResponse:
    plan = plan_named(state, name)
    return await _run_async(state, client, plan, inputs, caller, key)


@router.delete("/run/{run_id}", summary="Cancel a run")
async def cancel(run_id: str, _: Runner, state: State, client: Temporal) -> dict[str, Any]:
    from armature_temporal.service.client import cancel_run

    with answering(state, run_id):
        await served_run(state, client, run_id)
        outcome = await cancel_run(client, run_id)
    return {"run_id": run_id, "status": outcome.status, "already_ended": outcome.already_ended}


# --- deciding ------------------------------------------------------------------------------


@router.post("/run/{run_id}/gates/{stage}", summary="Approve or reject a waiting gate")
async def decide(
    run_id: str, stage: str, caller: Approver, body: GateRequest, state: State, client: Temporal
) -> dict[str, Any]:
    """The same validated update as ``armature approve|reject``: an unknown or decided gate
    is 409 and nothing is written. The decision records ``by`` = the token's name: this
    server proves it with the trace key (503 ``cannot_authenticate`` when it has none)."""
    from armature_temporal.service.client import GateAuthError, GateError, decide_gate

    comment = body.reason or body.comment
    if body.decision == "reject" and not comment:
        raise ApiError(
            422,
            "reason_required",
            f"rejecting gate {stage!r} of run {run_id!r} needs a reason",
            'send {"decision": "reject", "reason": "why"}; the reason is kept with the decision',
        )
    with answering(state, run_id):
        await served_run(state, client, run_id)
    try:
        with answering(state, run_id):
            answer = await decide_gate(
                client, run_id, stage, body.decision, comment=comment, by=caller.name
            )
    except GateAuthError as exc:
        raise ApiError(
            503,
            "cannot_authenticate",
            str(exc),
            "give armature serve the workers' trace key ($ARMATURE_HOME/trace.key)",
        ) from None
    except GateError as exc:
        raise ApiError(
            409,
            "not_waiting",
            str(exc),
            f"GET /run/{quote(run_id, safe='')} shows the gates waiting; nothing was written",
        ) from None
    return {
        "run_id": run_id,
        "stage": stage,
        "decision": body.decision,
        "by": caller.name,
        "answer": answer,
    }
