"""Infrastructure faults never use a stage's attempts; provider failures do.

A call that times out (its worker froze or died: no heartbeat, no answer) more often than the
old five-attempt cap still completes, with the stage on its first attempt. A provider that
keeps failing spends the call's provider budget (its retry-after honoured), which on_fail
counts as one failed attempt, and the stage fails as ``provider_error`` once on_fail is spent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError

from activities.llm import llm_call
from armature_temporal.runtime.llm import import_litellm
from armature_temporal.runtime.models import RunResult
from tests.fakes import HANGING_CALLS, fake_llm_call_hanging, plan_from, start
from tests.unit.test_llm_gateway import FakeOpenAI, completion, fake_openai_server
from worker import ACTIVITIES, build_worker
from workflows.interpreter.retries import PROVIDER_ATTEMPTS

pytestmark = pytest.mark.asyncio(loop_scope="session")

__all__ = ["fake_openai_server"]  # the fixture, shared with the gateway's unit tests

#: More timeouts than the five attempts that used to be a call's whole budget.
TIMEOUTS = 6

HANGING_SPEC = """\
name: hangs-then-answers
model_tiers:
  quick: {provider: simulate, valid_rate: 1.0}
stages:
  - {id: first, role: {name: One, description: start, model_tier: quick}}
  - id: flaky
    depends_on: [first]
    timeout_s: 1s
    role: {name: Two, description: "{{ first.content }}", model_tier: quick}
"""


@pytest.fixture
def hanging_calls() -> Iterator[None]:
    HANGING_CALLS.update(stage="flaky", attempts=TIMEOUTS)
    yield
    HANGING_CALLS.update(stage=None, attempts=0)


async def started_attempts(client: Client, run_id: str) -> dict[str, list[int]]:
    """Temporal's attempt numbers of each stage's llm_call activities (from the history)."""
    handle = client.get_workflow_handle(run_id)
    converter = client.data_converter.payload_converter
    stage_of: dict[int, str] = {}
    attempts: dict[str, list[int]] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = converter.from_payload(event.user_metadata.summary, str)
            stage_of[event.event_id] = summary.split(":")[0]
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            attempts.setdefault(stage_of[attrs.scheduled_event_id], []).append(attrs.attempt)
    return attempts


async def test_a_call_timing_out_more_often_than_the_old_attempt_cap_still_completes(
    client: Client, task_queue: str, hanging_calls: None
) -> None:
    activities = [fake_llm_call_hanging, *(a for a in ACTIVITIES if a is not llm_call)]
    async with build_worker(client, task_queue, activities=activities):
        handle = await start(client, plan_from(HANGING_SPEC), task_queue)
        result = await asyncio.wait_for(handle.result(), timeout=90)

    assert result.state == "completed", result.reason
    flaky = result.stages["flaky"]
    assert flaky.status == "completed" and flaky.output == result.outputs["flaky"]
    # The timeouts were Temporal's retries of one activity, none an attempt of the stage.
    assert flaky.attempts == 1
    assert await started_attempts(client, handle.id) == {"first": [1], "flaky": [TIMEOUTS + 1]}


def provider_spec(base: str) -> str:
    return f"""\
name: provider-down
model_tiers:
  remote:
    provider: openai
    model: gpt-4o-mini
    api_base: {base}
    api_key_env: ARMATURE_TEST_KEY
stages:
  - id: ask
    role: {{name: Asker, description: say hi, model_tier: remote}}
    on_fail: {{loop: {{max: 1}}}}
"""


@pytest.fixture
def provider(
    fake_openai_server: tuple[str, FakeOpenAI], monkeypatch: pytest.MonkeyPatch
) -> tuple[str, FakeOpenAI]:
    """The fake OpenAI-compatible server, and the key its tier reads. litellm is imported
    here: its first import blocks the worker's event loop (and its heartbeats) for seconds."""
    monkeypatch.setenv("ARMATURE_TEST_KEY", "sk-test")
    import_litellm()
    return fake_openai_server


def unavailable(state: FakeOpenAI, times: int) -> None:
    """The fake provider answers the next ``times`` requests 503, asking for 0.05 s."""
    body = {"error": {"message": "overloaded", "type": "server_error", "code": "503"}}
    state.replies.extend([(503, body, {"retry-after": "0.05"})] * times)


async def provider_history(client: Client, run_id: str) -> tuple[list[str], list[str]]:
    """The failure types of the run's failed activities, and the summaries of its timers
    (each asserted to be the provider's 0.05 s retry-after)."""
    converter = client.data_converter.payload_converter
    failures, timers = [], []
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            info = event.activity_task_failed_event_attributes.failure.application_failure_info
            failures.append(info.type)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            attrs = event.timer_started_event_attributes
            assert attrs.start_to_fire_timeout.ToTimedelta() == timedelta(seconds=0.05)
            timers.append(converter.from_payload(event.user_metadata.summary, str))
    return failures, timers


async def test_provider_failures_spend_the_budget_then_on_fail_then_fail_the_stage(
    client: Client, task_queue: str, provider: tuple[str, FakeOpenAI]
) -> None:
    base, state = provider
    attempts = 2  # on_fail.loop.max 1
    # More than enough: a try cut short by the infrastructure (retried, uncounted) uses one.
    unavailable(state, 3 * PROVIDER_ATTEMPTS * attempts)
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(provider_spec(base)), task_queue)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), timeout=60)

    failure: Any = info.value.cause
    result = RunResult.model_validate(failure.details[0])
    ask = result.stages["ask"]
    assert (result.state, ask.status, ask.error_type) == ("failed", "failed", "provider_error")
    assert ask.attempts == attempts
    assert f"failed after {attempts} attempt(s)" in (ask.error or "")
    assert f"the provider failed {PROVIDER_ATTEMPTS} times in a row" in (ask.error or "")
    assert "HTTP 503" in (ask.error or "")
    # Each attempt's budget of provider failures, each an activity of its own that Temporal
    # did not retry; the waits between them were the provider's retry-after, in the workflow.
    failures, timers = await provider_history(client, handle.id)
    assert failures == ["provider_error.server_error"] * (PROVIDER_ATTEMPTS * attempts)
    assert len(state.requests) >= PROVIDER_ATTEMPTS * attempts
    assert len(timers) == (PROVIDER_ATTEMPTS - 1) * attempts
    assert all(t.startswith("ask: provider retry in 0.05s") for t in timers), timers


async def test_a_provider_that_recovers_within_the_budget_costs_no_attempt(
    client: Client, task_queue: str, provider: tuple[str, FakeOpenAI]
) -> None:
    base, state = provider
    unavailable(state, PROVIDER_ATTEMPTS - 1)
    state.replies.extend([(200, completion("hello"), {})] * 5)
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(provider_spec(base)), task_queue)
        result = await asyncio.wait_for(handle.result(), timeout=60)

    assert result.state == "completed", result.reason
    assert result.outputs["ask"] == {"content": "hello"}
    assert result.stages["ask"].attempts == 1
    failures, timers = await provider_history(client, handle.id)
    assert failures == ["provider_error.server_error"] * (PROVIDER_ATTEMPTS - 1)
    assert len(timers) == PROVIDER_ATTEMPTS - 1


async def test_a_provider_error_no_retry_can_fix_fails_the_stage_at_once(
    client: Client, task_queue: str, provider: tuple[str, FakeOpenAI]
) -> None:
    """A 401 fails the same way on every try and attempt: no provider retries, no on_fail
    attempts, the stage fails on its first call with the provider's own complaint."""
    base, state = provider
    body = {"error": {"message": "bad key", "type": "invalid_request_error", "code": "401"}}
    state.replies.extend([(401, body, {})] * 10)
    async with build_worker(client, task_queue):
        handle = await start(client, plan_from(provider_spec(base)), task_queue)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), timeout=60)

    failure: Any = info.value.cause
    ask = RunResult.model_validate(failure.details[0]).stages["ask"]
    assert (ask.status, ask.error_type, ask.attempts) == ("failed", "provider_error", 1)
    assert "bad key" in (ask.error or "")
    failures, timers = await provider_history(client, handle.id)
    assert len(failures) == 1 and failures[0].startswith("provider_error.")
    assert timers == [] and len(state.requests) == 1
