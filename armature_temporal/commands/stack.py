"""Run the stack: ``armature worker``, ``dev`` (the local Temporal dev server and a
worker), ``dev stop`` and ``serve`` (webhook triggers over HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    STACK,
    AddressOpt,
    QueueOpt,
    err,
    fail,
    load_or_exit,
    out,
    run_coroutine,
    temporal_client,
)

app = typer.Typer()


@app.command(rich_help_panel=STACK)
def worker(
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Run an Armature worker in the foreground (as many as you like per task queue)."""
    import asyncio
    import signal

    from armature_temporal.service.client import connect
    from armature_temporal.settings import configured_address, dev_port, task_queue

    addr = configured_address(address) or f"127.0.0.1:{dev_port()}"
    tq = queue or task_queue()

    async def go() -> None:
        from worker import build_worker

        client = await connect(addr)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with build_worker(client, tq):
            err.print(f"armature worker on {addr}, task queue {tq!r}; Ctrl-C stops", markup=False)
            await stop.wait()
        err.print("worker stopped", markup=False)

    run_coroutine(go())


dev_app = typer.Typer(
    help="Run the local single-machine stack (Temporal dev server + worker) in the foreground; "
    "Ctrl-C stops it. `armature dev stop` stops one running in the background.",
    invoke_without_command=True,
)
app.add_typer(dev_app, name="dev", rich_help_panel=STACK)


@dev_app.callback()
def dev(ctx: typer.Context) -> None:
    """Run the local stack in the foreground (Ctrl-C stops it); `armature dev stop` stops a
    background one."""
    if ctx.invoked_subcommand is not None:
        return
    import time

    from armature_temporal.service.devstack import ensure_local_stack, stack_state, stop_stack
    from armature_temporal.settings import dev_ui_port

    address, said = run_coroutine(ensure_local_stack(None))
    for line in said:
        err.print(line, markup=False)
    if not said:
        err.print(f"the local stack is already running on {address}", markup=False)
    out.print(
        f"Temporal at {address}, Web UI http://localhost:{dev_ui_port()}; Ctrl-C stops",
        markup=False,
    )
    try:
        while True:
            state = stack_state()
            if state.server_pid is None and not state.listening:
                raise fail("the dev server exited; see the log under $ARMATURE_HOME/logs")
            time.sleep(1)
    except KeyboardInterrupt:
        for line in stop_stack():
            err.print(f"stopped {line}", markup=False)


@dev_app.command("stop")
def dev_stop() -> None:
    """Stop the background dev server and worker that `armature submit` or `armature dev`
    started."""
    from armature_temporal.service.devstack import stop_stack

    stopped = stop_stack()
    out.print(
        "stopped " + ", ".join(stopped) if stopped else "the local stack is not running",
        markup=False,
    )


@app.command(rich_help_panel=STACK)
def serve(
    specs: Annotated[
        list[Path],
        typer.Argument(
            help="Spec files whose webhook triggers to serve.", show_default=False, metavar="SPEC"
        ),
    ],
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port to listen on.")] = 8787,
    allow_unauthenticated: Annotated[
        bool,
        typer.Option(
            "--allow-unauthenticated",
            help="Listen beyond loopback with no $ARMATURE_WEBHOOK_SECRET (anyone who can "
            "reach the port can start runs).",
        ),
    ] = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Serve the specs' webhook triggers over HTTP (needs the serve extra).

    Each `triggers: [{type: webhook, path: /hooks/x, inputs: {...}}]` becomes `POST /hooks/x`:
    the JSON object in the body gives run inputs (over the trigger's inputs and the spec's
    defaults) and the answer is 202 {"run_id", "ui_url", ...}; 422 names inputs that do not
    fit. A delivery with an `Idempotency-Key` (or `X-GitHub-Delivery`) header starts at most
    one run however often it is retried (repeats answer 200 with "duplicate": true).
    With $ARMATURE_WEBHOOK_SECRET set, requests need `Authorization: Bearer <secret>` or
    `X-Armature-Signature-256: sha256=<HMAC-SHA256 of the body>`. `GET /` lists the hooks.
    Example: curl -X POST localhost:8787/hooks/triage -d '{"ticket": "refund please"}'
    """
    import asyncio
    import ipaddress
    import os

    from armature_temporal.service.webhooks import WebhookConfigError, collect_hooks, create_app

    plans = [load_or_exit(path) for path in specs]
    try:
        hooks = collect_hooks(plans)
    except WebhookConfigError as exc:
        raise fail(f"error: {exc}", 2) from None
    secret = os.environ.get("ARMATURE_WEBHOOK_SECRET") or None
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not secret and not allow_unauthenticated:
        raise fail(
            f"error: --host {host} would let anyone who can reach port {port} start runs; set "
            "$ARMATURE_WEBHOOK_SECRET (requests then need it), or pass "
            "--allow-unauthenticated if something in front of this server authenticates",
            2,
        )
    try:
        import uvicorn
    except ImportError:
        raise fail(
            "error: armature serve needs the serve extra: pip install 'armature-temporal[serve]'",
            2,
        ) from None

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

    from armature_temporal.settings import task_queue

    try:
        web = create_app(
            hooks, client_for_requests, task_queue=queue or task_queue(), secret=secret
        )
    except WebhookConfigError as exc:
        raise fail(f"error: {exc}", 2) from None
    for hook in hooks.values():
        err.print(
            f"POST http://{host}:{port}{hook.path} → spec {hook.plan.name!r}",
            markup=False,
            highlight=False,
        )
    auth = "secret required" if secret else "no authentication"
    err.print(
        f"serving {len(hooks)} webhook(s) on Temporal {target} ({auth}); Ctrl-C stops",
        markup=False,
        highlight=False,
    )
    uvicorn.run(web, host=host, port=port, log_level="info")
