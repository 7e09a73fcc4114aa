"""``armature watch``: a spec's triggers, schedules and optionally a worker, in the
foreground (the webhooks served as ``armature serve`` serves them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    STACK,
    AddressOpt,
    QueueOpt,
    fail,
    load_or_exit,
    queue_pollers,
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
    webhook_secret,
)

app = typer.Typer()


@app.command(rich_help_panel=STACK)
def watch(
    specs: Annotated[
        list[Path],
        typer.Argument(
            help="Spec files whose triggers to apply and serve.",
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
    remove_on_exit: Annotated[
        bool,
        typer.Option(
            "--remove-on-exit",
            help="Delete the specs' schedules when this process stops (by default they stay "
            "applied and keep starting runs).",
        ),
    ] = False,
    with_worker: Annotated[
        bool,
        typer.Option(
            "--worker",
            help="Also run a worker in this process, for a server (--address) where no "
            "`armature worker` polls the task queue.",
        ),
    ] = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Watch specs' triggers in one foreground process until Ctrl-C: apply their cron triggers
    as Temporal Schedules and serve their webhooks.

    The schedules are what `armature schedule SPEC` applies (a spec's bandit-maintenance and
    learning-loop schedules included); the webhooks are what `armature serve SPEC...` serves,
    with the same authentication. With no --address and no $TEMPORAL_ADDRESS, the local stack
    (Temporal dev server + worker) is started if needed, so triggered runs execute; on another
    server, run `armature worker` there or pass --worker. Schedules are Temporal's: they keep
    starting runs after this process stops, unless --remove-on-exit (or later `armature
    schedule SPEC --delete`) removes them. Exits 2 when the specs have no cron or webhook
    trigger.

    Example: armature watch specs/customer-triage.yaml --port 8787
    """
    from armature_temporal.service.webhooks import WebhookConfigError, collect_hooks

    plans = [load_or_exit(path) for path in specs]
    refuse_name_clash(specs, plans)
    has_hooks = any(t.type == "webhook" for plan in plans for t in plan.triggers)
    has_crons = any(t.type == "cron" for plan in plans for t in plan.triggers)
    if not has_hooks and not has_crons:
        names = ", ".join(repr(plan.name) for plan in plans)
        raise fail(
            f"error: nothing to watch: the specs given ({names}) have no cron or webhook "
            "triggers; add one, e.g. triggers: [{type: cron, schedule: '0 9 * * 1-5'}] or "
            "triggers: [{type: webhook, path: /hooks/mine}]",
            2,
        )
    hooks: dict[str, Any] = {}
    sock = None
    secret = None
    from armature_temporal.service.api.auth import is_loopback_host

    edge = _Edge(
        signature_tolerance,
        accept_body_signatures,
        request_timeout,
        max_concurrency,
        loopback=is_loopback_host(host),
    )
    if has_hooks:
        try:
            hooks = collect_hooks(plans)
        except WebhookConfigError as exc:
            raise fail(f"error: {exc}", 2) from None
        secret = webhook_secret(host, port, allow_unauthenticated, accept_body_signatures)
        require_uvicorn()
        sock = _listen(host, port)  # before anything is applied: a taken port changes nothing
    texts = [path.read_text(encoding="utf-8") for path in specs]
    try:
        run_coroutine(
            _watch(
                specs,
                plans,
                texts,
                hooks,
                sock,
                secret=secret,
                edge=edge,
                host=host,
                port=port,
                remove_on_exit=remove_on_exit,
                with_worker=with_worker,
                address=address,
                queue=queue,
            )
        )
    finally:
        if sock is not None:
            sock.close()


def _listen(host: str, port: int) -> Any:
    """A socket bound to host:port for the webhook server, or exit 1 naming the port."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # requests wait in the backlog until the server accepts them
    except OSError as exc:
        sock.close()
        raise fail(
            f"error: cannot listen on {host}:{port} ({exc.strerror or exc}); choose another "
            "--port, or stop what listens there",
            1,
        ) from None
    return sock


async def _watch(
    specs: list[Path],
    plans: list[Any],
    texts: list[str],
    hooks: dict[str, Any],
    sock: Any,
    *,
    secret: str | None,
    edge: _Edge,
    host: str,
    port: int,
    remove_on_exit: bool,
    with_worker: bool,
    address: str | None,
    queue: str | None,
) -> None:
    """Apply the schedules, serve the hooks (and run a worker) until SIGINT or SIGTERM, then
    say what stays applied (or remove it)."""
    import asyncio
    import contextlib
    import signal

    from armature_temporal.service.client import ensure_search_attributes
    from armature_temporal.service.schedules import apply_triggers
    from armature_temporal.settings import configured_address, task_queue

    client = await temporal_client(address, start_local=True)
    await ensure_search_attributes(client)
    target = str(client.service_client.config.target_host)
    tq = queue or task_queue()
    applied: dict[Path, list[str]] = {}
    for path, plan, text in zip(specs, plans, texts, strict=True):
        changes = await apply_triggers(
            client, plan, tq, spec_text=text, spec_path=str(path.resolve())
        )
        for change in changes:
            cron = f" ({change.cron})" if change.cron else ""
            say(f"{change.action} schedule {change.schedule_id}{cron} for {path}")
        kept = [c.schedule_id for c in changes if c.action != "deleted"]
        if kept:
            applied[path] = kept
    announce_hooks(hooks, host, port)
    if configured_address(address) and not with_worker and not await queue_pollers(client, tq):
        say(
            f"warning: no worker polls task queue {tq!r} on {target}, so triggered runs will "
            f"wait: start `armature worker --address {target} --task-queue {tq}`, or pass --worker"
        )
    auth = "" if not hooks else "; secret required" if secret else "; no authentication"
    worker_note = f"; worker in this process on {tq!r}" if with_worker else ""
    say(
        f"watching {len(specs)} spec(s) on Temporal {target}: {len(hooks)} webhook(s), "
        f"{sum(len(ids) for ids in applied.values())} schedule(s){auth}{worker_note}; "
        "Ctrl-C stops"
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if with_worker:  # as `armature worker`: the tools in a child without secrets
                from armature_temporal.service.tools_child import start_tools_child, stop_child
                from worker import build_worker

                child = await start_tools_child(target, tq)
                stack.push_async_callback(stop_child, child)
                await stack.enter_async_context(build_worker(client, tq, role="main"))
            if hooks:
                await _serve_until(stop, hooks, client, sock, tq, secret, edge)
            else:
                await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await _after_watch(client, specs, plans, applied, tq, remove_on_exit, address)


@dataclass(frozen=True)
class _Edge:
    """The serving options `serve` and `watch` share, beyond the secret."""

    tolerance_s: int
    accept_body_signatures: bool
    request_timeout_s: float
    max_concurrency: int
    #: Listening on loopback only: without a secret, pages elsewhere are refused (cross_site).
    loopback: bool = True


async def _serve_until(
    stop: Any,
    hooks: dict[str, Any],
    client: Any,
    sock: Any,
    tq: str,
    secret: str | None,
    edge: _Edge,
) -> None:
    """Serve ``hooks`` on ``sock`` in this event loop until ``stop`` is set."""
    import asyncio
    import contextlib
    from collections.abc import Iterator

    import uvicorn

    from armature_temporal.service.webhooks import create_app
    from armature_temporal.service.webserver import ServerLimits, server_config

    async def the_client() -> Any:
        return client

    class Server(uvicorn.Server):
        """uvicorn's server without its signal handlers: this process's are ``stop``'s."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    web = create_app(
        hooks,
        the_client,
        task_queue=tq,
        secret=secret,
        tolerance_s=edge.tolerance_s,
        accept_body_signatures=edge.accept_body_signatures,
        body_timeout_s=edge.request_timeout_s,
        loopback=edge.loopback,
    )
    limits = ServerLimits(
        request_timeout_s=edge.request_timeout_s, max_concurrency=edge.max_concurrency
    )
    server = Server(server_config(web, limits, log_level="info", lifespan="off"))
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    stopping.cancel()
    await serving


async def _after_watch(
    client: Any,
    specs: list[Path],
    plans: list[Any],
    applied: dict[Path, list[str]],
    tq: str,
    remove_on_exit: bool,
    address: str | None,
) -> None:
    """Delete the specs' schedules (``remove_on_exit``), or say which stay and how to
    delete them."""
    from armature_temporal.service.schedules import apply_triggers

    if remove_on_exit:
        for path, plan in zip(specs, plans, strict=True):
            for change in await apply_triggers(client, plan, tq, delete=True):
                say(f"deleted schedule {change.schedule_id} for {path}")
        say("stopped; the specs' schedules are removed")
        return
    if not applied:
        say("stopped")
        return
    ids = ", ".join(sid for sids in applied.values() for sid in sids)
    where = f" --address {address}" if address else ""
    removal = " && ".join(f"armature schedule {path} --delete{where}" for path in applied)
    say(
        f"stopped; the schedules stay applied and keep starting runs: {ids}. Remove them "
        f"with: {removal}"
    )
