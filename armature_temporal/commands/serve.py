"""The HTTP edge: ``armature serve``, the run API and the specs' webhook triggers (``watch``,
a spec's triggers in the foreground, is in :mod:`~armature_temporal.commands.watch`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    STACK,
    AddressOpt,
    QueueOpt,
    fail,
    load_or_exit,
    run_coroutine,
    temporal_client,
)
from armature_temporal.commands._serving import (
    AllowUnauthenticatedFlag,
    BodySignaturesFlag,
    HostOpt,
    MaxConcurrencyOpt,
    PortOpt,
    RequestTimeoutOpt,
    ToleranceOpt,
    announce_hooks,
    refuse_name_clash,
    require_uvicorn,
    say,
    token_store,
    webhook_secret,
)

app = typer.Typer()

MaxStreamsOpt = Annotated[
    int,
    typer.Option(
        "--max-streams",
        min=1,
        help="Most event streams (GET /run/ID/events) open at once, all tokens together; more "
        "are answered 429.",
    ),
]
StreamsPerTokenOpt = Annotated[
    int,
    typer.Option(
        "--max-streams-per-token",
        min=1,
        help="Most event streams one token may hold open at once; more are answered 429.",
    ),
]
AllRunsFlag = Annotated[
    bool,
    typer.Option(
        "--all-runs",
        help="Let tokens show, follow, cancel and decide every run of the Temporal namespace, "
        "not only runs of the specs served (those of other specs are otherwise 404).",
    ),
]


@app.command(rich_help_panel=STACK)
def serve(
    specs: Annotated[
        list[Path],
        typer.Argument(
            help="Spec files to serve (by their names) on the run API, with their webhook "
            "triggers.",
            show_default=False,
            metavar="SPEC",
        ),
    ],
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8787,
    allow_unauthenticated: AllowUnauthenticatedFlag = False,
    signature_tolerance: ToleranceOpt = 300,
    accept_body_signatures: BodySignaturesFlag = False,
    request_timeout: RequestTimeoutOpt = 10.0,
    max_concurrency: MaxConcurrencyOpt = 64,
    max_streams: MaxStreamsOpt = 32,  # service.admission.DEFAULT_MAX_STREAMS (a test pins it)
    max_streams_per_token: StreamsPerTokenOpt = 8,  # .DEFAULT_STREAMS_PER_TOKEN
    all_runs: AllRunsFlag = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Serve the run API and the specs' webhook triggers over HTTP (needs the serve extra).

    Run API (README: HTTP sidecar): GET /health, GET /workflows[/NAME], POST /run and POST
    /run/async {"spec": NAME, "inputs": {...}} (Idempotency-Key honoured), GET|DELETE
    /run/ID, GET /gates, POST /run/ID/gates/STAGE {"decision": "approve"|"reject",
    "comment"|"reason"}, GET /run/ID/events (server-sent events; at most --max-streams open,
    --max-streams-per-token per token); GET /openapi.json and /docs describe it. Requests
    carry `Authorization: Bearer <token>` (`armature tokens create NAME --scope run`) and act
    only on runs of the specs served (--all-runs: every run). On loopback, while no token
    exists, anyone on this machine may use it (a warning says so); beyond loopback it will not
    start without a token (--allow-unauthenticated opens the webhooks only; the run API then
    refuses every request until a token exists). GET /metrics (read scope) is for Prometheus:
    the Temporal SDK's temporal_* and armature_api_requests_total /
    armature_api_request_duration_seconds by method, route template and status.

    Webhooks: each `triggers: [{type: webhook, path: /hooks/x, inputs: {...}}]` becomes `POST
    /hooks/x`: the JSON body gives run inputs (over the trigger's inputs and the spec's
    defaults); the answer is 202 {"run_id", "ui_url", ...}; 422 names inputs that do not fit;
    a repeated `Idempotency-Key` (or `X-GitHub-Delivery`) answers 200 "duplicate": true.
    With $ARMATURE_WEBHOOK_SECRET set, hooks need `Authorization: Bearer <secret>` or a fresh
    signature: `X-Armature-Timestamp: <unix seconds>` and `X-Armature-Signature-256:
    sha256=<HMAC-SHA256 of the five lines '<timestamp>\\n<METHOD>\\n<path>\\n<Idempotency-Key
    or empty>\\n<body>'>`, refused once older than --signature-tolerance. `GET /` lists the
    hooks.

    Example: export ARMATURE_TOKEN=$(armature tokens create me --scope admin); armature serve
    specs/quickstart.yaml & until curl -sf localhost:8787/health >/dev/null; do sleep 1;
    done; curl -sS localhost:8787/run -H "Authorization: Bearer $ARMATURE_TOKEN" -H
    'Content-Type: application/json' -d '{"spec": "quickstart", "inputs": {"topic": "tides"}}'
    """
    import asyncio

    require_uvicorn()  # before anything imports fastapi
    from armature_temporal.service.api.auth import is_loopback_host
    from armature_temporal.service.webhooks import WebhookConfigError, collect_hooks, create_app

    plans = [load_or_exit(path) for path in specs]
    refuse_name_clash(specs, plans)
    try:
        hooks = collect_hooks(plans, required=False)
    except WebhookConfigError as exc:
        raise fail(f"error: {exc}", 2) from None
    secret = (
        webhook_secret(host, port, allow_unauthenticated, accept_body_signatures) if hooks else None
    )
    store = token_store(host, port, allow_unauthenticated, hooks)
    require_uvicorn()
    from armature_temporal.service.webserver import ServerLimits, server_config
    from armature_temporal.telemetry.metrics import install_temporal_runtime

    install_temporal_runtime()  # GET /metrics shows the SDK's metrics: before any client

    async def prepare() -> str:
        from armature_temporal.service.client import ensure_search_attributes

        client = await temporal_client(address, start_local=True)
        await ensure_search_attributes(client)
        return str(client.service_client.config.target_host)

    target = run_coroutine(prepare())
    lock = asyncio.Lock()
    connected: list[Any] = []

    async def client_for_requests() -> Any:
        from armature_temporal.service.client import connect

        async with lock:
            if not connected:
                connected.append(await connect(target))
        return connected[0]

    from armature_temporal.service.api.app import create_service_app
    from armature_temporal.service.api.auth import TokenAuthorizer
    from armature_temporal.service.api.deps import ServiceState
    from armature_temporal.service.api.streams import StreamSlots
    from armature_temporal.settings import task_queue

    tq = queue or task_queue()
    webhooks = None
    if hooks:
        webhooks = create_app(
            hooks,
            client_for_requests,
            task_queue=tq,
            secret=secret,
            tolerance_s=signature_tolerance,
            accept_body_signatures=accept_body_signatures,
            body_timeout_s=request_timeout,
            loopback=is_loopback_host(host),
        )
    state = ServiceState(
        plans={plan.name: plan for plan in plans},
        client=client_for_requests,
        task_queue=tq,
        auth=TokenAuthorizer(store, loopback=is_loopback_host(host)),
        spec_paths={plan.name: path for plan, path in zip(plans, specs, strict=True)},
        store_url=store.url,
        streams=StreamSlots(max_streams=max_streams, per_token=max_streams_per_token),
        all_runs=all_runs,
    )
    web = create_service_app(state, webhooks=webhooks, body_timeout_s=request_timeout)
    announce_hooks(hooks, host, port)
    hook_auth = "secret required" if secret else "no authentication"
    say(
        f"serving the run API at http://{host}:{port} for {len(plans)} spec(s) "
        f"({', '.join(state.plans)}) and {len(hooks)} webhook(s)"
        f"{f' ({hook_auth})' if hooks else ''} on Temporal {target}"
        f"{'; every run of the namespace (--all-runs)' if all_runs else ''}; Ctrl-C stops"
    )
    import uvicorn

    limits = ServerLimits(
        request_timeout_s=request_timeout, max_concurrency=max_concurrency, max_streams=max_streams
    )
    try:
        uvicorn.Server(server_config(web, limits, host=host, port=port, log_level="info")).run()
    finally:
        store.close()
