"""What the run API's routes depend on: the service's state (on ``app.state.armature``), the
caller's scope, and a connected Temporal client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# At run time, not only for type checkers: FastAPI reads the dependencies' annotations
# (``request: Request``) to know what to pass them; under TYPE_CHECKING it cannot resolve
# them and asks the client for a query parameter called ``request``.
from starlette.requests import Request

from armature_temporal.service.api.errors import ApiError
from armature_temporal.service.api.principal import Authorizer, Principal
from armature_temporal.service.api.streams import StreamSlots

if TYPE_CHECKING:
    from temporalio.client import Client

    from armature_temporal.spec.compiler import Plan

__all__ = [
    "ServiceState",
    "plan_named",
    "require",
    "service_state",
    "state_of",
    "temporal",
]


@dataclass
class ServiceState:
    """Everything the routes share. ``plans`` and ``spec_paths`` are keyed by spec name;
    ``client`` returns a connected Temporal client (raising ``ConnectionFailed`` when the
    server cannot be reached). ``streams``: the open event streams and their caps;
    ``all_runs``: act on every run of the namespace, not only those of ``plans``
    (``armature serve --all-runs``; see :mod:`.scope`)."""

    plans: dict[str, Plan]
    client: Callable[[], Awaitable[Client]]
    task_queue: str
    auth: Authorizer
    spec_paths: dict[str, Path] = field(default_factory=dict)
    store_url: str | None = None
    streams: StreamSlots = field(default_factory=StreamSlots)
    all_runs: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def service_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.armature
    return state


async def state_of(request: Request) -> ServiceState:
    """:func:`service_state` as a route dependency. Async, so FastAPI calls it in the event
    loop: a plain ``def`` dependency would take one of the thread pool's few threads for
    every request, and a busy pool would then hold up health checks and gate decisions."""
    return service_state(request)


def require(scope: str) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the caller, when authenticated and allowed ``scope``; else
    401 (no or unknown token) or 403 (the token lacks the scope; nothing is done)."""

    async def dependency(request: Request) -> Principal:
        principal = service_state(request).auth.authenticate(request)
        if not principal.allows(scope):
            held = ", ".join(sorted(principal.scopes)) or "none"
            raise ApiError(
                403,
                "forbidden",
                f"token {principal.name!r} may not {request.method} {request.url.path}: it "
                f"needs the {scope!r} scope and holds {held}",
                f"use a token with {scope!r} (`armature tokens create NAME --scope {scope}`)",
            )
        return principal

    dependency.__name__ = f"require_{scope}"
    return dependency


async def temporal(request: Request) -> Client:
    """A connected Temporal client, or 503 naming the server it cannot reach."""
    from armature_temporal.service.client import ConnectionFailed

    try:
        return await service_state(request).client()
    except ConnectionFailed as exc:
        raise ApiError(
            503,
            "temporal_unreachable",
            str(exc),
            "start the Temporal server (or `armature dev`) and retry; the request did nothing",
            headers={"Retry-After": "5"},
        ) from None


def plan_named(state: ServiceState, name: str) -> Plan:
    """The served spec called ``name``, or 404 listing those served."""
    plan = state.plans.get(name)
    if plan is None:
        from armature_temporal.errors import did_you_mean

        served = ", ".join(sorted(state.plans)) or "none"
        raise ApiError(
            404,
            "unknown_spec",
            f"this server serves no spec {name!r}{did_you_mean(name, state.plans)}; it "
            f"serves: {served}",
            "use one of the served names, or restart `armature serve` with the spec file",
        )
    return plan
