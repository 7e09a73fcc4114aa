"""``armature mcp serve``: Armature as an MCP server, over stdio or streamable HTTP (see
:mod:`armature_temporal.mcp.serve`)."""

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
    run_coroutine,
    temporal_client,
)

app = typer.Typer()
mcp_app = typer.Typer(
    help="Armature and the Model Context Protocol: serve your specs as MCP tools (MCP servers "
    "a spec uses are declared in its mcp_servers: section).",
    no_args_is_help=True,
)
app.add_typer(mcp_app, name="mcp", rich_help_panel=STACK)


def _say(line: str) -> None:
    err.print(line, markup=False, highlight=False)


@mcp_app.command("serve")
def serve(
    specs: Annotated[
        list[Path],
        typer.Argument(help="Spec files to serve, each as a tool.", metavar="SPEC"),
    ],
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="Serve streamable HTTP at http://HOST:PORT/mcp, behind the run API's tokens "
            "(default: stdio, for a client that starts this command).",
        ),
    ] = False,
    host: Annotated[str, typer.Option("--host", help="With --http: interface.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", "-p", min=1, max=65535, help="With --http: TCP port.")
    ] = 8788,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            metavar="SECONDS",
            help="How long a spec tool waits for its run before answering with the run id.",
        ),
    ] = 60.0,
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Serve specs as MCP tools: each spec is a tool (its inputs are the tool's arguments; the
    answer is the run's outputs, or its run id and the gate it waits at), plus run_status,
    list_gates and decide_gate.

    Over stdio (the default) the caller is you: an MCP desktop client starts this command,
    from a line in its config (e.g. claude_desktop_config.json; the README shows it):
    "armature": {"command": "armature", "args": ["mcp", "serve", "/abs/path/spec.yaml"]}.

    With --http it listens at http://HOST:PORT/mcp; every request carries a run API token
    (`Authorization: Bearer`, from `armature tokens create NAME --scope read --scope run`):
    listing and run_status/list_gates need read, a spec tool run, decide_gate approve. On
    loopback, while no token exists, programs on this machine may use it without one.

    Runs go to the local stack (started if needed) unless --address or $TEMPORAL_ADDRESS
    names a Temporal server.
    """
    from armature_temporal.mcp.serve import ServedSpecs, build_server
    from armature_temporal.settings import task_queue

    plans = [load_or_exit(path) for path in specs]
    names = [p.name for p in plans]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise fail(f"error: two of the specs are named {twice[0]!r}; serve one of them", 2)

    async def prepare() -> str:
        from armature_temporal.service.client import ensure_search_attributes

        client = await temporal_client(address, start_local=True)
        await ensure_search_attributes(client)
        return str(client.service_client.config.target_host)

    target = run_coroutine(prepare())
    connected: list[Any] = []

    async def client_for_calls() -> Any:
        from armature_temporal.service.client import connect

        if not connected:
            connected.append(await connect(target))
        return connected[0]

    served = ServedSpecs(
        plans={p.name: p for p in plans},
        client=client_for_calls,
        task_queue=queue or task_queue(),
        wait_s=wait,
    )
    if not http:
        try:
            server = build_server(served)
        except ValueError as exc:
            raise fail(f"error: {exc}", 2) from None
        _say(f"serving {len(plans)} spec(s) ({', '.join(names)}) over stdio on Temporal {target}")
        run_coroutine(_stdio(server))
        return
    _serve_http(served, host, port, target)


async def _stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _serve_http(served: Any, host: str, port: int, target: str) -> None:
    from armature_temporal.commands._serving import token_store
    from armature_temporal.mcp.serve import build_server, guarded_app
    from armature_temporal.service.api.auth import TokenAuthorizer, is_loopback_host

    store = token_store(host, port, False, {})
    served.auth = TokenAuthorizer(store, loopback=is_loopback_host(host))
    try:
        server = build_server(served)
    except ValueError as exc:
        raise fail(f"error: {exc}", 2) from None
    import uvicorn

    app = guarded_app(server.streamable_http_app(host=host), served.auth)
    _say(
        f"serving {len(served.plans)} spec(s) ({', '.join(served.plans)}) as MCP tools at "
        f"http://{host}:{port}/mcp on Temporal {target}; Ctrl-C stops"
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()
