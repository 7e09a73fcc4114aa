"""Which runs this server acts on: the runs of the specs it serves (and their fan-out
children), unless it was started with ``--all-runs``.

Every route that names a run — show, cancel, events, gate decisions, the inbox — asks
:func:`served_run` first. A run of another spec is answered exactly as a run that does not
exist (404 ``unknown_run``, the same words), so a token learns nothing about the runs of specs
this server does not serve, not even that they exist.

A run's spec is its ``ArmatureSpecName`` search attribute. A fan-out child has none: its own
plan's name counts, then its parent's spec (up to :data:`MAX_PARENTS` levels up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from armature_temporal.service.api.errors import ApiError

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowExecutionDescription

    from armature_temporal.service.api.deps import ServiceState

__all__ = [
    "MAX_PARENTS",
    "answering",
    "served",
    "served_run",
    "shown_in_listing",
    "unknown_run",
]

#: How many parents up a child run's spec is looked for.
MAX_PARENTS = 4


def unknown_run(state: ServiceState, run_id: str) -> ApiError:
    """404 ``unknown_run``: the same answer for a run that does not exist and for one of a
    spec this server does not serve."""
    served_names = ", ".join(sorted(state.plans)) or "none"
    return ApiError(
        404,
        "unknown_run",
        f"this server has no run {run_id!r} of the specs it serves ({served_names})",
        "check the id (POST /run/async answers it; GET /gates lists runs waiting on a gate); "
        "a run of another spec is served by the `armature serve` of that spec",
    )


async def served(
    state: ServiceState,
    client: Client,
    run_id: str,
    desc: WorkflowExecutionDescription | None = None,
) -> bool:
    """Whether this server acts on run ``run_id`` (``desc``: its description, when at hand).

    Raises:
        RunNotFound: there is no such run.
        RPCError: the Temporal server refused.
    """
    if state.all_runs:
        return True
    from armature_temporal.runtime.search_attributes import SPEC_NAME
    from armature_temporal.service.client import describe_run, start_input

    for _ in range(MAX_PARENTS + 1):
        if desc is None:
            desc = await describe_run(client, run_id)
        name = desc.typed_search_attributes.get(SPEC_NAME)
        if name is not None:
            return name in state.plans
        started = await start_input(client, client.get_workflow_handle(run_id))
        if started is None:  # not an Armature run
            return False
        if started.plan.name in state.plans:
            return True
        if started.parent_run_id is None:
            return False
        run_id, desc = started.parent_run_id, None
    return False


async def served_run(state: ServiceState, client: Client, run_id: str) -> None:
    """Nothing when this server acts on run ``run_id``.

    Raises:
        ApiError: 404 ``unknown_run`` when there is no such run or it is another spec's.
        RPCError: the Temporal server refused.
    """
    from armature_temporal.service.client import RunNotFound

    try:
        ok = await served(state, client, run_id)
    except RunNotFound:
        ok = False
    if not ok:
        raise unknown_run(state, run_id)


async def shown_in_listing(
    state: ServiceState, client: Client, run_id: str, spec: str | None
) -> bool:
    """Whether a run from a visibility listing (``spec``: its spec-name search attribute) is
    shown: a run of a served spec; a fan-out child, which has no spec name of its own, when
    :func:`served` says so. A run gone meanwhile is not shown."""
    from armature_temporal.service.client import RunNotFound

    if state.all_runs:
        return True
    if spec is not None:
        return spec in state.plans
    try:
        return await served(state, client, run_id)
    except RunNotFound:
        return False


def unreachable(exc: Exception) -> bool:
    """Whether a Temporal client error means the server could not be reached (it went away,
    or never answered), rather than that it answered with a refusal."""
    from temporalio.service import RPCError, RPCStatusCode

    return isinstance(exc, RPCError) and exc.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
    )


@contextlib.contextmanager
def answering(state: ServiceState, run_id: str | None = None) -> Iterator[None]:
    """Turn the client's errors into answers: no such run is 404 ``unknown_run`` (the same
    answer as a run of a spec this server does not serve), any other refusal of the Temporal
    server 503 ``temporal_unreachable`` when it cannot be reached, else ``temporal_error``."""
    from temporalio.service import RPCError

    from armature_temporal.service.client import RunNotFound

    try:
        yield
    except RunNotFound:
        raise unknown_run(state, run_id or "?") from None
    except RPCError as exc:
        if run_id is not None and "not found" in str(exc).lower():
            raise unknown_run(state, run_id) from None
        if unreachable(exc):
            raise ApiError(
                503,
                "temporal_unreachable",
                f"the Temporal server does not answer: {exc}",
                "start the Temporal server (or `armature dev`) and retry; the request did nothing",
                headers={"Retry-After": "5"},
            ) from None
        raise ApiError(
            503,
            "temporal_error",
            f"the Temporal server refused the request: {exc}",
            "retry; if it persists, check the Temporal server and the worker logs",
            headers={"Retry-After": "5"},
        ) from None
