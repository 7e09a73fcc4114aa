"""Armature as a library call: ``await run("spec.yaml", {...})`` returns the run's outputs.

The same stack as ``armature submit``: ``address`` (else ``$TEMPORAL_ADDRESS``) names a
Temporal server whose workers are yours; with neither, the embedded stack (a dev server and a
worker under ``$ARMATURE_HOME``) is started when needed and keeps running afterwards
(``armature dev stop`` stops it). What was started is logged on the ``armature`` logger.

>>> import asyncio
>>> from armature_temporal import run
>>> outputs = asyncio.run(run("specs/quickstart.yaml", {"topic": "tide pools"}))  # doctest: +SKIP

:func:`start` returns a :class:`RunHandle` for runs that wait on people: ``approve``,
``reject``, ``result``, ``events``. :class:`armature_temporal.http_client.ServiceClient` has
the same shape over ``armature serve``'s HTTP API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from armature_temporal.errors import ArmatureError

if TYPE_CHECKING:
    from temporalio.client import Client

    from armature_temporal.service.client import CancelOutcome, RunView
    from armature_temporal.spec.compiler import Plan

__all__ = ["RunFailed", "RunHandle", "RunTimeout", "failure_of", "run", "start"]

log = logging.getLogger("armature")

#: How often :meth:`RunHandle.result` looks at a run that has not closed (a closed run's
#: result comes from Temporal at once).
POLL_S = 0.5


class RunFailed(ArmatureError):
    """The run ended without completing: failed, rejected at a gate, cancelled, terminated
    or timed out.

    Attributes:
        run_id: The run.
        state: How it ended (``failed``, ``rejected``, ``cancelled``, ``terminated``, ...).
        stage: The stage it ended at (the failed stage, the rejecting gate), when known.
        reason: Why, in the run's words.
        outputs: The outputs of the stages that did complete.
    """

    def __init__(
        self,
        run_id: str,
        state: str,
        stage: str | None,
        reason: str,
        outputs: Mapping[str, Any] | None = None,
    ) -> None:
        where = f" at stage {stage!r}" if stage else ""
        super().__init__(
            f"run {run_id} ended {state}{where}: {reason} (see `armature runs show {run_id}`)"
        )
        self.run_id = run_id
        self.state = state
        self.stage = stage
        self.reason = reason
        self.outputs = dict(outputs or {})


class RunTimeout(ArmatureError, TimeoutError):
    """The run did not end within the time the caller gave; it keeps running (runs are
    durable), so ``run_id`` can still be followed or cancelled."""

    def __init__(self, run_id: str, timeout_s: float) -> None:
        super().__init__(
            f"run {run_id} did not end within {timeout_s:g} s; it keeps running: follow it "
            f"with `armature runs show {run_id}` or cancel it with `armature cancel {run_id}`"
        )
        self.run_id = run_id
        self.timeout_s = timeout_s


def failure_of(view: RunView) -> RunFailed:
    """The :class:`RunFailed` a closed, not completed run stands for: the first stage that
    failed, was rejected or was cancelled, and the run's reason (else that stage's error)."""
    state = view.state or view.status
    stage = None
    for name, result in view.stages.items():
        if result.status in ("failed", "rejected", "cancelled"):
            stage = name
            break
    error = None
    if stage is not None:
        result = view.stages[stage]
        error = result.error or (result.gate.comment if result.gate else None)
    reason = view.reason or error or f"the run ended {state}"
    return RunFailed(view.run_id, state, stage, reason, view.outputs)


class RunHandle:
    """One run started by :func:`start`, on the Temporal client that started it.

    Attributes:
        run_id: The run's id (Temporal's workflow id), as ``armature runs show`` takes it.
    """

    def __init__(self, client: Client, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunHandle(run_id={self.run_id!r})"

    async def status(self) -> RunView:
        """Status, stages, outputs and waiting gates now (``armature runs show``)."""
        from armature_temporal.service.client import show_run

        return await show_run(self.client, self.run_id)

    async def result(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait for the run to end and return its outputs (stage id -> output).

        Raises:
            RunFailed: it ended failed, rejected, cancelled, terminated or timed out.
            RunTimeout: it has not ended within ``timeout_s`` (it keeps running).
        """
        try:
            view = await asyncio.wait_for(self._closed_view(), timeout_s)
        except TimeoutError:
            raise RunTimeout(self.run_id, timeout_s or 0.0) from None
        if (view.state or view.status) != "completed":
            raise failure_of(view)
        return dict(view.outputs)

    async def _closed_view(self) -> RunView:
        from temporalio.client import WorkflowFailureError

        from armature_temporal.runtime.models import RunResult

        handle = self.client.get_workflow_handle(self.run_id, result_type=RunResult)
        # Temporal's own wait for the result (a long poll); failures land in the view below.
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
        while True:
            view = await self.status()
            if view.status != "running":
                return view
            await asyncio.sleep(POLL_S)  # closed a moment ago: visibility catches up

    async def approve(self, stage: str, comment: str | None = None) -> str:
        """Approve the gate ``stage`` waits at (the validated update ``armature approve``
        sends, recording this OS user as who decided); returns the run's answer.

        Raises:
            GateError: the stage is unknown or not waiting (nothing was written);
                ``GateAuthError`` (a GateError) when there is no trace key here to prove who
                decided (nothing was sent).
        """
        return await self._decide(stage, "approve", comment)

    async def reject(self, stage: str, reason: str) -> str:
        """Reject the gate ``stage`` waits at, saying why; the run ends rejected."""
        return await self._decide(stage, "reject", reason)

    async def _decide(self, stage: str, decision: Any, comment: str | None) -> str:
        from armature_temporal.runtime.gate_auth import os_user
        from armature_temporal.service.client import decide_gate

        return await decide_gate(
            self.client, self.run_id, stage, decision, comment=comment, by=os_user()
        )

    async def cancel(self) -> CancelOutcome:
        """Cancel the run (a run that has already ended is left alone, and said so)."""
        from armature_temporal.service.client import cancel_run

        return await cancel_run(self.client, self.run_id)

    async def events(self, after: int = 0) -> AsyncIterator[Any]:
        """The run's events (``RunEvent``: stage_start, stage_complete, gate_waiting,
        gate_decided, run_complete / run_failed) with seq above ``after``, live, ending after
        the last one; what ``GET /run/{id}/events`` streams."""
        from armature_temporal.service.events import follow_events

        async for event in follow_events(self.client, self.run_id, after=after):
            yield event


def _plan(spec: str | Path | Plan) -> Plan:
    from armature_temporal.spec.compiler import Plan, compile_spec
    from armature_temporal.spec.loader import load_spec

    if isinstance(spec, Plan):
        return spec
    if isinstance(spec, (str, Path)):
        return compile_spec(load_spec(Path(spec)))
    raise TypeError(
        f"spec must be a spec file's path or a compiled Plan, not {type(spec).__name__}; "
        "pass e.g. 'specs/quickstart.yaml' or armature_temporal.load_plan(path)"
    )


_HOW = "pass them as start(spec, {'name': value}) or run(spec, {'name': value})"


def _given(plan: Plan, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The inputs as a dict; anything but a mapping of names to values is an InputError."""
    from armature_temporal.service.inputs import InputError

    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping):
        props = plan.inputs_schema.get("properties") or {}
        example = next(iter(props), "topic")
        raise InputError(
            f"run inputs for {plan.name!r} must be a mapping of input names to values, not "
            f"{type(inputs).__name__} {inputs!r:.60}; e.g. run(spec, {{{example!r}: ...}}). "
            f"Inputs of this spec: {list(props) or 'none declared'}"
        )
    bad = [k for k in inputs if not isinstance(k, str)]
    if bad:
        raise InputError(
            f"run inputs for {plan.name!r} are named by strings; got {bad[0]!r} "
            f"({type(bad[0]).__name__}) — use the input's name, e.g. {str(bad[0])!r}"
        )
    return dict(inputs)


async def start(
    spec: str | Path | Plan,
    inputs: Mapping[str, Any] | None = None,
    *,
    address: str | None = None,
    queue: str | None = None,
    replicate: int = 0,
) -> RunHandle:
    """Start a run of ``spec`` (a spec file's path, or a compiled :class:`Plan`) with
    ``inputs`` and return its handle at once.

    Args:
        spec: The spec file, or its compiled plan.
        inputs: The run inputs; the spec's defaults fill the rest.
        address: A Temporal server (else ``$TEMPORAL_ADDRESS``, else the embedded stack,
            started when needed).
        queue: The task queue its workers poll (default ``$ARMATURE_TASK_QUEUE`` or
            ``armature``).
        replicate: Numbers runs of equal inputs (the simulate provider seeds its noise
            from inputs and replicate).

    Raises:
        SpecError: the spec is invalid (each issue with file:line:column).
        InputError: the inputs do not fit the spec's inputs schema (each input named).
        ConnectionFailed: the Temporal server cannot be reached.
    """
    from armature_temporal.service.client import ensure_search_attributes, prepare_inputs
    from armature_temporal.service.client import start_run as start_workflow
    from armature_temporal.service.devstack import stack_client
    from armature_temporal.settings import task_queue

    plan = _plan(spec)
    values = prepare_inputs(plan, _given(plan, inputs), how=_HOW)
    client, said = await stack_client(address)
    for line in said:
        log.info(line)
    await ensure_search_attributes(client)
    handle = await start_workflow(
        client, plan, values, task_queue=queue or task_queue(), replicate=replicate
    )
    return RunHandle(client, handle.id)


async def run(
    spec: str | Path | Plan,
    inputs: Mapping[str, Any] | None = None,
    *,
    address: str | None = None,
    queue: str | None = None,
    replicate: int = 0,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run ``spec`` with ``inputs`` to the end and return its outputs (stage id -> output).

    Arguments as :func:`start`; ``timeout_s`` bounds the wait (the run itself keeps going).

    Raises:
        RunFailed: the run failed or was rejected (naming the stage and the reason).
        RunTimeout: it did not end within ``timeout_s``.
        SpecError, InputError, ConnectionFailed: as :func:`start`.
    """
    handle = await start(spec, inputs, address=address, queue=queue, replicate=replicate)
    return await handle.result(timeout_s)
