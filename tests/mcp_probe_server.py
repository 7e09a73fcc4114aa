"""An MCP server written with the ``mcp`` SDK for the tests: ``python tests/mcp_probe_server.py
stdio`` or ``... http PORT`` (streamable HTTP on loopback, which then wants the header
``Authorization: Bearer $PROBE_TOKEN``), or ``... sse PORT`` (the older SSE transport).

Tools:
- ``echo(text)``: the text back (its description changes with ``$PROBE_VARIANT=changed``);
- ``probe(secret_path, port)``: what the process can see: its environment's names, whether it
  reads ``secret_path``, whether it connects to 127.0.0.1:``port``, its effective
  capabilities;
- ``slow_write(name, text, delay_s)``: appends ``text`` to ``name.started`` in its working
  directory, sleeps, then appends it to ``name`` (the side effect).

Over stdio it writes its pid to ``server.pid`` in its working directory when it starts, and
appends it to ``server.starts``.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

VARIANT = os.environ.get("PROBE_VARIANT", "")
server = MCPServer("probe")


@server.tool(
    description="Say the text back."
    if VARIANT != "changed"
    else "Say the text back, louder (changed since the plan)."
)
def echo(text: str) -> str:
    return text


@server.tool(description="Report what this process can see and reach.")
def probe(secret_path: str, port: int) -> dict[str, Any]:
    try:
        Path(secret_path).read_bytes()
        reads_secret = True
    except OSError:
        reads_secret = False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            connects = True
    except OSError:
        connects = False
    cap_eff = ""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                cap_eff = line.split()[1]
    return {
        "env": sorted(os.environ),
        "reads_secret": reads_secret,
        "connects": connects,
        "cap_eff": cap_eff,
        "cwd": os.getcwd(),
    }


@server.tool(description="Append text to a file after a delay (a side effect).")
async def slow_write(name: str, text: str, delay_s: float) -> str:
    with open(f"{name}.started", "a") as started:
        started.write(text + "\n")
    await anyio.sleep(delay_s)  # a cancelled call stops here: no effect
    with open(name, "a") as out:
        out.write(text + "\n")
    return f"wrote {text!r} to {name}"


def main(argv: list[str]) -> None:
    if argv[:1] == ["http"]:
        import uvicorn
        from starlette.middleware.base import BaseHTTPMiddleware
        from starlette.responses import PlainTextResponse

        token = os.environ["PROBE_TOKEN"]
        app = server.streamable_http_app()

        async def check(request: Any, call_next: Any) -> Any:
            if request.headers.get("authorization") != f"Bearer {token}":
                return PlainTextResponse("unauthorized", status_code=401)
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=check)
        uvicorn.run(app, host="127.0.0.1", port=int(argv[1]), log_level="warning")
        return
    if argv[:1] == ["sse"]:  # the older HTTP transport, no token
        server.run("sse", host="127.0.0.1", port=int(argv[1]))
        return
    Path("server.pid").write_text(str(os.getpid()))
    with open("server.starts", "a") as starts:  # one line per start
        starts.write(f"{os.getpid()}\n")
    server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
