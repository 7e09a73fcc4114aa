"""The HTTP client (armature_temporal.http_client) against ``fake_service``, an in-memory app
answering the run API's contract, served by uvicorn on a free loopback port: real HTTP, real
dropped connections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[dev,serve]'")

import uvicorn

from armature_temporal.http_client import ServiceClient, ServiceError
from armature_temporal.library import RunFailed, RunTimeout
from tests.fake_service import FakeServiceState, fake_service

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKEN = "arm_" + "r" * 43
READER = "arm_" + "o" * 43


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def served(state: FakeServiceState) -> AsyncIterator[str]:
    """``fake_service(state)`` under uvicorn on a free loopback port; yields its base URL."""
    config = uvicorn.Config(fake_service(state), log_level="critical", lifespan="off")
    server = _QuietServer(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        for _ in range(100):
            if server.started:
                break
            await asyncio.sleep(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        server.force_exit = True
        await serving
        sock.close()


def tokened() -> FakeServiceState:
    return FakeServiceState(
        tokens={TOKEN: ("ci-bot", {"read", "run", "approve"}), READER: ("viewer", {"read"})}
    )


async def test_run_returns_the_outputs_of_a_run_that_ends_in_time() -> None:
    async with served(tokened()) as url, ServiceClient(url, TOKEN) as service:
        assert await service.run("quick", {"topic": "tides"}) == {"s": {"echo": {"topic": "tides"}}}


async def test_run_follows_a_run_still_going_when_post_run_answers_202() -> None:
    state = tokened()
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        assert await service.run("slow", {}, poll_s=0.01) == {"s": 42}
    assert state.runs["slow-1"].reads >= 2


async def test_a_failed_run_raises_run_failed_naming_the_stage_and_reason() -> None:
    async with served(tokened()) as url, ServiceClient(url, TOKEN) as service:
        with pytest.raises(RunFailed) as caught:
            await service.run("breaks", {})
    assert caught.value.stage == "s" and caught.value.state == "failed"
    assert "boom" in caught.value.reason and "breaks-1" in str(caught.value)


async def test_result_gives_up_after_timeout_and_the_run_keeps_going() -> None:
    state = tokened()
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("gated", {})
        with pytest.raises(RunTimeout) as caught:
            await handle.result(poll_s=0.01, timeout_s=0.05)
    assert caught.value.run_id == handle.run_id
    assert state.runs[handle.run_id].status == "running"


async def test_an_idempotency_key_starts_one_run_and_says_a_repeat_is_a_duplicate() -> None:
    state = tokened()
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        first = await service.start("gated", {"n": 1}, idempotency_key="ticket-4711")
        again = await service.start("gated", {"n": 1}, idempotency_key="ticket-4711")
        other = await service.start("gated", {"n": 1}, idempotency_key="ticket-4712")
    assert first.run_id == again.run_id != other.run_id
    assert (first.duplicate, again.duplicate) == (False, True)
    assert state.started == [first.run_id, other.run_id]


async def test_start_approve_result_records_the_token_name() -> None:
    state = tokened()
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("gated", {})
        view = await handle.status()
        assert [g.stage for g in view.pending_gates] == ["review"]
        assert await handle.approve("review", comment="fine") == "approved review"
        assert await handle.result(poll_s=0.01) == {"draft": "a draft", "review": None}
    assert state.decisions == [
        {
            "run_id": handle.run_id,
            "stage": "review",
            "decision": "approve",
            "comment": "fine",
            "by": "ci-bot",
        }
    ]


async def test_reject_ends_the_run_rejected_with_the_reason() -> None:
    async with served(tokened()) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("gated", {})
        await handle.reject("review", "wrong tone")
        with pytest.raises(RunFailed) as caught:
            await handle.result(poll_s=0.01)
    assert (caught.value.state, caught.value.stage) == ("rejected", "review")
    assert "wrong tone" in caught.value.reason


async def test_refusals_raise_service_error_with_code_message_fix_and_status() -> None:
    state = tokened()
    async with served(state) as url:
        async with ServiceClient(url, TOKEN) as service:
            handle = await service.start("gated", {})
            with pytest.raises(ServiceError) as not_waiting:
                await handle.approve("no-such-gate")
            with pytest.raises(ServiceError) as unknown:
                await service.start("nope", {})
        async with ServiceClient(url, READER) as reader:
            with pytest.raises(ServiceError) as forbidden:
                await reader.handle(handle.run_id).approve("review")
        async with ServiceClient(url) as anonymous:
            with pytest.raises(ServiceError) as unauthorized:
                await anonymous.handle(handle.run_id).status()
    assert (not_waiting.value.code, not_waiting.value.status) == ("not_waiting", 409)
    assert (unknown.value.code, unknown.value.status) == ("unknown_spec", 404)
    assert (forbidden.value.code, forbidden.value.status) == ("forbidden", 403)
    assert "viewer" in forbidden.value.message and forbidden.value.fix
    assert (unauthorized.value.code, unauthorized.value.status) == ("unauthorized", 401)
    assert state.decisions == []  # nothing was written by the refused decisions
    assert state.runs[handle.run_id].status == "running"


async def test_cancel_answers_the_outcome_and_an_ended_run_is_left_alone() -> None:
    async with served(tokened()) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("gated", {})
        first = await handle.cancel()
        second = await handle.cancel()
    assert (first.status, first.already_ended) == ("cancelled", False)
    assert second.already_ended is True


async def test_an_unreachable_server_is_a_service_error_naming_it() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with ServiceClient(f"http://127.0.0.1:{port}") as service:
        with pytest.raises(ServiceError) as caught:
            await service.health()
    assert caught.value.code == "unreachable" and f"127.0.0.1:{port}" in caught.value.message
    assert "armature serve" in caught.value.fix


async def test_events_follow_a_run_to_its_end() -> None:
    state = tokened()
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("gated", {})
        seen: list[tuple[int, str]] = []

        async def follow() -> None:
            async for event in handle.events():
                seen.append((event.seq, event.type))

        following = asyncio.ensure_future(follow())
        while len(seen) < 3:
            await asyncio.sleep(0.01)
        await handle.approve("review")
        await asyncio.wait_for(following, 10)
    assert seen == [
        (1, "stage_start"),
        (2, "stage_complete"),
        (3, "gate_waiting"),
        (4, "gate_decided"),
        (5, "run_complete"),
    ]


async def test_a_dropped_stream_reconnects_with_last_event_id_losing_and_repeating_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = tokened()
    state.drop_after = 2
    caplog.set_level(logging.CRITICAL)
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("gated", {})
        await handle.approve("review")  # all five events exist; the first connection sends 2
        seqs = [event.seq async for event in handle.events()]
    assert seqs == [1, 2, 3, 4, 5]
    assert state.resumed_from == ["0", "2"]


async def test_events_after_k_give_exactly_the_rest() -> None:
    state = tokened()
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("breaks", {})
        rest = [(e.seq, e.type, e.stage) async for e in handle.events(after=1)]
    assert rest == [(2, "stage_complete", "s"), (3, "run_failed", None)]
    assert state.resumed_from == ["1"]


async def test_events_retry_a_server_that_answers_503_and_stop_on_other_refusals() -> None:
    state = tokened()
    state.drop_after, state.unavailable = 1, 2
    async with served(state) as url, ServiceClient(url, TOKEN) as service:
        handle = await service.start("quick", {})
        seqs = [event.seq async for event in handle.events()]
        with pytest.raises(ServiceError) as caught:
            async for _ in service.handle("no-such-run").events():
                pass
    assert seqs == [1, 2, 3] and state.resumed_from == ["0", "1"]
    assert (caught.value.code, caught.value.status) == ("unknown_run", 404)
