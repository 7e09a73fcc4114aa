"""Client-side operations on runs: connect, submit, list, show, cancel, decide gates.

The CLI calls these and prints; tests call them directly. Nothing here runs inside a workflow.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import (
    Client,
    TLSConfig,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from armature_temporal.errors import ArmatureError
from armature_temporal.runtime.models import (
    GateDecision,
    GateInfo,
    RefusedSignal,
    RunInput,
    RunResult,
    RunStatus,
    StageResult,
)
from armature_temporal.runtime.payloads import data_converter
from armature_temporal.runtime.search_attributes import ALL_KEYS, SPEC_HASH, SPEC_NAME, WAITING_GATE
from armature_temporal.service.inputs import InputError, coerce_input, prepare_inputs
from armature_temporal.service.loop_progress import live_loops
from armature_temporal.settings import namespace as default_namespace
from armature_temporal.spec.compiler import Plan
from armature_temporal.telemetry import tracing

__all__ = [
    "CancelOutcome",
    "ConnectionFailed",
    "GateAuthError",
    "GateError",
    "InputError",
    "RunNotFound",
    "RunSummary",
    "RunView",
    "cancel_run",
    "coerce_input",
    "connect",
    "decide_gate",
    "describe_run",
    "ensure_search_attributes",
    "list_runs",
    "prepare_inputs",
    "run_status",
    "show_run",
    "start_run",
    "waiting_gates",
]

WORKFLOW_NAME = "RunSpec"


class ConnectionFailed(ArmatureError):
    """The Temporal server could not be reached (``reason``: what the connection said)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class RunNotFound(ArmatureError):
    """No run with that id."""


class GateError(ArmatureError):
    """A gate decision was refused (unknown stage, or not waiting)."""


class GateAuthError(GateError):
    """A decision cannot be sent as the caller: there is no trace key here to make its proof
    with (nothing was sent)."""


async def connect(address: str, namespace: str | None = None) -> Client:
    """Connect with Armature's data converter; TLS and API key from the environment.

    ``TEMPORAL_TLS_CERT``/``TEMPORAL_TLS_KEY`` (file paths) enable mTLS, ``TEMPORAL_API_KEY``
    an API key (Temporal Cloud).

    Raises:
        ConnectionFailed: naming the address and what to do.
    """
    tls: TLSConfig | bool = False
    cert, key = os.environ.get("TEMPORAL_TLS_CERT"), os.environ.get("TEMPORAL_TLS_KEY")
    if cert and key:
        with open(cert, "rb") as c, open(key, "rb") as k:
            tls = TLSConfig(client_cert=c.read(), client_private_key=k.read())
    api_key = os.environ.get("TEMPORAL_API_KEY") or None
    # OTEL_EXPORTER_OTLP_ENDPOINT set: this process exports traces, and the client (with the
    # workers built on it) carries Temporal's OpenTelemetry plugin.
    tracing.configure()
    try:
        return await Client.connect(
            address,
            namespace=namespace or default_namespace(),
            data_converter=data_converter(),
            tls=tls if not api_key else True,
            api_key=api_key,
            plugins=tracing.client_plugins(),
        )
    except RuntimeError as exc:
        raise ConnectionFailed(
            f"cannot reach the Temporal server at {address}: {exc}. Start the local stack with "
            "`armature dev`, or point TEMPORAL_ADDRESS / --address at a running server",
            reason=str(exc),
        ) from None


async def ensure_search_attributes(client: Client) -> list[str]:
    """Register Armature's search attributes if the server lacks them; returns those added."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    have = set(listed.custom_attributes) | set(listed.system_attributes)
    missing = {}
    for key in ALL_KEYS:
        if key.name not in have:
            kind = (
                IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
                if key.value_type is str
                else (IndexedValueType.INDEXED_VALUE_TYPE_BOOL)
            )
            missing[key.name] = kind
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    return sorted(missing)


def new_run_id(plan: Plan) -> str:
    return f"{plan.name}-{uuid.uuid4().hex[:8]}"


async def start_run(
    client: Client,
    plan: Plan,
    inputs: dict[str, Any],
    *,
    task_queue: str,
    run_id: str | None = None,
    prior_run: dict[str, Any] | None = None,
    id_reuse_policy: WorkflowIDReusePolicy | None = None,
    replicate: int = 0,
    verification: bool = False,
) -> WorkflowHandle[Any, RunResult]:
    """Start the interpreter workflow for ``plan``; returns its handle.

    ``replicate`` numbers runs of the same inputs: the simulate provider seeds its noise from
    the inputs and it, so equal inputs and replicate give equal noise. ``verification`` starts
    a verification run (RunInput.verification: it never acts; ``armature eval``'s runs).

    ``id_reuse_policy=REJECT_DUPLICATE`` makes a given ``run_id`` start at most one run ever
    (webhook deliveries); the default lets an id be reused once its run has closed.
    """
    workflow_id = run_id or new_run_id(plan)
    return await client.start_workflow(
        WORKFLOW_NAME,
        RunInput(
            plan=plan,
            inputs=inputs,
            prior_run=prior_run,
            replicate=replicate,
            verification=verification,
        ),
        id=workflow_id,
        task_queue=task_queue,
        id_reuse_policy=id_reuse_policy or WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        result_type=RunResult,
        # contracts.timeout_hours bounds the whole run, gates included.
        run_timeout=timedelta(seconds=plan.run_timeout_s) if plan.run_timeout_s else None,
        memo={
            "spec_name": plan.name,
            "spec_version": plan.version,
            "spec_hash": plan.spec_hash,
            "policy_version": plan.policy_version,
        },
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(SPEC_NAME, plan.name),
                SearchAttributePair(SPEC_HASH, plan.spec_hash),
                SearchAttributePair(WAITING_GATE, False),
            ]
        ),
        static_summary=f"Armature run of spec {plan.name!r} v{plan.version}",
        static_details=plan.description or None,
    )


def run_status(status: WorkflowExecutionStatus | None) -> str:
    """A Temporal execution status in Armature's words, the same everywhere (CLI, store, UI
    links): ``running``, ``completed``, ``failed``, ``cancelled``, ``terminated``,
    ``timed_out``, ``continued_as_new``. Temporal spells ``canceled``; the run states and the
    trace store spell ``cancelled``, so that is the one spelling shown.

    A rejected run is a failed workflow (error type ``RunRejected``) in Temporal, so the Web
    UI does not list it as completed; its ``state`` (``show_run``) says ``rejected``.
    """
    if status is None:
        return "unknown"
    if status == WorkflowExecutionStatus.CANCELED:
        return "cancelled"
    return status.name.lower()


class RunSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    spec_name: str | None
    status: str
    waiting_gate: bool = False
    started: str | None = None
    closed: str | None = None


async def list_runs(
    client: Client, *, spec: str | None = None, limit: int = 20, waiting_only: bool = False
) -> list[RunSummary]:
    """Runs from Temporal visibility, newest first."""
    clauses = [f"WorkflowType = '{WORKFLOW_NAME}'"]
    if spec:
        clauses.append(f"ArmatureSpecName = '{spec}'")
    if waiting_only:
        clauses += ["ArmatureWaitingGate = true", "ExecutionStatus = 'Running'"]
    out = []
    async for wf in client.list_workflows(" AND ".join(clauses), limit=limit):
        attrs = wf.typed_search_attributes
        out.append(
            RunSummary(
                run_id=wf.id,
                spec_name=attrs.get(SPEC_NAME),
                status=run_status(wf.status),
                waiting_gate=bool(attrs.get(WAITING_GATE)),
                started=wf.start_time.isoformat() if wf.start_time else None,
                closed=wf.close_time.isoformat() if wf.close_time else None,
            )
        )
    return out


class RunView(BaseModel):
    """Everything ``armature runs show`` prints."""

    run_id: str
    temporal_run_id: str | None = None
    spec_name: str | None
    status: str
    state: str | None = None
    reason: str | None = None
    #: The inputs it started with (defaults filled in); None where its start is unreadable.
    inputs: dict[str, Any] | None = None
    parent_run_id: str | None = None
    stages: dict[str, StageResult] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    pending_gates: list[GateInfo] = Field(default_factory=list)
    refused_signals: list[RefusedSignal] = Field(default_factory=list)


#: How long ``show_run`` waits for a worker to answer a closed run's status query.
CLOSED_QUERY_TIMEOUT_S = 5.0


async def query_status(handle: WorkflowHandle[Any, Any], timeout_s: float) -> RunStatus:
    """The run's ``status`` query, waiting at most ``timeout_s`` for a worker to answer (a
    closed run is replayed by a worker to answer it).

    Raises:
        RPCError: no worker answered in time, or the server refused.
    """
    status: RunStatus = await handle.query(
        "status", result_type=RunStatus, rpc_timeout=timedelta(seconds=timeout_s)
    )
    return status


async def describe_run(client: Client, run_id: str) -> WorkflowExecutionDescription:
    """The run's Temporal description.

    Raises:
        RunNotFound: no run ``run_id`` on this server.
    """
    try:
        return await client.get_workflow_handle(run_id).describe()
    except RPCError as exc:
        if "not found" in str(exc).lower():
            raise RunNotFound(
                f"no run {run_id!r} on this server; list runs with `armature runs list`"
            ) from None
        raise


async def start_input(client: Client, handle: WorkflowHandle[Any, Any]) -> RunInput | None:
    """What the run was started with (its plan, inputs and parent), from the first event of
    its history; None when that event is not an Armature run's start."""
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        if not payloads:
            return None
        try:
            (value,) = await client.data_converter.decode(list(payloads[:1]), [RunInput])
        except (ValueError, TypeError):  # not a RunInput: another kind of workflow
            return None
        return value if isinstance(value, RunInput) else None
    return None


async def show_run(client: Client, run_id: str) -> RunView:
    """Status, stages and outputs of one run (from the result when closed, else the query)."""
    handle = client.get_workflow_handle(run_id, result_type=RunResult)
    desc = await describe_run(client, run_id)
    status = run_status(desc.status)
    started = await start_input(client, handle)
    view = RunView(
        run_id=run_id,
        temporal_run_id=desc.run_id,
        # A fan-out's child has no search attributes of its own: its plan names the spec.
        spec_name=desc.typed_search_attributes.get(SPEC_NAME)
        or (started.plan.name if started is not None else None),
        status=status,
        inputs=started.inputs if started is not None else None,
        parent_run_id=started.parent_run_id if started is not None else None,
    )
    if desc.status == WorkflowExecutionStatus.RUNNING:
        try:
            st = await handle.query("status", result_type=RunStatus)
        except RPCError as exc:
            # No worker answers: none polls the queue, or the one that does cannot run this
            # run (an older Armature that does not know the plan's fields, say).
            return view.model_copy(
                update={
                    "reason": f"no worker answered the run's status query ({exc}): start one "
                    "with `armature worker` (or `armature dev`), and check that it runs this "
                    "Armature version; its log says why it cannot run the run"
                }
            )
        return view.model_copy(
            update={
                "state": st.state,
                "stages": await live_loops(client, st.stages),
                "pending_gates": st.pending_gates,
                "refused_signals": st.refused_signals,
                "outputs": {k: v.output for k, v in st.stages.items() if v.status == "completed"},
            }
        )
    result = await run_outcome(handle)
    if result is not None:
        return view.model_copy(
            update={
                "state": result.state,
                "reason": result.reason,
                "stages": result.stages,
                "outputs": result.outputs,
                "refused_signals": result.refused_signals,
            }
        )
    # Cancelled, terminated or timed out: no result, but a worker can replay the closed run
    # and answer its status query with the stages as they stood when it stopped.
    try:
        st = await query_status(handle, CLOSED_QUERY_TIMEOUT_S)
    except RPCError as exc:
        return view.model_copy(
            update={
                "state": status,
                "reason": f"the run ended {status}; its stages are unknown because no worker "
                f"answered its status query ({exc.message or exc.status.name}): start one with "
                "`armature worker` (or `armature dev`) to see them",
            }
        )
    return view.model_copy(
        update={
            "state": status,
            "reason": f"the run was {status}" if status != "timed_out" else "the run timed out",
            "stages": st.stages,
            "refused_signals": st.refused_signals,
            "outputs": {k: v.output for k, v in st.stages.items() if v.status == "completed"},
        }
    )


async def run_outcome(handle: WorkflowHandle[Any, RunResult]) -> RunResult | None:
    """The RunResult of a closed run, failed and rejected ones included (from the failure's
    details: a rejected run fails with type ``RunRejected``, a failed one with ``RunFailed``)."""
    try:
        return await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        if (
            isinstance(cause, ApplicationError)
            and cause.type in ("RunFailed", "RunRejected")
            and cause.details
        ):
            return RunResult.model_validate(cause.details[0])
        return None


class CancelOutcome(BaseModel):
    """What ``cancel_run`` did: ``status`` is the run's status afterwards (:func:`run_status`
    words, or ``cancelling`` while its running stages are still stopping)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    status: str
    already_ended: bool

    @property
    def message(self) -> str:
        if self.already_ended:
            return f"run {self.run_id} had already ended ({self.status}); nothing to cancel"
        if self.status == "cancelled":
            return f"run {self.run_id} cancelled"
        if self.status == "cancelling":
            return (
                f"cancel requested for {self.run_id}; it ends when its running stages stop "
                f"(see `armature runs show {self.run_id}`)"
            )
        return f"run {self.run_id} ended {self.status} before the cancel reached it"


async def cancel_run(client: Client, run_id: str, *, wait_s: float = 10.0) -> CancelOutcome:
    """Cancel a running run and wait up to ``wait_s`` for it to end; a run that has already
    ended is left alone and said so.

    Raises:
        RunNotFound: no such run.
    """
    import asyncio

    handle = client.get_workflow_handle(run_id)
    try:
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return CancelOutcome(run_id=run_id, status=run_status(desc.status), already_ended=True)
        await handle.cancel()
    except RPCError as exc:
        if "not found" in str(exc).lower():
            raise RunNotFound(f"no run {run_id!r} on this server") from None
        raise
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return CancelOutcome(run_id=run_id, status=run_status(desc.status), already_ended=False)
        if loop.time() >= deadline:
            return CancelOutcome(run_id=run_id, status="cancelling", already_ended=False)
        await asyncio.sleep(0.2)


async def decide_gate(
    client: Client,
    run_id: str,
    stage: str,
    decision: Literal["approve", "reject"],
    *,
    comment: str | None = None,
    by: str | None = None,
) -> str:
    """Resolve a waiting gate through the validated update.

    ``by`` is who the caller authenticated (the OS user, an API token's name): the decision
    carries a proof of it made with the trace key under ARMATURE_HOME, which the run's worker
    checks (:mod:`armature_temporal.runtime.gate_auth`). Without ``by`` it is sent bare, and
    the run records it as decided by ``signal``.

    Raises:
        GateAuthError: ``by`` was given but there is no trace key here (nothing was sent).
        GateError: the stage is unknown or not waiting, or a rejection gives no reason
            (nothing was written).
        RunNotFound: no such run.
    """
    if decision == "reject" and not (comment or "").strip():
        # One rule for the CLI, the library, the API and /ui: a rejection says why.
        raise GateError(
            f"rejecting gate {stage!r} of run {run_id!r} needs a reason: say why (it is kept "
            "with the decision and shown to whoever reads the run); nothing was written"
        )
    sent = GateDecision(stage=stage, decision=decision, comment=comment, by=by)
    if by is not None:
        sent = await _signed(run_id, sent)
    handle = client.get_workflow_handle(run_id)
    try:
        answer: str = await handle.execute_update(
            "resolve_gate",
            sent,
            result_type=str,
            # An update waits for a worker to take it; with none polling it would wait forever.
            rpc_timeout=timedelta(seconds=GATE_UPDATE_TIMEOUT_S),
        )
        return answer
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause)
        raise GateError(message) from None
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        raise GateError(
            f"no worker took the decision on run {run_id!r} within "
            f"{GATE_UPDATE_TIMEOUT_S:g} s: start one (`armature worker`, or `armature dev`), "
            f"then check `armature runs show {run_id}` before deciding again"
        ) from None
    except RPCError as exc:
        text = str(exc)
        if any(word in text.lower() for word in ("completed", "closed", "closing")):
            raise GateError(f"run {run_id!r} has already finished; nothing to decide") from None
        if "not found" in text.lower():
            raise RunNotFound(
                f"no run {run_id!r} on this server; see `armature runs list`"
            ) from None
        raise


async def _signed(run_id: str, decision: GateDecision) -> GateDecision:
    import asyncio

    from armature_temporal.runtime.gate_auth import sign_decision
    from armature_temporal.store.engine import StoreError
    from armature_temporal.store.keys import key_path, load_key

    cannot = f"cannot decide gate {decision.stage!r} of run {run_id!r} as {decision.by!r}"
    fix = (
        "run this where the workers' ARMATURE_HOME is, or copy their trace.key here (mode 0600; "
        "README: Running on a cluster); nothing was sent"
    )
    try:
        key = await asyncio.to_thread(load_key, create=False)
    except StoreError as exc:  # there, but not readable by this user, or not a key
        raise GateAuthError(f"{cannot}: {exc}; {fix}") from None
    if key is None:
        raise GateAuthError(
            f"{cannot}: there is no trace key at {key_path()} to prove who decided; {fix}"
        )
    return sign_decision(key, run_id, decision)


#: How long a gate decision waits for a worker to take it.
GATE_UPDATE_TIMEOUT_S = 60.0
#: How long `armature gates` waits for a worker to answer one run's status query.
GATE_QUERY_TIMEOUT_S = 5.0


async def waiting_gates(
    client: Client, *, spec: str | None = None, limit: int = 100
) -> list[tuple[RunSummary, list[GateInfo] | str]]:
    """Runs waiting on a human gate (visibility), each with its pending gates (query).

    Runs are queried concurrently, each for at most :data:`GATE_QUERY_TIMEOUT_S`. A run whose
    status nobody answers (its workers are down) is still listed — the search attribute says
    it waits — with a sentence saying why its gates are unknown instead of the gates.
    """
    import asyncio

    async def gates_of(run: RunSummary) -> list[GateInfo] | str:
        handle = client.get_workflow_handle(run.run_id)
        try:
            st = await query_status(handle, GATE_QUERY_TIMEOUT_S)
        except RPCError as exc:
            return (
                f"no worker answered its status query ({exc.message or exc.status.name}); is "
                "`armature worker` running for its task queue?"
            )
        return list(st.pending_gates)

    runs = await list_runs(client, spec=spec, limit=limit, waiting_only=True)
    answers = await asyncio.gather(*(gates_of(run) for run in runs))
    return [(run, gates) for run, gates in zip(runs, answers, strict=True) if gates]
