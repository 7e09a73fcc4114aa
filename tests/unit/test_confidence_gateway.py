"""Logprobs through litellm: asked for when the tier allows, read from the response."""

from __future__ import annotations

import math
from typing import Any

import pytest

from armature_temporal.runtime.confidence import confidence_of
from armature_temporal.runtime.llm import complete, token_logprobs
from tests.unit.test_llm_gateway import FakeOpenAI, completion, tier
from tests.unit.test_llm_gateway import fake_openai_server as fake_openai_server  # fixture

ASYNC = pytest.mark.asyncio(loop_scope="session")


def with_logprobs(text: str, values: list[float]) -> dict[str, Any]:
    body = completion(text)
    body["choices"][0]["logprobs"] = {
        "content": [
            {"token": f"t{i}", "logprob": v, "bytes": None, "top_logprobs": []}
            for i, v in enumerate(values)
        ]
    }
    return body


@ASYNC
async def test_logprobs_are_requested_where_litellm_lists_them_and_read_back(
    fake_openai_server: tuple[str, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, state = fake_openai_server
    monkeypatch.setenv("ARMATURE_TEST_KEY", "sk-test")
    state.replies.append((200, with_logprobs("Paris.", [-0.05, -0.2, -0.01]), {}))
    # A vLLM server, logprobs unset: litellm lists logprobs for hosted_vllm.
    vllm = tier(base).model_copy(update={"provider": "hosted_vllm", "model": "llama"})
    result = await complete(
        vllm,
        [{"role": "user", "content": "q"}],
        seed="s",
        role_type="worker",
        output_mode="text",
        output_schema=None,
    )
    assert state.requests[0]["logprobs"] is True
    assert result.logprobs == [-0.05, -0.2, -0.01]
    got = confidence_of(text=result.text, output=None, schema=None, logprobs=result.logprobs)
    assert got.source == "logprobs"
    assert got.value == pytest.approx(math.exp(-0.26 / 3))


@ASYNC
@pytest.mark.parametrize(
    ("setting", "sent"),
    [(False, False), (True, True), (None, False)],  # None: openai at another api_base
)
async def test_a_tier_logprobs_setting_overrides_the_provider_default(
    fake_openai_server: tuple[str, FakeOpenAI],
    monkeypatch: pytest.MonkeyPatch,
    setting: bool | None,
    sent: bool,
) -> None:
    base, state = fake_openai_server
    monkeypatch.setenv("ARMATURE_TEST_KEY", "sk-test")
    state.replies.append((200, completion("Paris."), {}))
    chosen = tier(base).model_copy(update={"logprobs": setting})
    result = await complete(
        chosen,
        [{"role": "user", "content": "q"}],
        seed="s",
        role_type="worker",
        output_mode="text",
        output_schema=None,
    )
    assert ("logprobs" in state.requests[0]) is sent
    assert result.logprobs is None  # the reply carried none


def test_token_logprobs_reads_objects_and_dicts() -> None:
    class Token:
        logprob = -0.5

    class Choice:
        content = (Token(), Token())

    assert token_logprobs(Choice()) == [-0.5, -0.5]
    assert token_logprobs({"content": [{"logprob": -1}]}) == [-1.0]
    assert token_logprobs({"content": None}) is None
    assert token_logprobs(None) is None
