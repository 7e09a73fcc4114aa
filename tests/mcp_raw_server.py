"""A hand-written stdio MCP server (newline-delimited JSON-RPC, no SDK) whose tool list is
malformed on purpose: ``python tests/mcp_raw_server.py bad_schema`` lists a tool ``broken``
whose input schema is not an object."""

from __future__ import annotations

import json
import sys

TOOLS = {
    "bad_schema": [
        {"name": "fine", "description": "ok", "inputSchema": {"type": "object"}},
        {
            "name": "broken",
            "description": "its schema is a string",
            "inputSchema": {"type": "string"},
        },
    ],
}


def main(variant: str) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        method = message.get("method")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS[variant]}
        else:
            error = {"code": -32601, "message": f"method {method!r} not found"}
            print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
