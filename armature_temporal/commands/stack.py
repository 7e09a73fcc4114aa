"""Run the stack: ``armature worker`` and ``dev`` (the local Temporal dev server and a
worker), ``dev stop``. The webhook edge (``serve``, ``watch``) is :mod:`.serve`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    STACK,
    AddressOpt,
    QueueOpt,
    err,
    fail,
    out,
    queue_pollers,
    run_coroutine,
)

app = typer.Typer()


ToolsOnlyFlag = Annotated[
    bool,
    typer.Option(
        "--tools-only",
        help="Serve only the tool activities (shell, files, HTTP, Python tools, adapters) on "
        "the tools queue (<task queue>-tools). Start it without provider secrets.",
    ),
]
NoToolsFlag = Annotated[
    bool,
    typer.Option(
        "--no-tools",
        help="Do not start a tools-only child: `armature worker --tools-only` runs elsewhere.",
    ),
]
MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=1,
        max=65535,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (1-65535): the Temporal "
        "SDK's temporal_* and Armature's armature_* (stage durations, tokens, cost, HQS, cache "
        "hits, gate waits, tool outcomes, bandit arms), counted from the trace records this "
        "worker stores. The tools-only child serves none: its tool calls are counted here, "
        "from their records. Off by default.",
        show_default=False,
    ),
]
MetricsHostOpt = Annotated[
    str,
    typer.Option(
        "--metrics-host",
        help="Interface --metrics-port listens on; 0.0.0.0 lets a Prometheus on another host "
        "or container scrape it.",
    ),
]


@app.command(rich_help_panel=STACK)
def worker(
    address: AddressOpt = None,
    queue: QueueOpt = None,
    tools_only: ToolsOnlyFlag = False,
    no_tools: NoToolsFlag = False,
    metrics_port: MetricsPortOpt = None,
    metrics_host: MetricsHostOpt = "127.0.0.1",
) -> None:
    """Run an Armature worker in the foreground (as many as you like per task queue).

    By default it serves the workflows and model calls on the task queue and starts a
    tools-only child (`armature worker --tools-only`) whose environment is an allow-list (no
    provider secrets), for the tool activities on <task queue>-tools. Tool programs run in a
    sandbox they cannot undo; where none works here they do not run (`armature doctor` says
    what holds).

    Example: armature worker --metrics-port 9464, then curl -s localhost:9464/metrics; each
    worker on one machine needs its own port (deploy/prometheus.yml scrapes them).
    """
    from armature_temporal.service.client import connect
    from armature_temporal.settings import configured_address, dev_port, task_queue

    if tools_only and no_tools:
        raise fail("error: --tools-only and --no-tools exclude each other; give one", 2)
    if tools_only and metrics_port is not None:
        raise fail(
            "error: --metrics-port is for the main worker: the tools-only worker's tool calls "
            "are counted by the main worker, from their trace records; drop --metrics-port",
            2,
        )
    addr = configured_address(address) or f"127.0.0.1:{dev_port()}"
    tq = queue or task_queue()
    if metrics_port is not None:
        _serve_metrics(metrics_host, metrics_port)

    async def go() -> None:
        from worker import build_worker, tools_task_queue

        client = await connect(addr)
        if tools_only:
            from armature_temporal.tools.sandbox import SandboxUnavailable, sandbox

            try:
                box = sandbox()
            except SandboxUnavailable as exc:
                raise fail(f"error: {exc}", 2) from None
            _warn_about_secrets()
            await _serve(
                build_worker(client, tq, role="tools"),
                f"armature tools worker on {addr}, task queue {tools_task_queue(tq)!r}, "
                f"sandbox {box.kind}",
                parent=_watched_parent(),
            )
            return
        _protect_environ()
        if no_tools:
            await _warn_without_tools(client, tools_task_queue(tq))
            await _serve(
                build_worker(client, tq, role="main"),
                f"armature worker on {addr}, task queue {tq!r} (tools run elsewhere)",
            )
            return
        from armature_temporal.service.tools_child import start_tools_child, stop_child

        child = await start_tools_child(addr, tq)
        try:
            await _serve(
                build_worker(client, tq, role="main"),
                f"armature worker on {addr}, task queue {tq!r}; tools worker pid {child.pid} "
                f"on {tools_task_queue(tq)!r} (no provider secrets)",
                child=child,
            )
        finally:
            await stop_child(child)

    run_coroutine(go())


def _serve_metrics(host: str, port: int) -> None:
    """Listen for Prometheus on ``host:port`` (before anything connects to Temporal: the SDK's
    runtime that exports temporal_* must be the default by then)."""
    from armature_temporal.telemetry.metrics import (
        MetricsPortError,
        install_temporal_runtime,
        start_metrics_server,
    )

    try:
        start_metrics_server(host, port)
    except MetricsPortError as exc:
        raise fail(f"error: {exc}", 1) from None
    install_temporal_runtime()
    err.print(f"metrics at http://{host}:{port}/metrics", markup=False)


#: The tools-only child's parent, by pid: it stops when that process is gone.


async def _serve(workers: Any, said: str, *, child: Any = None, parent: int | None = None) -> None:
    """Run ``workers`` until SIGINT/SIGTERM (or the child or the parent process ends)."""
    import asyncio
    import os
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    why: list[str] = []

    async def watch() -> None:
        while not stop.is_set():
            await asyncio.sleep(1)
            if child is not None and child.returncode is not None:
                why.append(f"the tools worker (pid {child.pid}) exited {child.returncode}")
                stop.set()
            if parent is not None and os.getppid() != parent:
                why.append(f"its parent worker (pid {parent}) is gone")
                stop.set()

    watcher = asyncio.ensure_future(watch())
    try:
        async with workers:
            err.print(f"{said}; Ctrl-C stops", markup=False)
            await stop.wait()
    finally:
        watcher.cancel()
    if why:
        raise fail(f"worker stopped: {why[0]}", 1)
    err.print("worker stopped", markup=False)


def _warn_about_secrets() -> None:
    """Keep only the allow-listed part of this tools worker's environment, and say what it was
    given besides (naming the variables that look like credentials first)."""
    import os

    from armature_temporal.service.tools_env import is_secret, tools_worker_env

    kept = tools_worker_env()
    dropped = sorted(set(os.environ) - set(kept))
    secrets = [n for n in dropped if is_secret(n, os.environ[n])]
    if dropped:
        others = [n for n in dropped if n not in secrets]
        err.print(
            f"warning: this tools worker was started with {', '.join(secrets) or 'no'} "
            f"secret-looking variable(s) and {len(others)} other(s) outside its allow-list"
            + (f" ({', '.join(others)})" if others else "")
            + "; they are removed from its environment, so no tool reads them. Start it "
            "without them (plain `armature worker` does), or list one a tool needs in "
            "$ARMATURE_TOOLS_ENV_KEEP",
            markup=False,
        )
    os.environ.clear()
    os.environ.update(kept)


def _watched_parent() -> int | None:
    import os

    from armature_temporal.service.tools_child import PARENT_ENV

    raw = os.environ.get(PARENT_ENV, "")
    return int(raw) if raw.isdigit() else None


async def activity_pollers(client: Any, queue: str) -> int:
    """How many workers poll ``queue`` for activity tasks (as the server last saw them)."""
    return await queue_pollers(client, queue, activities=True)


async def _warn_without_tools(client: Any, tools_queue: str) -> None:
    if not await activity_pollers(client, tools_queue):
        err.print(
            f"warning: no tools worker polls {tools_queue!r} yet: runs wait at their first "
            "tool call until `armature worker --tools-only` runs for this task queue",
            markup=False,
        )


def _protect_environ() -> None:
    """Make this process undumpable (Linux): another process of the same user without
    CAP_SYS_PTRACE, such as an unsandboxed tool program, cannot read /proc/<pid>/environ."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    pr_set_dumpable = 4
    libc.prctl(pr_set_dumpable, 0, 0, 0, 0)


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

    from armature_temporal.service.devstack import stack_state, start_local_stack, stop_stack
    from armature_temporal.settings import dev_ui_port

    address, said, started = run_coroutine(start_local_stack(None))
    for line in said:
        err.print(line, markup=False)
    if not said:
        err.print(f"the local stack is already running on {address}", markup=False)
    stops = "Ctrl-C stops it" if started else "Ctrl-C leaves it running (`armature dev stop`)"
    try:  # from the first line a reader can act on, Ctrl-C stops what this command started
        out.print(
            f"Temporal at {address}, Web UI http://localhost:{dev_ui_port()}; {stops}",
            markup=False,
        )
        while True:
            state = stack_state()
            if state.server_pid is None and not state.listening:
                raise fail("the dev server exited; see the log under $ARMATURE_HOME/logs")
            time.sleep(1)
    except KeyboardInterrupt:
        # Only what this command started: a stack already running in the background (that
        # `armature serve` or another shell uses) stays up.
        for line in stop_stack(only=started):
            err.print(f"stopped {line}", markup=False)
        kept = {"temporal", "worker"} - started
        if kept:
            err.print(
                f"left running what this command did not start ({', '.join(sorted(kept))}); "
                "`armature dev stop` stops it",
                markup=False,
            )


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
