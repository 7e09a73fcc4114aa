"""``fake_agent_serving``: an OpenAI-compatible ``POST /v1/chat/completions`` on loopback that
answers from a Python object, for tool-loop tests through the real ``llm_call`` (litellm).

The agent object's ``reply(request) -> completion`` decides; :func:`tool_call_reply` and
:func:`text_reply` build the two kinds of completion. :func:`turn_of` works out which turn a
request is for from the call ids the fake itself gave (``call_<turn>``), so an agent needs no
state to survive a compacted window or a worker that died mid-call.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

__all__ = ["fake_agent_serving", "text_reply", "tool_call_reply", "turn_of"]


class Agent(Protocol):
    def reply(self, request: dict[str, Any]) -> dict[str, Any]: ...


def turn_of(messages: list[dict[str, Any]]) -> int:
    """The turn a request asks for: one past the highest ``call_<n>`` id in it."""
    done = [
        int(c["id"].removeprefix("call_"))
        for m in messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]
    return max(done, default=0) + 1


def tool_call_reply(
    turn: int, name: str, args: dict[str, Any], said: str | None = None
) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": said,
        "tool_calls": [
            {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }
    return _completion(message, "tool_calls")


def text_reply(text: str) -> dict[str, Any]:
    return _completion({"role": "assistant", "content": text}, "stop")


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@contextlib.contextmanager
def fake_agent_serving(agent: Agent) -> Iterator[str]:
    """Serve ``agent`` on a free loopback port until the block ends; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            try:
                raw = json.dumps(agent.reply(body)).encode()
            except ConnectionError:  # the agent dropped the request (a dead worker's)
                return
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the caller may be gone (SIGKILLed)
                self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()
