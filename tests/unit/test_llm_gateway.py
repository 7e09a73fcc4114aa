"""The litellm path of the LLM gateway, against a local fake OpenAI-compatible server.

``fake_openai_server`` answers /chat/completions on 127.0.0.1 with canned responses, so the
real litellm client code runs end to end: request shape, JSON mode, usage, and how HTTP
errors are classified (retryable with retry-after, or not).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from armature_temporal.runtime.llm import ProviderError, complete
from armature_temporal.spec.compiler import ResolvedTier

pytestmark = pytest.mark.asyncio(loop_scope="session")


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[int, dict[str, Any], dict[str, str]]] = []


@pytest.fixture
def fake_openai_server() -> Iterator[tuple[str, FakeOpenAI]]:
    state = FakeOpenAI()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            state.requests.append(json.loads(self.rfile.read(length)))
            status, body, headers = state.replies.pop(0)
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1", state
    finally:
        server.shutdown()


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }


def tier(base: str) -> ResolvedTier:
    return ResolvedTier(
        name="small",
        provider="openai",
        model="gpt-4o-mini",
        api_base=base,
        api_key_env="ARMATURE_TEST_KEY",
        max_tokens=50,
    )


async def test_litellm_call_sends_json_mode_and_returns_usage_and_cost(
    fake_openai_server: tuple[str, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, state = fake_openai_server
    monkeypatch.setenv("ARMATURE_TEST_KEY", "sk-test")
    state.replies.append((200, completion('{"answer": 42}'), {}))
    result = await complete(
        tier(base),
        [{"role": "user", "content": "q"}],
        seed="s",
        role_type="worker",
        output_mode="guided_json",
        output_schema={"type": "object"},
    )
    assert result.text == '{"answer": 42}'
    assert result.model == "openai/gpt-4o-mini"
    assert (result.prompt_tokens, result.completion_tokens) == (12, 5)
    assert result.cost_usd > 0  # priced from litellm's bundled cost map
    sent = state.requests[0]
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["max_tokens"] == 50


@pytest.mark.parametrize(
    ("status", "retryable", "kind"),
    [
        (429, True, "rate_limited"),
        (503, True, "server_error"),
        (400, False, "bad_request"),
        (401, False, "auth"),
    ],
)
async def test_http_errors_are_classified_for_temporal_retries(
    fake_openai_server: tuple[str, FakeOpenAI],
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    retryable: bool,
    kind: str,
) -> None:
    base, state = fake_openai_server
    monkeypatch.setenv("ARMATURE_TEST_KEY", "sk-test")
    error = {"error": {"message": "nope", "type": "x", "code": str(status)}}
    state.replies.append((status, error, {"retry-after": "7"}))
    with pytest.raises(ProviderError) as info:
        await complete(
            tier(base),
            [{"role": "user", "content": "q"}],
            seed="s",
            role_type="worker",
            output_mode="text",
            output_schema=None,
        )
    assert info.value.retryable is retryable
    assert info.value.kind == kind
    assert info.value.status == status
    assert len(state.requests) == 1  # num_retries=0: Temporal owns retries
    if status == 429:
        assert info.value.retry_after == 7.0


async def test_missing_api_key_is_a_clear_non_retryable_error(
    fake_openai_server: tuple[str, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, state = fake_openai_server
    monkeypatch.delenv("ARMATURE_TEST_KEY", raising=False)
    with pytest.raises(ProviderError, match=r"\$ARMATURE_TEST_KEY, which is not set") as info:
        await complete(
            tier(base),
            [{"role": "user", "content": "q"}],
            seed="s",
            role_type="worker",
            output_mode="text",
            output_schema=None,
        )
    assert info.value.retryable is False and state.requests == []


async def test_a_local_tier_refuses_tools_with_the_fix() -> None:
    from armature_temporal.runtime.llm import ProviderError, complete
    from armature_temporal.spec.compiler import ResolvedTier

    tier = ResolvedTier(name="mine", provider="local", model="/models/x")
    with pytest.raises(ProviderError, match="provider 'local' does not call tools") as caught:
        await complete(
            tier,
            [{"role": "user", "content": "hi"}],
            seed="s",
            role_type="worker",
            output_mode="text",
            output_schema=None,
            tools=[{"name": "file_read"}],
        )
    assert not caught.value.retryable


@pytest.mark.parametrize("key", [None, "sk-test"])
async def test_a_provider_key_the_worker_lacks_is_named_whatever_the_call_said(
    monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    """A 0.7.0 spec's tier names no api_key_env: litellm reads OPENAI_API_KEY itself. Without
    it (and offline) the call retried for 18 s and said `APIConnectionError (HTTP 500)`, never
    naming the key. Here nothing listens where the provider is, as offline."""
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")
    if key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    legacy = ResolvedTier(name="small", provider="openai", model="gpt-4o-mini")
    with pytest.raises(ProviderError) as info:
        await complete(
            legacy,
            [{"role": "user", "content": "q"}],
            seed="s",
            role_type="worker",
            output_mode="text",
            output_schema=None,
        )
    if key is None:
        assert info.value.retryable is False and info.value.kind == "auth"
        assert "has no API key on the worker: OPENAI_API_KEY is not set" in str(info.value)
        assert "provider: simulate" in str(info.value)
    else:  # with the key, a connection failure is the server's: retried by Temporal
        assert info.value.retryable is True
        assert "API key" not in str(info.value)
